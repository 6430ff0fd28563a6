"""Our producer across a broker restart: retries keep order, idempotence drops duplicates."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from headwater.client.admin import AdminClient
from headwater.client.consumer import Consumer
from headwater.client.producer import Producer
from headwater.client.types import ConsumerRecord, TopicPartition
from tests.integration.broker_process import BrokerProcess

PARTITIONS = 2
N = 3000


def test_records_sent_across_a_broker_restart_arrive_once_and_in_order(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topics([("durable", PARTITIONS, None)])
        config = {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 2,
            "reconnect.backoff.max.ms": 200,
            "max.in.flight.requests.per.connection": 5,
        }
        acked = threading.Event()
        with Producer(config) as producer:
            futures = []
            for i in range(N):
                future = producer.send("durable", f"{i}".encode(), partition=i % PARTITIONS)
                futures.append(future)
                if i == N // 3:
                    future.add_done_callback(lambda _f: acked.set())
                if i == N // 3 + 50:
                    assert acked.wait(30)
                    restart = threading.Thread(target=broker.restart)
                    restart.start()
                if i % 100 == 0:
                    time.sleep(0.05)  # keep producing while the broker goes away
            restart.join(60)
            producer.flush(60)
            offsets = [f.result(60).offset for f in futures]
        for p in range(PARTITIONS):
            assert offsets[p::PARTITIONS] == list(range(N // PARTITIONS))

        with Consumer(
            {"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}
        ) as c:
            c.assign([TopicPartition("durable", p) for p in range(PARTITIONS)])
            got: list[ConsumerRecord] = []
            deadline = time.monotonic() + 30
            while len(got) < N and time.monotonic() < deadline:
                got.extend(c.poll(0.5))
            assert c.poll(0.3) == []
        for p in range(PARTITIONS):
            values = [int(r.value or b"-1") for r in got if r.partition == p]
            assert values == list(range(p, N, PARTITIONS))
    finally:
        broker.stop()


def test_send_arrow_interleaves_in_order_with_send_and_reads_back(tmp_path: Path) -> None:
    import pyarrow as pa
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    broker = BrokerProcess(tmp_path / "data").start()
    try:
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topics([("columns", 2, None)])
        config = {
            "bootstrap.servers": broker.bootstrap,
            "compression.type": "lz4",
            "batch.size": 4096,  # several batches per Arrow call
        }
        values = pa.array([b"v%05d" % i if i % 7 else None for i in range(2000)])
        keys = pa.array([f"k{i}" if i % 5 else None for i in range(2000)], pa.string())
        with Producer(config) as producer:
            first = producer.send("columns", b"before", partition=1)
            futures = producer.send_arrow("columns", 1, values, keys, timestamp_ms=1234)
            last = producer.send("columns", b"after", partition=1)
            producer.flush(30)
            assert first.result().offset == 0
            assert len(futures) > 1
            assert futures[0].result().offset == 1
            assert last.result().offset == 2001
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000)
        tp = KafkaTopicPartition("columns", 1)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = [m for m in consumer if m.partition == 1][:2002]
        consumer.close()
        assert [m.value for m in got] == [b"before", *values.to_pylist(), b"after"]
        expected_keys = [None if k is None else k.encode() for k in keys.to_pylist()]
        assert [m.key for m in got[1:-1]] == expected_keys
        assert {m.timestamp for m in got[1:-1]} == {1234}
        assert [m.offset for m in got] == list(range(2002))
    finally:
        broker.stop()
