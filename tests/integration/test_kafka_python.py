"""kafka-python 3.0.12 with its defaults: idempotent producer, KIP-227 fetch sessions."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.integration.broker_process import BrokerProcess

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
PER_CODEC = 1000


def _create(broker: BrokerProcess, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def _consume_all(broker: BrokerProcess, topic: str, partitions: int, expected: int) -> list:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(records)
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_producer_and_assigned_consumer_round_trip(
    broker: BrokerProcess, codec: str | None
) -> None:
    topic = f"kp-{codec or 'none'}"
    _create(broker, topic, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec)
    sent: dict[int, list[tuple[bytes, bytes, list, int]]] = {p: [] for p in range(PARTITIONS)}
    base_ts = int(time.time() * 1000)
    futures = []
    for i in range(PER_CODEC):
        p = i % PARTITIONS
        key, value = f"k{i}".encode(), f"value-{i}-".encode() * (1 + i % 7)
        headers = [("h", str(i).encode()), ("n", b"")] if i % 3 == 0 else []
        ts = base_ts + i
        futures.append(
            (
                p,
                producer.send(
                    topic, key=key, value=value, headers=headers, partition=p, timestamp_ms=ts
                ),
            )
        )
        sent[p].append((key, value, headers, ts))
    metas = [(p, f.get(timeout=30)) for p, f in futures]
    producer.close()
    for p in range(PARTITIONS):
        offsets = [m.offset for q, m in metas if q == p]
        assert offsets == list(range(len(sent[p]))), "acknowledged offsets are dense per partition"

    got = _consume_all(broker, topic, PARTITIONS, PER_CODEC)
    assert len(got) == PER_CODEC
    for p in range(PARTITIONS):
        recs = [r for r in got if r.partition == p]
        assert [r.offset for r in recs] == list(range(len(sent[p])))
        for r, (key, value, headers, ts) in zip(recs, sent[p], strict=True):
            assert (r.key, r.value, r.timestamp) == (key, value, ts)
            assert [(h[0], h[1]) for h in r.headers] == headers


def test_consumer_uses_incremental_fetch_sessions(broker: BrokerProcess) -> None:
    """kafka-python implements KIP-227: its fetches must carry a session after the first."""
    topic = "kp-sessions"
    _create(broker, topic, 4)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(200):
        producer.send(topic, value=b"x%d" % i, partition=i % 4)
    producer.flush()
    producer.close()
    got = _consume_all(broker, topic, 4, 200)
    assert len(got) == 200
    assert len({(r.partition, r.offset) for r in got}) == 200
