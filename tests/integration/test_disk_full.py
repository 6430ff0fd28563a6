"""A full disk (issue 31 item 2), on a real small filesystem: a 32 MiB ext4 image on a
loop device, mounted as the broker's data directory.

Below ``log.dir.free.space.min.bytes`` Produce is answered KAFKA_STORAGE_ERROR per
partition (never a closed connection), an idempotent producer keeps its epoch and
sequence, fetches keep serving, ``headwater health`` and the metrics name the
directory, and writes resume by themselves once space is freed. The second test sets
the floor to 0 and fills the volume for real: the write meets ENOSPC and gets the same
answer. Needs root (mount); skipped with the reason when mounting is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from tests.integration.broker_process import BrokerProcess, free_port

IMAGE_BYTES = 32 << 20


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A fresh 32 MiB ext4 (no reserved blocks) mounted on a loop device; always unmounted
    and detached at the end, also when the test fails."""
    if os.geteuid() != 0:
        pytest.skip("mounting a loop device needs root")
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 is not installed")
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(IMAGE_BYTES)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"mount -o loop refused: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        listed = subprocess.run(
            ["losetup", "-j", str(image)], capture_output=True, text=True
        ).stdout
        for line in listed.splitlines():
            subprocess.run(["losetup", "-d", line.split(":", 1)[0]], capture_output=True)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(mount: Path, leave: int) -> Path:
    """Write a filler file until at most ``leave`` bytes are free (or the volume is full)."""
    filler = mount / "filler"
    chunk = b"\0" * (256 << 10)
    with open(filler, "ab") as f:
        while free_bytes(mount) > leave:
            try:
                f.write(chunk[: max(4096, min(len(chunk), free_bytes(mount) - leave))])
                f.flush()
                os.fsync(f.fileno())
            except OSError:
                break
    return filler


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()  # type: ignore[no-any-return]


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def produce(config: dict[str, object], topic: str, values: list[bytes]) -> list[KafkaError | None]:
    """Send and flush; each record's delivery error (None: written)."""
    results: list[KafkaError | None] = [None] * len(values)
    seen = [False] * len(values)
    producer = Producer(config)

    def report(i: int) -> Callable[[KafkaError | None, object], None]:
        def cb(err: KafkaError | None, _msg: object) -> None:
            results[i], seen[i] = err, True

        return cb

    for i, value in enumerate(values):
        producer.produce(topic, value, partition=0, on_delivery=report(i))
        producer.poll(0)
    producer.flush(60)
    assert all(seen)
    return results


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    # Assigned, not subscribed: on a truly full disk the group coordinator cannot write.
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            value = msg.value() if msg is not None and msg.error() is None else None
            if value is not None:
                got.append(value)
    finally:
        consumer.close()
    return got


def health(bootstrap: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "health", "--json", "--bootstrap", bootstrap],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_below_the_floor_produce_gets_storage_error_and_resumes_when_space_returns(
    small_fs: Path,
) -> None:
    data = small_fs / "data"
    metrics_port = free_port()
    broker = BrokerProcess(
        data,
        overrides=["log.dir.free.space.min.bytes=8388608", "log.segment.bytes=1048576"],
        args=["--metrics-listen", f"127.0.0.1:{metrics_port}"],
    ).start()
    try:
        # librdkafka refuses retries=0 with idempotence: one retry, then the error.
        idempotent = {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "retries": 1,
            "linger.ms": 5,
        }
        no_retries = {"bootstrap.servers": broker.bootstrap, "retries": 0, "linger.ms": 5}
        assert produce(idempotent, "disk", [b"before-%d" % i for i in range(100)]) == [None] * 100
        filler = fill(small_fs, leave=4 << 20)
        assert free_bytes(small_fs) < 8 << 20
        # The broker re-reads free space at most every 250 ms: wait until it has seen the
        # filler (a fast fill and a fast producer fit inside one reading otherwise).
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        full_line = f'headwater_log_dir_full{{log_dir="{data.resolve()}"}} 1.0'
        wait_until(
            "the broker to see the disk below its floor", lambda: full_line in scrape(metrics_url)
        )
        # Refused before the disk is truly full, as KAFKA_STORAGE_ERROR (not a transport
        # error), and the idempotent producer is not told its sequence is out of order.
        refused = produce(no_retries, "disk", [b"refused-%d" % i for i in range(20)])
        codes = {err.code() for err in refused if err is not None}
        assert codes == {KafkaError.KAFKA_STORAGE_ERROR}, refused
        refused = produce(idempotent, "disk", [b"refused-%d" % i for i in range(20)])
        codes = {err.code() for err in refused if err is not None}
        assert codes == {KafkaError.KAFKA_STORAGE_ERROR}, refused
        # Reads keep working while the directory is full.
        assert len(consume_all(broker.bootstrap, "disk", 100)) == 100
        report = health(broker.bootstrap)
        assert report["full_log_dirs"] == [f"0:{data.resolve()}"]
        assert report["healthy"] is False
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
            scraped = r.read().decode()
        assert f'headwater_log_dir_full{{log_dir="{data.resolve()}"}} 1.0' in scraped
        # librdkafka's default producer retries through the full disk; space is freed
        # meanwhile and every record lands once, without a restart.
        default = {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True}
        producer = Producer(default)
        delivered: list[KafkaError | None] = []
        for i in range(50):
            producer.produce(
                "disk", b"after-%d" % i, partition=0, on_delivery=lambda e, m: delivered.append(e)
            )
        producer.poll(1.0)
        assert delivered == []  # still retrying: the disk is full
        filler.unlink()
        producer.flush(60)
        assert delivered == [None] * 50
        # The same idempotent producer as before continues without OutOfOrderSequence.
        assert produce(idempotent, "disk", [b"later-%d" % i for i in range(10)]) == [None] * 10
        values = consume_all(broker.bootstrap, "disk", 160)
        assert sorted(values) == sorted(
            [b"before-%d" % i for i in range(100)]
            + [b"after-%d" % i for i in range(50)]
            + [b"later-%d" % i for i in range(10)]
        )
        assert free_bytes(small_fs) > 8 << 20, free_bytes(small_fs)
        report = health(broker.bootstrap)
        assert report["full_log_dirs"] == [], (report, free_bytes(small_fs))
    finally:
        broker.stop()
    text = "\n".join(broker.lines)
    assert "Traceback" not in text
    assert "OutOfOrderSequence" not in text
    warned = [line for line in broker.lines if "produce to disk-0 refused" in line]
    assert len(warned) == 1, warned  # one WARNING per partition per minute


def test_a_truly_full_volume_answers_storage_error_not_a_closed_connection(
    small_fs: Path,
) -> None:
    data = small_fs / "data"
    broker = BrokerProcess(data, overrides=["log.dir.free.space.min.bytes=0"]).start()
    try:
        config = {"bootstrap.servers": broker.bootstrap, "retries": 0, "linger.ms": 5}
        assert produce(config, "full", [b"a-%d" % i for i in range(10)]) == [None] * 10
        filler = fill(small_fs, leave=0)
        big = [os.urandom(64 << 10) for _ in range(8)]
        errors = produce(config, "full", big)
        codes = {err.code() for err in errors if err is not None}
        assert codes == {KafkaError.KAFKA_STORAGE_ERROR}, errors
        assert len(consume_all(broker.bootstrap, "full", 10)) == 10
        filler.unlink()
        assert produce(config, "full", [b"b-%d" % i for i in range(10)]) == [None] * 10
        assert len(consume_all(broker.bootstrap, "full", 20)) == 20
    finally:
        broker.stop()
    assert "Traceback" not in "\n".join(broker.lines)
