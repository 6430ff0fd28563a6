"""Transactions end to end with real clients: confluent-kafka, kafka-python, aiokafka.

Each test starts a broker process; the coordinator's abort timer runs every
300 ms so timeouts are observable in seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.client.connection import BrokerConnection
from headwater.protocol.apis import ApiKey
from tests.integration.broker_process import BrokerProcess

FAST_TIMERS = ("transaction.abort.timed.out.transaction.cleanup.interval.ms=300",)
PRODUCER_FENCED = 90
INVALID_PRODUCER_ID_MAPPING = 49


@pytest.fixture
def txn_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides=FAST_TIMERS).start()
    try:
        yield b
    finally:
        b.kill()


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(10)


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 10_000,
            "linger.ms": 0,
            "log_level": 2,  # a broker killed under a live client is expected here
            **extra,
        }
    )


def consume_all(
    bootstrap: str, topic: str, isolation: str, expect: int | None = None, seconds: float = 8.0
) -> list[bytes]:
    """Every value of partition 0 readable at ``isolation`` (stops early at ``expect``)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and (expect is None or len(values) < expect):
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return values


def wait_until(check: Callable[[], bool], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.2)


def test_confluent_commit_abort_commit(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "out")
    producer = txn_producer(bs, "app-1")
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("out", value=b"c1-%d" % i)
    producer.commit_transaction(15)
    producer.begin_transaction()
    for i in range(2):
        producer.produce("out", value=b"aborted-%d" % i)
    producer.flush(10)  # on the broker, then aborted (abort alone would purge them)
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce("out", value=b"c2")
    producer.commit_transaction(15)

    committed = consume_all(bs, "out", "read_committed", expect=4)
    assert committed == [b"c1-0", b"c1-1", b"c1-2", b"c2"]
    everything = consume_all(bs, "out", "read_uncommitted", expect=6)
    assert sorted(everything) == sorted([*committed, b"aborted-0", b"aborted-1"])


def test_zombie_is_fenced(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "out")
    zombie = txn_producer(bs, "shared-id")
    zombie.init_transactions(15)
    zombie.begin_transaction()
    zombie.produce("out", value=b"zombie")
    zombie.flush(10)
    # A second instance with the same transactional.id takes over: the zombie's
    # open transaction is aborted and its epoch fenced.
    successor = txn_producer(bs, "shared-id")
    successor.init_transactions(30)
    successor.begin_transaction()
    successor.produce("out", value=b"successor")
    successor.commit_transaction(15)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(15)
    assert raised.value.args[0].fatal() or "fenced" in str(raised.value).lower()
    assert consume_all(bs, "out", "read_committed", expect=1) == [b"successor"]


def test_consume_transform_produce_commits_offsets_atomically(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "in")
    create_topic(bs, "out")
    plain = Producer({"bootstrap.servers": bs, "log_level": 2})
    for i in range(6):
        plain.produce("in", value=b"%d" % i)
    plain.flush(10)

    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "ctp",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(["in"])
    producer = txn_producer(bs, "ctp-app")
    producer.init_transactions(15)

    def process(batch_size: int, commit: bool) -> None:
        got = []
        deadline = time.monotonic() + 15
        while len(got) < batch_size and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(message)
        assert len(got) == batch_size
        producer.begin_transaction()
        for message in got:
            producer.produce("out", value=b"x" + message.value())
        last = got[-1]
        offsets = [TopicPartition("in", last.partition(), last.offset() + 1)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 15)
        if commit:
            producer.commit_transaction(15)
        else:
            producer.flush(10)
            producer.abort_transaction(15)

    process(3, commit=True)
    committed = consumer.committed([TopicPartition("in", 0)], 10)[0].offset
    assert committed == 3
    # An aborted batch leaves neither output nor an offset commit behind.
    process(3, commit=False)
    assert consumer.committed([TopicPartition("in", 0)], 10)[0].offset == 3
    consumer.close()
    assert consume_all(bs, "out", "read_committed", expect=3) == [b"x0", b"x1", b"x2"]


_CHILD = """
import sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "dying", "log_level": 2,
              "transaction.timeout.ms": 2000})
p.init_transactions(15)
p.begin_transaction()
p.produce("out", value=b"never-committed")
p.flush(10)
print("open", flush=True)
time.sleep(600)
"""


