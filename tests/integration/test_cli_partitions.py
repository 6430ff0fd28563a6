"""``headwater partitions delete-records``, ``transactions find-hanging|abort``, as users run them.

Subprocesses of ``python -m headwater.cli`` against a real broker; records
come from confluent-kafka and are read back with it, so what the commands
did is checked by a real client, not by the commands' own output alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.broker_process import BrokerProcess
from tests.integration.cluster_process import wait_for
from tests.integration.test_txn_log import RawProducer, _kio
from tests.integration.wire import WireClient

ENTRY = "headwater.cli"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("cli-partitions")) / "data").start()
    try:
        yield b
    finally:
        b.stop()


def run(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", ENTRY, *args, "--bootstrap", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )


def produce(broker: BrokerProcess, topic: str, count: int, partitions: int = 1) -> None:
    assert run(broker, "topics", "create", topic, "--partitions", str(partitions)).returncode == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def read_all(broker: BrokerProcess, topic: str, partition: int, isolation: str) -> list[int]:
    """Every offset a fresh consumer reads from the start of the log (up to its end)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"read-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        tp = TopicPartition(topic, partition, -2)  # OFFSET_BEGINNING: the log start
        consumer.assign([tp])
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        offsets: list[int] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                offsets.append(msg.offset())
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= high:
                break
        return offsets
    finally:
        consumer.close()


def test_delete_records_moves_the_log_start_and_consumers_start_there(
    broker: BrokerProcess,
) -> None:
    produce(broker, "trim", 20, partitions=2)  # offsets 0..9 in each partition

    done = run(
        broker,
        "partitions",
        "delete-records",
        "--topic",
        "trim",
        "--partition",
        "0",
        "--offset",
        "4",
    )
    assert done.returncode == 0, done.stderr
    assert "partition: trim-0\tlow_watermark: 4" in done.stdout.splitlines()
    assert read_all(broker, "trim", 0, "read_uncommitted") == list(range(4, 10))
    assert read_all(broker, "trim", 1, "read_uncommitted") == list(range(10))

    described = run(broker, "topics", "describe", "trim")
    assert "LogStartOffset: 4" in described.stdout

    # Kafka's JSON file; -1 means the high watermark (everything).
    spec = Path(broker.data_dir).parent / "delete.json"
    spec.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": "trim", "partition": 1, "offset": -1}]})
    )
    done = run(broker, "partitions", "delete-records", "--offset-json-file", str(spec))
    assert done.returncode == 0, done.stderr
    assert "partition: trim-1\tlow_watermark: 10" in done.stdout.splitlines()
    assert read_all(broker, "trim", 1, "read_uncommitted") == []


def test_delete_records_past_the_high_watermark_is_a_per_partition_error(
    broker: BrokerProcess,
) -> None:
    produce(broker, "trim-far", 3)
    done = run(broker, "partitions", "delete-records", "--topic", "trim-far", "--offset", "99")
    assert done.returncode == 1
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("partition: trim-far-0")]
    assert "OFFSET_OUT_OF_RANGE (1)" in line
    assert read_all(broker, "trim-far", 0, "read_uncommitted") == [0, 1, 2]


def test_delete_records_of_an_unknown_topic_is_one_line(broker: BrokerProcess) -> None:
    done = run(broker, "partitions", "delete-records", "--topic", "nope", "--offset", "1")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: UNKNOWN_TOPIC_OR_PARTITION (3): topic 'nope' does not exist"
    ]


def test_find_hanging_lists_a_transaction_no_coordinator_knows_and_abort_ends_it(
    broker: BrokerProcess,
) -> None:
    """A transactional batch written without a coordinator (what KIP-890 guards
    against) holds the last stable offset forever: find-hanging names it and
    abort writes the ABORT marker, after which read_committed reads on."""
    assert run(broker, "topics", "create", "txn-log").returncode == 0
    client = WireClient(broker.bootstrap)
    try:
        raw = RawProducer(client, "txn-log")
        assert raw.send([b"dangling-1", b"dangling-2"]) == 0
        other = RawProducer(client, "txn-log")  # a second producer, not transactional
        assert other.send([b"after"], transactional=False, txn_id=None) == 0
    finally:
        client.close()
    # read_committed stops at the open transaction's first offset.
    assert read_all(broker, "txn-log", 0, "read_committed") == []

    found = run(
        broker,
        "transactions",
        "find-hanging",
        "--topic",
        "txn-log",
        "--max-transaction-timeout",
        "0",
        "--json",
    )
    assert found.returncode == 0, found.stderr
    (hanging,) = json.loads(found.stdout)
    assert (hanging["topic"], hanging["partition"]) == ("txn-log", 0)
    assert hanging["producer_id"] == raw.producer_id
    assert hanging["current_txn_start_offset"] == 0

    # Not hanging yet under Kafka's default limit (15 minutes open).
    fresh = run(broker, "transactions", "find-hanging", "--topic", "txn-log", "--json")
    assert json.loads(fresh.stdout) == []

    aborted = run(
        broker,
        "transactions",
        "abort",
        "--topic",
        "txn-log",
        "--partition",
        "0",
        "--start-offset",
        "0",
    )
    assert aborted.returncode == 0, aborted.stderr
    assert f"producer {raw.producer_id}" in aborted.stdout

    # The aborted records stay hidden, the record after them is now readable.
    wait_for(lambda: read_all(broker, "txn-log", 0, "read_committed") == [2], timeout=30)
    assert read_all(broker, "txn-log", 0, "read_uncommitted") == [0, 1, 2]
    again = run(
        broker,
        "transactions",
        "find-hanging",
        "--topic",
        "txn-log",
        "--max-transaction-timeout",
        "0",
        "--json",
    )
    assert json.loads(again.stdout) == []


def test_abort_with_no_transaction_at_the_offset_says_so(broker: BrokerProcess) -> None:
    produce(broker, "no-txn", 2)
    done = run(
        broker,
        "transactions",
        "abort",
        "--topic",
        "no-txn",
        "--partition",
        "0",
        "--start-offset",
        "0",
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "error: no open transaction starts at offset 0 of no-txn-0"


def test_describe_producers_reports_the_idempotent_producer(broker: BrokerProcess) -> None:
    assert run(broker, "topics", "create", "idem").returncode == 0
    client = WireClient(broker.bootstrap)
    try:
        raw = RawProducer(client, "idem")
        assert raw.send([b"a", b"b", b"c"], transactional=False, txn_id=None) == 0
        resp = _kio(client, 61, 0, {"topics": [{"name": "idem", "partition_indexes": [0]}]})
    finally:
        client.close()
    (topic,) = resp.topics
    (partition,) = topic.partitions
    (state,) = partition.active_producers
    assert int(state.producer_id) == raw.producer_id
    assert int(state.last_sequence) == 2
    assert int(state.current_txn_start_offset) == -1
