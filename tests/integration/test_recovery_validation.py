"""Recovery after an unclean shutdown validates every batch past the recovery point
(issue 31 item 4, last point), as Kafka's does: a byte flipped on disk in the active
segment, then ``kill -9`` and a restart, and the log is cut at the bad batch.

Headwater's recovery point is the active segment's base offset: rolled segments are
fsynced when they roll, so only the active one is replayed (Kafka keeps the point in
``recovery-point-offset-checkpoint``; the rule is the same, each batch's CRC-32C
checked from there).
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from headwater.records import iter_batch_headers
from tests.integration.broker_process import BrokerProcess


def read_values(bootstrap: str, topic: str, timeout: float = 15.0) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "r", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_until = time.monotonic() + 3.0
    try:
        while time.monotonic() < min(deadline, quiet_until):
            msg = consumer.poll(0.3)
            value = msg.value() if msg is not None and msg.error() is None else None
            if value is not None:
                got.append(value)
                quiet_until = time.monotonic() + 2.0
    finally:
        consumer.close()
    return got


def test_a_flipped_byte_past_the_recovery_point_is_cut_after_kill_9(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for batch in range(3):
            for i in range(10):
                producer.produce("rot", b"b%d-%d" % (batch, i), partition=0)
            producer.flush(30)  # one batch per flush
        assert len(read_values(broker.bootstrap, "rot")) == 30
    finally:
        broker.kill()
    segment = tmp_path / "data" / "rot-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    headers = list(iter_batch_headers(data))
    assert len(headers) >= 3
    bad = headers[len(headers) // 2]
    kept = sum(h.record_count for h in headers[: len(headers) // 2])
    data[bad.position + bad.size - 1] ^= 0xFF  # a record byte: only the CRC tells
    segment.write_bytes(bytes(data))
    broker.start()
    try:
        values = read_values(broker.bootstrap, "rot")
    finally:
        broker.stop()
    everything = [b"b%d-%d" % (batch, i) for batch in range(3) for i in range(10)]
    assert values == everything[:kept]
    assert segment.stat().st_size == bad.position
    assert any(
        "recovery of" in line and "fails its CRC-32C check" in line for line in broker.lines
    ), broker.lines[-20:]