def test_killed_producer_is_aborted_by_its_timeout(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "out")
    child = subprocess.Popen([sys.executable, "-c", _CHILD, bs], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "open"
        # Records after the open transaction are invisible to read_committed
        # while it is open (the LSO is stuck at its first offset).
        plain = Producer({"bootstrap.servers": bs, "log_level": 2})
        plain.produce("out", value=b"after")
        plain.flush(10)
        assert consume_all(bs, "out", "read_committed", seconds=1.0) == []
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    # The coordinator aborts it after transaction.timeout.ms; the LSO moves on.
    assert consume_all(bs, "out", "read_committed", expect=1, seconds=15) == [b"after"]
    described = run_cli(bs, "transactions", "describe", "dying", "--json")
    assert json.loads(described)["state"] == "CompleteAbort"
    assert json.loads(described)["producer_epoch"] == 1  # bumped: the zombie is fenced


def run_cli(bootstrap: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args, "--bootstrap", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def test_cli_lists_and_describes(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "out", partitions=2)
    producer = txn_producer(bs, "cli-app")
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("out", value=b"v", partition=1)
    producer.flush(10)
    listed = run_cli(bs, "transactions", "list").splitlines()
    assert listed[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert listed[1].split()[0] == "cli-app" and listed[1].split()[-1] == "Ongoing"
    table = run_cli(bs, "transactions", "describe", "cli-app").splitlines()
    assert "TransactionDurationMs" in table[0]
    assert table[1].split()[4] == "Ongoing" and table[1].split()[-1] == "out-1"
    producer.commit_transaction(15)
    wait_until(
        lambda: (
            json.loads(run_cli(bs, "transactions", "describe", "cli-app", "--json"))["state"]
            == "CompleteCommit"
        )
    )
    failed = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "transactions", "describe", "nope",
         "--bootstrap", bs],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert failed.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in failed.stderr


def test_kafka_python_transactions(txn_broker: BrokerProcess) -> None:
    from kafka import KafkaProducer

    bs = txn_broker.bootstrap
    create_topic(bs, "out")
    producer = KafkaProducer(bootstrap_servers=bs, transactional_id="kp-app")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"kp-commit")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("out", b"kp-abort")
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("out", b"kp-commit-2")
    producer.commit_transaction()
    producer.close()
    assert consume_all(bs, "out", "read_committed", expect=2) == [b"kp-commit", b"kp-commit-2"]
    assert len(consume_all(bs, "out", "read_uncommitted", expect=3)) == 3


def test_aiokafka_transactions(txn_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer

    bs = txn_broker.bootstrap
    create_topic(bs, "out")

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-app")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("out", b"aio-commit")
            await producer.begin_transaction()
            await producer.send_and_wait("out", b"aio-abort")
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    assert consume_all(bs, "out", "read_committed", expect=1) == [b"aio-commit"]


def test_bad_input_gets_kafka_errors(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "out")

    async def run() -> None:
        conn = await BrokerConnection.open("127.0.0.1", txn_broker.port)
        try:
            ended = await conn.request(
                ApiKey.END_TXN,
                {"transactional_id": "never-seen", "producer_id": 5, "producer_epoch": 0,
                 "committed": True},
            )  # fmt: skip
            assert int(ended.error_code) == INVALID_PRODUCER_ID_MAPPING
            init = await conn.request(
                ApiKey.INIT_PRODUCER_ID,
                {"transactional_id": "bad", "transaction_timeout": 900_001},
            )
            assert int(init.error_code) == 50  # INVALID_TRANSACTION_TIMEOUT
            init = await conn.request(
                ApiKey.INIT_PRODUCER_ID, {"transactional_id": "ok", "transaction_timeout": 5000}
            )
            assert int(init.error_code) == 0
            added = await conn.request(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                {
                    "v3_and_below_transactional_id": "ok",
                    "v3_and_below_producer_id": int(init.producer_id),
                    "v3_and_below_producer_epoch": int(init.producer_epoch),
                    "v3_and_below_topics": [
                        {"name": "out", "partitions": [0]},
                        {"name": "missing", "partitions": [0]},
                    ],
                },
                version=3,
            )
            codes = {
                (t.name, int(p.partition_index)): int(p.partition_error_code)
                for t in added.results_by_topic_v3_and_below
                for p in t.results_by_partition
            }
            assert codes == {("out", 0): 55, ("missing", 0): 3}
            # A stale epoch is fenced: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
            for version, code in ((3, PRODUCER_FENCED), (1, 47)):
                stale = await conn.request(
                    ApiKey.END_TXN,
                    {"transactional_id": "ok", "producer_id": int(init.producer_id),
                     "producer_epoch": int(init.producer_epoch) + 5, "committed": True},
                    version=version,
                )  # fmt: skip
                assert int(stale.error_code) == code
            # TxnOffsetCommit from a generation the group never had.
            stale_commit = await conn.request(
                ApiKey.TXN_OFFSET_COMMIT,
                {
                    "transactional_id": "ok",
                    "group_id": "some-group",
                    "producer_id": int(init.producer_id),
                    "producer_epoch": int(init.producer_epoch),
                    "generation_id": 7,
                    "member_id": "",
                    "topics": [
                        {"name": "out", "partitions": [{"partition_index": 0,
                                                        "committed_offset": 1}]}
                    ],
                },
                version=3,
            )  # fmt: skip
            assert int(stale_commit.topics[0].partitions[0].error_code) == 22
        finally:
            conn.close()

    asyncio.run(run())


def test_broker_kill_mid_transaction_recovers(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "out")
    producer = txn_producer(bs, "crash-app", **{"transaction.timeout.ms": 3000})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("out", value=b"lost-with-the-broker")
    producer.flush(10)
    txn_broker.kill()
    txn_broker.start()
    # The reloaded coordinator still knows the open transaction and aborts it
    # when it times out; then committed data after it becomes readable.
    plain = Producer({"bootstrap.servers": bs, "log_level": 2})
    plain.produce("out", value=b"after-restart")
    plain.flush(10)
    assert consume_all(bs, "out", "read_committed", expect=1, seconds=20) == [b"after-restart"]
    wait_until(
        lambda: (
            json.loads(run_cli(bs, "transactions", "describe", "crash-app", "--json"))["state"]
            == "CompleteAbort"
        )
    )
    # A new instance of the application starts cleanly.
    again = txn_producer(bs, "crash-app")
    again.init_transactions(30)
    again.begin_transaction()
    again.produce("out", value=b"again")
    again.commit_transaction(15)
    assert consume_all(bs, "out", "read_committed", expect=2) == [b"after-restart", b"again"]
