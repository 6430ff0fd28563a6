"""Headwater's own client against real clients on a real broker, every codec.

Records written by our producer read identically (keys, values, headers,
timestamps, offsets) with kafka-python and confluent-kafka, and records
they write read identically with our consumer. Keyed records land on the
partition Kafka's default partitioner picks.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentTP
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaPythonTP

from headwater.client.admin import AdminClient
from headwater.client.consumer import Consumer
from headwater.client.producer import Producer
from headwater.client.types import TopicPartition
from tests.integration.broker_process import BrokerProcess

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
N = 600

# (partition, offset, key, value, headers, timestamp), the fields every client exposes.
Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]], int]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("interop")) / "data").start()
    try:
        yield b
    finally:
        b.stop()


def _create(broker: BrokerProcess, topic: str, partitions: int = PARTITIONS) -> None:
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics([(topic, partitions, None)])


def _records(
    n: int, base_ts: int
) -> list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]], int]]:
    """(partition, key, value, headers, timestamp): varied sizes, some without key or headers."""
    out = []
    for i in range(n):
        key = None if i % 10 == 0 else f"key-{i}".encode()
        value = (f"value-{i}-".encode() * (1 + i % 13))[: 1 + (i * 37) % 900]
        headers = [("idx", str(i).encode()), ("empty", b"")] if i % 3 == 0 else []
        out.append((i % PARTITIONS, key, value, headers, base_ts + i))
    return out


def _expected(
    records: list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]], int]],
) -> list[Row]:
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    rows = []
    for partition, key, value, headers, ts in records:
        rows.append((partition, next_offset[partition], key, value, headers, ts))
        next_offset[partition] += 1
    return sorted(rows, key=lambda r: (r[0], r[1]))


def _read_ours(broker: BrokerProcess, topic: str, n: int) -> list[Row]:
    rows: list[Row] = []
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(rows) < n and time.monotonic() < deadline:
            for r in c.poll(0.5):
                rows.append((r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp))
    return sorted(rows, key=lambda r: (r[0], r[1]))


def _read_kafka_python(broker: BrokerProcess, topic: str, n: int) -> list[Row]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    rows: list[Row] = []
    try:
        consumer.assign([KafkaPythonTP(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(rows) < n and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                for r in batch:
                    headers = [(k, v) for k, v in r.headers]
                    rows.append((r.partition, r.offset, r.key, r.value, headers, r.timestamp))
    finally:
        consumer.close()
    return sorted(rows, key=lambda r: (r[0], r[1]))


def _read_confluent(broker: BrokerProcess, topic: str, n: int) -> list[Row]:
    consumer = ConfluentConsumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    rows: list[Row] = []
    try:
        consumer.assign([ConfluentTP(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(rows) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            headers = [(k, v) for k, v in (m.headers() or [])]
            rows.append((m.partition(), m.offset(), m.key(), m.value(), headers, m.timestamp()[1]))
    finally:
        consumer.close()
    return sorted(rows, key=lambda r: (r[0], r[1]))


@pytest.mark.parametrize("codec", CODECS)
def test_our_producer_reads_identically_in_kafka_python_and_confluent(
    broker: BrokerProcess, codec: str
) -> None:
    topic = f"ours-{codec}"
    _create(broker, topic)
    records = _records(N, int(time.time() * 1000) - 10_000)
    with Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec}) as producer:
        futures = [
            producer.send(topic, value, key=key, headers=headers, partition=p, timestamp_ms=ts)
            for p, key, value, headers, ts in records
        ]
        producer.flush()
        metadata = [f.result(10) for f in futures]
    expected = _expected(records)
    acked = sorted((m.partition, m.offset) for m in metadata)
    assert acked == [(r[0], r[1]) for r in expected]
    assert _read_kafka_python(broker, topic, N) == expected
    assert _read_confluent(broker, topic, N) == expected
    assert _read_ours(broker, topic, N) == expected


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_and_confluent_records_read_identically_with_our_consumer(
    broker: BrokerProcess, codec: str
) -> None:
    records = _records(N, int(time.time() * 1000) - 10_000)
    expected = _expected(records)

    topic = f"kp-{codec}"
    _create(broker, topic)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec
    )
    for p, key, value, headers, ts in records:
        producer.send(topic, value=value, key=key, headers=headers, partition=p, timestamp_ms=ts)
    producer.flush()
    producer.close()
    assert _read_ours(broker, topic, N) == expected

    topic = f"ck-{codec}"
    _create(broker, topic)
    confluent = ConfluentProducer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5}
    )
    for p, key, value, headers, ts in records:
        confluent.produce(
            topic, value=value, key=key, headers=headers or None, partition=p, timestamp=ts
        )
    assert confluent.flush(30) == 0
    assert _read_ours(broker, topic, N) == expected


def test_keyed_records_land_where_kafka_python_puts_them(broker: BrokerProcess) -> None:
    topic = "keyed"
    _create(broker, topic, partitions=7)
    keys = [f"user-{i}".encode() for i in range(200)]
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        ours = [producer.send(topic, b"v", key=k).result(10).partition for k in keys]
    reference = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        theirs = [reference.send(topic, b"v", key=k).get(10).partition for k in keys]
    finally:
        reference.close()
    assert ours == theirs
    assert len(set(ours)) == 7


def test_acks_zero_and_one_deliver_without_idempotence(broker: BrokerProcess) -> None:
    topic = "acks"
    _create(broker, topic, partitions=1)
    for acks in ("0", "1"):
        with Producer({"bootstrap.servers": broker.bootstrap, "acks": acks}) as producer:
            futures = [producer.send(topic, f"{acks}-{i}".encode(), partition=0) for i in range(50)]
            producer.flush()
            offsets = [f.result(10).offset for f in futures]
        if acks == "0":
            assert offsets == [-1] * 50
        else:
            assert offsets == list(range(50, 100))
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition(topic, 0)])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 20
        while len(values) < 100 and time.monotonic() < deadline:
            values.extend(r.value for r in c.poll(0.5))
    assert values == [f"0-{i}".encode() for i in range(50)] + [f"1-{i}".encode() for i in range(50)]
