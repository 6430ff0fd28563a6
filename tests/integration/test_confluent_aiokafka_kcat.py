"""librdkafka (confluent-kafka, kcat) and aiokafka against a real broker, default settings."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.broker_process import BrokerProcess

N = 2000
PARTITIONS = 3


def _create(broker: BrokerProcess, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(20)


def _confluent_consume(broker: BrokerProcess, topic: str, partitions: int, n: int) -> list:
    # Default isolation.level is read_committed: the broker must give a last stable offset.
    c = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m)
        return got
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_round_trip_every_codec(broker: BrokerProcess, codec: str) -> None:
    topic = f"ck-{codec}"
    _create(broker, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5})
    sent = {q: [] for q in range(PARTITIONS)}
    acked: list = []
    for i in range(N):
        q = i % PARTITIONS
        key, value = f"k{i}".encode(), (f"v{i}-" * (1 + i % 5)).encode()
        headers = [("idx", str(i).encode())]
        p.produce(
            topic,
            value=value,
            key=key,
            partition=q,
            headers=headers,
            timestamp=1_700_000_000_000 + i,
            on_delivery=lambda err, msg: acked.append((err, msg)),
        )
        sent[q].append((key, value, 1_700_000_000_000 + i))
    assert p.flush(30) == 0
    assert all(err is None for err, _ in acked)
    got = _confluent_consume(broker, topic, PARTITIONS, N)
    assert len(got) == N
    for q in range(PARTITIONS):
        msgs = [m for m in got if m.partition() == q]
        assert [m.offset() for m in msgs] == list(range(len(sent[q])))
        assert [(m.key(), m.value(), m.timestamp()[1]) for m in msgs] == sent[q]
        assert all(m.headers()[0][0] == "idx" for m in msgs)


def test_aiokafka_round_trip(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    topic = "aio"
    _create(broker, topic)

    async def main() -> list:
        prod = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4")
        await prod.start()
        try:
            for i in range(N):
                await prod.send(
                    topic,
                    key=b"k%d" % i,
                    value=b"v%d" % i,
                    partition=i % PARTITIONS,
                    headers=[("h", b"%d" % i)],
                )
            await prod.flush()
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await cons.start()
        try:
            cons.assign([ATP(topic, q) for q in range(PARTITIONS)])
            await cons.seek_to_beginning()
            got: list = []
            deadline = time.monotonic() + 60
            while len(got) < N and time.monotonic() < deadline:
                batch = await cons.getmany(timeout_ms=500)
                for recs in batch.values():
                    got.extend(recs)
            return got
        finally:
            await cons.stop()

    got = asyncio.run(main())
    assert len(got) == N
    for q in range(PARTITIONS):
        recs = [r for r in got if r.partition == q]
        assert [r.offset for r in recs] == list(range(len(recs)))
        assert all(r.value == b"v%d" % int(r.key[1:]) for r in recs)


@pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat not installed (make test installs it)"
)
def test_kcat_produce_and_consume(broker: BrokerProcess) -> None:
    topic = "kcat"
    _create(broker, topic, 1)
    lines = "".join(f"key{i}:value{i}\n" for i in range(1000))
    subprocess.run(
        ["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-K:", "-z", "snappy"],
        input=lines,
        text=True,
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-e", "-J"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    msgs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [m["offset"] for m in msgs] == list(range(1000))
    assert [(m["key"], m["payload"]) for m in msgs] == [
        (f"key{i}", f"value{i}") for i in range(1000)
    ]
