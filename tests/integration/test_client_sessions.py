"""Our consumer's fetch sessions against a real broker: scale, idle cost, restarts.

The broker's Prometheus metrics are the witness: ``headwater_fetch_requests``
counts full and incremental fetches, ``headwater_fetch_request_bytes`` the
bytes of the requests themselves.
"""

from __future__ import annotations

import time
import urllib.request
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from headwater.client.admin import AdminClient
from headwater.client.consumer import Consumer
from headwater.client.producer import Producer
from headwater.client.types import ConsumerRecord, TopicPartition
from tests.integration.broker_process import BrokerProcess, free_port


def _broker(path: Path) -> tuple[BrokerProcess, int]:
    metrics_port = free_port()
    broker = BrokerProcess(path, overrides=[f"headwater.metrics.listen=127.0.0.1:{metrics_port}"])
    return broker.start(), metrics_port


def _metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            label = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{label}}}" if label else sample.name] = sample.value
    return out


FULL = "headwater_fetch_requests_total{kind=full}"
INCREMENTAL = "headwater_fetch_requests_total{kind=incremental}"
REQUEST_BYTES = "headwater_fetch_request_bytes_total"


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 20}) as producer:
        futures = [
            producer.send(topic, f"{tag}-{p}-{i}".encode(), partition=p)
            for i in range(per_partition)
            for p in range(partitions)
        ]
        producer.flush()
        for f in futures:
            f.result(30)


def _poll_until(consumer: Consumer, got: list[ConsumerRecord], n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.poll(0.5))


def _assert_exactly_once_in_order(got: list[ConsumerRecord], expected: dict[int, int]) -> None:
    pairs = Counter((r.partition, r.offset) for r in got)
    assert not [k for k, n in pairs.items() if n > 1], "no record twice"
    by_partition: dict[int, list[int]] = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert {p: len(o) for p, o in by_partition.items() if o} == {
        p: n for p, n in expected.items() if n
    }
    for p, offsets in by_partition.items():
        assert offsets == list(range(expected[p])), f"partition {p} in order from 0"


def test_sessions_over_1000_partitions_deliver_once_and_idle_fetches_name_nothing(
    tmp_path: Path,
) -> None:
    broker, metrics_port = _broker(tmp_path / "data")
    try:
        topic, partitions = "wide", 1000
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topics([(topic, partitions, None)])
        _produce(broker.bootstrap, topic, partitions, 3, "a")
        config = {
            "bootstrap.servers": broker.bootstrap,
            "auto.offset.reset": "earliest",
            "fetch.max.wait.ms": 100,
            "max.partition.fetch.bytes": 4096,
            "fetch.max.bytes": 65536,  # several fetches, so KIP-74 round-robin matters
        }
        with Consumer(config) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            got: list[ConsumerRecord] = []
            _poll_until(consumer, got, 3 * partitions, 60)
            # New records arrive through the incremental session too.
            _produce(broker.bootstrap, topic, 10, 2, "b")
            _poll_until(consumer, got, 3 * partitions + 20, 30)
            expected = {p: 3 + (2 if p < 10 else 0) for p in range(partitions)}
            _assert_exactly_once_in_order(got, expected)

            before = _metrics(metrics_port)
            idle = consumer.poll(1.5)
            after = _metrics(metrics_port)
            assert idle == []
            idle_fetches = after[INCREMENTAL] - before[INCREMENTAL]
            assert idle_fetches >= 5, "the idle consumer keeps long-polling incrementally"
            assert after[FULL] == before[FULL], "no full fetch while idle"
            # A fetch naming 1000 partitions is ~25 kB; an incremental one naming none ~60 B.
            per_fetch = (after[REQUEST_BYTES] - before[REQUEST_BYTES]) / idle_fetches
            assert per_fetch < 120, f"idle fetches carry {per_fetch:.0f} bytes each"
            for tp in (TopicPartition(topic, 0), TopicPartition(topic, 999)):
                assert consumer.position(tp) == expected[tp.partition]
    finally:
        broker.stop()


def test_broker_restart_mid_consume_falls_back_to_a_full_fetch_without_loss_or_duplicates(
    tmp_path: Path,
) -> None:
    broker, metrics_port = _broker(tmp_path / "data")
    try:
        topic, partitions = "restart", 4
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topics([(topic, partitions, None)])
        _produce(broker.bootstrap, topic, partitions, 500, "a")
        config = {
            "bootstrap.servers": broker.bootstrap,
            "auto.offset.reset": "earliest",
            "fetch.max.wait.ms": 100,
            "max.partition.fetch.bytes": 1024,  # ~40 records per partition per fetch
            "reconnect.backoff.max.ms": 200,
        }
        with Consumer(config) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            got: list[ConsumerRecord] = []
            _poll_until(consumer, got, 600, 30)
            assert 600 <= len(got) < 2000, "stopped part-way"
            assert _metrics(metrics_port)[INCREMENTAL] > 0, "a session was in use"

            broker.restart()
            _produce(broker.bootstrap, topic, partitions, 250, "b")
            _poll_until(consumer, got, 3000, 60)

            _assert_exactly_once_in_order(got, dict.fromkeys(range(partitions), 750))
            values = {(r.partition, r.offset): r.value for r in got}
            assert values[(3, 499)] == b"a-3-499" and values[(3, 500)] == b"b-3-0"
            # The fresh broker saw our fallback full fetch, then incremental ones again.
            time.sleep(0.5)
            restarted = _metrics(metrics_port)
            assert restarted[FULL] >= 1
            assert restarted[INCREMENTAL] >= 1
    finally:
        broker.stop()
