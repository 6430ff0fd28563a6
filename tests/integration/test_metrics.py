"""/metrics under load from real clients: Kafka's metric names, with their labels.

A broker started with ``--metrics-listen`` (the CLI flag, as an operator
starts it) is produced to and consumed from by confluent-kafka while the
test scrapes; then the figures that can be known exactly (messages in,
consumer lag) are checked against what the clients did.
"""

from __future__ import annotations

import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.broker_process import BrokerProcess, free_port

TOPIC = "orders"
PARTITIONS = 3
GROUP = "dashboard"

Samples = dict[str, list[tuple[dict[str, str], float]]]


class MetricsBroker(BrokerProcess):
    """``headwater serve --metrics-listen`` (the flag, not the property)."""

    def __init__(self, data_dir: Path) -> None:
        self.metrics_port = free_port()
        super().__init__(data_dir, args=["--metrics-listen", f"127.0.0.1:{self.metrics_port}"])

    def scrape(self) -> Samples:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=30).read().decode()
        samples: Samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples.setdefault(s.name, []).append((s.labels, s.value))
        return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    for got, v in samples.get(name, []):
        if all(got.get(k) == want for k, want in labels.items()):
            return v
    raise AssertionError(f"no {name}{labels} in {sorted(samples)[:200]}")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MetricsBroker]:
    b = MetricsBroker(tmp_path / "data")
    b.start()
    yield b
    b.kill()


def _wait_for(check: Callable[[], None], timeout: float = 30.0) -> None:
    """Until ``check`` stops failing its asserts, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_metrics_under_load(broker: MetricsBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)

    stop, stop_producing = threading.Event(), threading.Event()
    produced = [0]

    def produce() -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"})
        while not stop_producing.is_set():
            for i in range(300):
                p.produce(TOPIC, value=b"x" * 100, partition=i % PARTITIONS)
            p.flush(30)
            produced[0] += 300
        assert p.flush(30) == 0

    consumed = [0]

    def consume() -> None:
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": GROUP,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
            }
        )
        c.subscribe([TOPIC])
        try:
            while not stop.is_set():
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    consumed[0] += 1
        finally:
            c.close()

    workers = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for w in workers:
        w.start()
    try:
        # Scrapes under load answer, and grow.
        def loaded() -> None:
            started = time.monotonic()
            s = broker.scrape()
            assert time.monotonic() - started < 5
            assert value(s, "kafka_network_requestmetrics_requestspersec_total", request="Produce")
            assert value(s, "kafka_consumergroup_lag", consumergroup=GROUP, topic=TOPIC) >= 0
            assert consumed[0] > 0

        _wait_for(loaded, 60)
        stop_producing.set()
        workers[0].join(60)

        # Caught up, the consumer's fetches long-poll: Kafka's RemoteTimeMs.
        def long_polled() -> None:
            s = broker.scrape()
            name = "kafka_network_requestmetrics_remotetimems_sum"
            assert value(s, name, request="FetchConsumer") > 100

        _wait_for(long_polled, 60)
        # The first JoinGroup waits group.initial.rebalance.delay.ms (3 s): remote time too.
        joins = broker.scrape()
        name = "kafka_network_requestmetrics_remotetimems_sum"
        assert value(joins, name, request="JoinGroup") >= 2000
    finally:
        stop_producing.set()
        stop.set()
        for w in workers:
            w.join(60)

    s = broker.scrape()
    # Request metrics: Kafka's names and labels; fetches split as in Kafka.
    rps = "kafka_network_requestmetrics_requestspersec_total"
    produce_versions = [lb for lb, _ in s[rps] if lb["request"] == "Produce"]
    assert produce_versions and all(lb["version"].isdigit() for lb in produce_versions)
    for request in ("Produce", "FetchConsumer", "Metadata", "ApiVersions", "OffsetCommit"):
        assert value(s, rps, request=request) > 0, request
    for name in (
        "totaltimems",
        "requestqueuetimems",
        "localtimems",
        "remotetimems",
        "responsequeuetimems",
        "responsesendtimems",
    ):
        family = f"kafka_network_requestmetrics_{name}"
        assert value(s, family + "_count", request="Produce") > 0
        assert value(s, family + "_bucket", request="FetchConsumer", le="+Inf") > 0
        assert value(s, family + "_sum", request="FetchConsumer") >= 0
    # Per-topic traffic, exactly what the producer sent.
    topic_metrics = "kafka_server_brokertopicmetrics_"
    assert value(s, topic_metrics + "messagesinpersec_total", topic=TOPIC) == produced[0]
    assert value(s, topic_metrics + "bytesinpersec_total", topic=TOPIC) > 100 * produced[0]
    assert value(s, topic_metrics + "bytesoutpersec_total", topic=TOPIC) > 0

    # Partition states on a single broker: nothing under-replicated or offline,
    # every partition (min.insync.replicas=1, one replica) at its minimum ISR.
    rm = "kafka_server_replicamanager_"
    assert value(s, rm + "underreplicatedpartitions") == 0
    assert value(s, rm + "underminisrpartitioncount") == 0
    assert value(s, rm + "atminisrpartitioncount") >= PARTITIONS
    assert value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(s, rm + "leadercount") == value(s, rm + "partitioncount") >= PARTITIONS
    assert value(s, rm + "isrshrinks_total") == value(s, rm + "isrexpands_total") == 0

    # Event-loop lag, and prometheus-client's own process and GC collectors.
    assert value(s, "headwater_event_loop_lag_seconds_count") > 0
    assert "headwater_event_loop_lag_max_seconds" in s
    assert value(s, "process_resident_memory_bytes") > 0
    assert value(s, "process_cpu_seconds_total") > 0
    assert "python_gc_collections_total" in s
    assert "python_info" in s


def test_consumer_lag_is_high_watermark_minus_committed(broker: MetricsBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30 * PARTITIONS):
        p.produce(TOPIC, value=b"v", partition=i % PARTITIONS)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP})
    try:
        committed = [TopicPartition(TOPIC, n, 5 * n) for n in range(PARTITIONS)]
        c.commit(offsets=committed, asynchronous=False)
    finally:
        c.close()
    s = broker.scrape()
    for n in range(PARTITIONS):
        labels = {"consumergroup": GROUP, "topic": TOPIC, "partition": str(n)}
        assert value(s, "kafka_consumergroup_lag", **labels) == 30 - 5 * n
        assert value(s, "kafka_consumergroup_current_offset", **labels) == 5 * n


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
