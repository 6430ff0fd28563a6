"""A failing log directory (issue 31 item 3, KIP-112) on real broker processes.

A real failing device is not available here (no /dev/mapper, so no device-mapper
``error`` target): the brokers run with ``HEADWATER_TEST_DISK_FAULTS`` naming a control
file, and writing a data directory's path into it makes every segment write, fsync
and read under it fail with EIO (headwater/log/disk_io.py). With one data directory
that directory is the last one: the broker stops with exit status 1 and one line, and
on a cluster the controller moves its leaderships to the other in-sync replicas at
once (the broker closes its ZooKeeper session on the way out).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import NewTopic

from headwater.log.disk_io import CONTROL_ENV
from tests.integration.broker_process import BrokerProcess
from tests.integration.cluster_process import Cluster, wait_for

STOP_LINE = "stopping: log directory"


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fault control file every broker started by this test reads (empty: no fault)."""
    path = tmp_path / "disk-faults"
    path.write_text("")
    monkeypatch.setenv(CONTROL_ENV, str(path))
    return path


def exit_status(broker: BrokerProcess, timeout: float) -> int:
    proc = broker.proc
    assert proc is not None
    code = wait_for(lambda: proc.poll() is not None, timeout=timeout, what="the broker to stop")
    assert code
    return int(proc.returncode)


def stop_lines(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.lines if STOP_LINE in line]


def consume_values(bootstrap: str, topic: str, expected: int, timeout: float = 90) -> list[int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() is not None:
                got.append(int(msg.value()))  # type: ignore[arg-type]
        # A little longer: a duplicate arriving late is counted too.
        settle = time.monotonic() + 1.5
        while time.monotonic() < settle:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and msg.value() is not None:
                got.append(int(msg.value()))  # type: ignore[arg-type]
    finally:
        consumer.close()
    return got


def test_the_only_directory_failing_stops_the_broker_with_one_line(
    tmp_path: Path, control: Path
) -> None:
    broker = BrokerProcess(tmp_path / "data").start(timeout=60)
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20_000})
        for i in range(10):
            producer.produce("t", str(i).encode())
        assert producer.flush(60) == 0
        control.write_text(f"{tmp_path / 'data'}\n")
        # The seam rereads its control file every 100 ms: write until the broker stops.
        proc = broker.proc
        assert proc is not None
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            producer.produce("t", b"after")
            producer.flush(0.5)
        assert exit_status(broker, timeout=60) == 1
        lines = stop_lines(broker)
        assert len(lines) == 1, broker.lines[-20:]
        assert "last one" in lines[0] and "I/O error" in lines[0]
        assert "Traceback" not in "\n".join(broker.lines)
    finally:
        broker.kill()


@pytest.mark.cluster
def test_a_failed_leader_directory_moves_leadership_and_loses_nothing(
    tmp_path: Path, zk_connect: str, control: Path
) -> None:
    cluster = Cluster(tmp_path, zk_connect).start()
    try:
        admin = cluster.admin()
        topic = NewTopic(
            "t", 1, replica_assignment=[[1, 0, 2]], config={"min.insync.replicas": "2"}
        )
        admin.create_topics([topic], request_timeout=30)["t"].result(30)
        wait_for(lambda: cluster.leader("t") == 1, timeout=60, what="broker 1 leading t")
        wait_for(lambda: cluster.isr("t") == {0, 1, 2}, timeout=60, what="full ISR")
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )
        total = 3000
        for i in range(total):
            producer.produce("t", str(i).encode(), partition=0, on_delivery=delivered)
            producer.poll(0)
            if i == 1000:
                assert producer.flush(60) == 0
                control.write_text(f"{tmp_path / 'broker-1'}\n")
        assert producer.flush(180) == 0
        assert errors == []
        assert exit_status(cluster.brokers[1], timeout=60) == 1
        assert len(stop_lines(cluster.brokers[1])) == 1
        cluster.brokers[1].proc = None  # it stopped by itself
        assert cluster.leader("t") in (0, 2)
        values = consume_values(cluster.bootstrap, "t", total)
        assert sorted(values) == list(range(total))  # every record, once
    finally:
        cluster.stop()
