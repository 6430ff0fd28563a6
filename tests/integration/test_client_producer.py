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
