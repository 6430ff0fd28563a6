"""AlterReplicaLogDirs (API 34, KIP-113) against a real broker with two data
directories: a partition moves between them while confluent-kafka keeps producing,
every acknowledged record is read back once, the files change directory, and
DescribeLogDirs (kafka-python) lists the partition under its new one; the
error answers (REPLICA_NOT_AVAILABLE for a replica not hosted needs a broker that is
not a replica: a unit test); and ``partitions reassign --execute`` with ``log_dirs``
moves it back."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from headwater.client.cluster import ClusterClient
from headwater.client.partition_admin import alter_replica_log_dirs
from headwater.client.types import TopicPartition as Tp
from tests.integration.broker_process import BrokerProcess

T = TypeVar("T")
LOG_DIR_NOT_FOUND, UNKNOWN_TOPIC = 57, 3


def wait_for(check: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def alter(bootstrap: str, dirs: dict[Tp, str]) -> dict[Tp, int]:
    async def go() -> dict[Tp, int]:
        cluster = ClusterClient(bootstrap)
        try:
            await cluster.refresh_metadata([])
            [broker] = cluster.brokers
            return await alter_replica_log_dirs(cluster, broker, dirs)
        finally:
            await cluster.close()

    return asyncio.run(go())


def listed(bootstrap: str) -> dict[str, set[tuple[str, int, bool]]]:
    """DescribeLogDirs through kafka-python: dir -> {(topic, partition, is_future)}."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        [per_broker] = admin.describe_log_dirs()
    finally:
        admin.close()
    return {
        d["log_dir"]: {
            (t["name"], p["partition_index"], p["is_future_key"])
            for t in d["topics"]
            for p in t["partitions"]
        }
        for d in per_broker["log_dirs"]
    }


def test_a_partition_moves_between_directories_while_produced_to(tmp_path: Path) -> None:
    first, second = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    broker = BrokerProcess(first, args=["--data-dir", f"{first},{second}"]).start()
    try:
        run(broker, first, second, tmp_path)
    finally:
        broker.stop()


def run(broker: BrokerProcess, first: Path, second: Path, tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = NewTopic("moving", 2, 1, config={"segment.bytes": "65536"})
    admin.create_topics([topic])["moving"].result(30)

    acked: list[bytes] = []
    errors: list[Any] = []
    stop = threading.Event()

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append(msg.value())

    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2}
    )

    def produce() -> None:
        i = 0
        while not stop.is_set():
            producer.produce("moving", b"%08d" % i + b"x" * 200, partition=0, on_delivery=delivered)
            producer.poll(0)
            i += 1
            if i % 200 == 0:
                producer.flush(30)

    writer = threading.Thread(target=produce, name="producer")
    writer.start()
    try:
        wait_for(lambda: len(acked) > 3000, 60, "records before the move")
        source = next(d for d in (first, second) if (d / "moving-0").is_dir())
        target = second if source == first else first
        codes = alter(
            broker.bootstrap,
            {
                Tp("moving", 0): str(target),
                Tp("moving", 1): str(target),  # hosted (a cluster of one), never written
                Tp("nothing", 0): str(target),
            },
        )
        assert codes == {Tp("moving", 0): 0, Tp("moving", 1): 0, Tp("nothing", 0): UNKNOWN_TOPIC}
        assert alter(broker.bootstrap, {Tp("moving", 0): str(tmp_path / "elsewhere")}) == {
            Tp("moving", 0): LOG_DIR_NOT_FOUND
        }
        wait_for(
            lambda: (target / "moving-0").is_dir() and not (source / "moving-0").exists(),
            60,
            "the move",
        )
        moved_at = len(acked)
        wait_for(lambda: len(acked) > moved_at + 1000, 60, "records after the move")
    finally:
        stop.set()
        writer.join(60)
    assert producer.flush(60) == 0
    assert errors == []
    assert not [p for d in (first, second) for p in d.iterdir() if p.name.endswith("-future")]

    dirs = listed(broker.bootstrap)
    assert ("moving", 0, False) in dirs[str(target)]
    assert ("moving", 0, False) not in dirs[str(source)]
    # moving-1, moved before its first record, gets its files in the target.
    producer.produce("moving", b"one", partition=1)
    assert producer.flush(30) == 0
    assert (target / "moving-1").is_dir() and not (source / "moving-1").exists()

    assert_read_once(broker.bootstrap, acked)

    # kafka-reassign-partitions' log_dirs: back to the source through the CLI.
    plan = tmp_path / "plan.json"
    [broker_id] = {int(b) for b in admin.list_topics(timeout=30).brokers}
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": "moving", "partition": 0, "replicas": [broker_id],
                     "log_dirs": [str(source)]},
                ],
            }
        )
    )  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "partitions", "reassign", "--execute",
         "--reassignment-json-file", str(plan), "--bootstrap", broker.bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Successfully started moving log directory to {source}" in out.stdout
    wait_for(
        lambda: (source / "moving-0").is_dir() and not (target / "moving-0").exists(),
        60,
        "the move back",
    )
    assert_read_once(broker.bootstrap, acked)


def assert_read_once(bootstrap: str, acked: list[bytes]) -> None:
    """Every acknowledged record of moving-0 is read back exactly once, nothing else."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("moving", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(acked) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                value = msg.value()
                assert value is not None
                got.append(value)
    finally:
        consumer.close()
    counts = Counter(got)
    assert [v for v, n in counts.items() if n > 1] == []
    assert set(got) == set(acked) and len(got) == len(acked)
