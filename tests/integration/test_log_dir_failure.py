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

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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
        # Broker 1 stops when a write meets its disk: should the records above all have
        # been written before (a fast producer), more writes follow until it stops.
        proc = cluster.brokers[1].proc
        assert proc is not None
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            producer.produce("t", str(total).encode(), partition=0, on_delivery=delivered)
            total += 1
            producer.flush(0.5)
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


def health(bootstrap: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "health", "--json", "--bootstrap", bootstrap],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def jbod_cluster(
    tmp_path: Path, zk_connect: str, topic: str, replicas: list[int]
) -> tuple[Cluster, Path, Path]:
    """A started cluster whose broker 1 has two data directories, and ``topic`` of 4
    partitions on ``replicas`` with min.insync.replicas=2: (cluster, first, second)."""
    first, second = tmp_path / "broker-1-a", tmp_path / "broker-1-b"
    cluster = Cluster(tmp_path, zk_connect)
    cluster.brokers[1].args += ["--data-dir", f"{first},{second}"]
    cluster.start()
    try:
        new = NewTopic(
            topic, 4, replica_assignment=[replicas] * 4, config={"min.insync.replicas": "2"}
        )
        admin = cluster.admin()  # kept until the answer: a dropped client cancels it
        admin.create_topics([new], request_timeout=30)[topic].result(30)
    except BaseException:
        cluster.stop()
        raise
    return cluster, first, second


@pytest.mark.cluster
def test_one_of_two_directories_failing_moves_only_its_partitions(
    tmp_path: Path, zk_connect: str, control: Path
) -> None:
    """JBOD: broker 1 has two data directories; the second fails. Its partitions there
    answer KAFKA_STORAGE_ERROR and their leadership moves; the partitions in the first
    stay led by broker 1, which keeps running; nothing acknowledged is lost. Then the
    first directory fails too: the broker stops with its one line."""
    cluster, first, second = jbod_cluster(tmp_path, zk_connect, "j", [1, 0, 2])
    try:
        for p in range(4):
            wait_for(lambda p=p: cluster.leader("j", p) == 1, timeout=60, what=f"j-{p} on 1")
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
        total = 2000
        for i in range(total):
            producer.produce("j", str(i).encode(), partition=i % 4, on_delivery=delivered)
            producer.poll(0)
            if i == 400:
                assert producer.flush(60) == 0
                in_second = sorted(int(d.name.rsplit("-", 1)[1]) for d in second.glob("j-*"))
                in_first = sorted(int(d.name.rsplit("-", 1)[1]) for d in first.glob("j-*"))
                assert in_second and in_first, (in_first, in_second)
                control.write_text(f"{second}\n")
        assert producer.flush(180) == 0
        assert errors == []
        for p in in_second:
            wait_for(lambda p=p: cluster.leader("j", p) in (0, 2), timeout=60, what="a move")
        assert all(cluster.leader("j", p) == 1 for p in in_first)
        proc = cluster.brokers[1].proc
        assert proc is not None and proc.poll() is None
        assert any("serving the other directories" in x for x in cluster.brokers[1].lines)
        report = wait_for(
            lambda: (h := health(cluster.bootstrap))["offline_log_dirs"] and h,
            timeout=60,
            what="health to name the offline directory",
        )
        assert report["offline_log_dirs"] == [f"1:{second}"]
        listed = subprocess.run(
            [sys.executable, "-m", "headwater.cli", "log-dirs", "--json",
             "--bootstrap", cluster.bootstrap],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        rows = [r for r in json.loads(listed.stdout) if r["broker"] == 1]
        assert {"broker": 1, "log_dir": str(second), "partition": "OFFLINE", "size": -1,
                "offset_lag": -1} in rows  # fmt: skip
        assert {r["partition"] for r in rows if r["log_dir"] == str(first)} >= {
            f"j-{p}" for p in in_first
        }
        values: list[int] = []
        for p in range(4):
            values += consume_partition(cluster.bootstrap, "j", p, total // 4)
        assert sorted(values) == list(range(total))  # every record, once
        # The last directory: the broker stops, saying why in one line.
        control.write_text(f"{second}\n{first}\n")
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            producer.produce("j", b"-1", partition=in_first[0])
            producer.flush(0.5)
        assert exit_status(cluster.brokers[1], timeout=60) == 1
        lines = stop_lines(cluster.brokers[1])
        assert len(lines) == 1 and "last one" in lines[0], lines
        cluster.brokers[1].proc = None
    finally:
        cluster.stop()


def consume_partition(bootstrap: str, topic: str, partition: int, expected: int) -> list[int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    got: list[int] = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() is not None:
                got.append(int(msg.value()))  # type: ignore[arg-type]
        settle = time.monotonic() + 1.0
        while time.monotonic() < settle:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and msg.value() is not None:
                got.append(int(msg.value()))  # type: ignore[arg-type]
    finally:
        consumer.close()
    return got


@pytest.mark.cluster
def test_a_broker_restarts_with_a_directory_still_failing(tmp_path: Path, zk_connect: str) -> None:
    """KIP-112 at start: broker 1's second data directory is gone when it restarts (here
    a regular file where the directory was: mkdir and every scan fail). It starts on
    the first, tells the controller its replicas in the second are offline (they leave
    the ISR and are not re-created empty elsewhere), and rejoins the ISR of the
    partitions in the first; every acknowledged record is still there, once."""
    cluster, first, second = jbod_cluster(tmp_path, zk_connect, "r", [0, 1, 2])
    try:
        for p in range(4):
            wait_for(lambda p=p: cluster.isr("r", p) == {0, 1, 2}, timeout=60, what=f"r-{p} ISR")
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all"}
        )
        total = 400
        for i in range(total):
            producer.produce("r", str(i).encode(), partition=i % 4)
        assert producer.flush(60) == 0
        in_second = sorted(int(d.name.rsplit("-", 1)[1]) for d in second.glob("r-*"))
        in_first = sorted(int(d.name.rsplit("-", 1)[1]) for d in first.glob("r-*"))
        assert in_second and in_first, (in_first, in_second)
        cluster.brokers[1].stop()
        shutil.rmtree(second)
        second.write_bytes(b"the disk is gone")
        cluster.brokers[1].start()
        for p in in_second:
            wait_for(lambda p=p: 1 not in cluster.isr("r", p), timeout=60, what=f"r-{p} w/o 1")
        for p in in_first:
            wait_for(lambda p=p: cluster.isr("r", p) == {0, 1, 2}, timeout=60, what=f"r-{p} ISR")
        assert not any((first / f"r-{p}").exists() for p in in_second)  # not re-created
        lines = cluster.brokers[1].lines
        assert any("is offline: cannot be opened at start" in line for line in lines), lines[-30:]
        report = wait_for(
            lambda: (h := health(cluster.bootstrap))["offline_log_dirs"] and h,
            timeout=60,
            what="health to name the offline directory",
        )
        assert report["offline_log_dirs"] == [f"1:{second}"]
        values: list[int] = []
        for p in range(4):
            values += consume_partition(cluster.bootstrap, "r", p, total // 4)
        assert sorted(values) == list(range(total))
    finally:
        cluster.stop()
