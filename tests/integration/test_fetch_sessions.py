"""KIP-227 with a real client: kafka-python 3.0.12 implements incremental fetch sessions.

A spy proxy between the client and the broker decodes every Fetch, so these
tests assert what was actually said on the wire.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.fetch_spy import FetchExchange, FetchSpy

PARTITIONS = 1000
FETCH_SESSION_ID_NOT_FOUND = 70


class Setup:
    def __init__(self, tmp_path: Path, *overrides: str) -> None:
        self.broker_port = free_port()
        self.metrics_port = free_port()
        self.spy = FetchSpy(("127.0.0.1", self.broker_port))
        self.broker = BrokerProcess(
            tmp_path / "data",
            port=self.broker_port,
            overrides=[
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.spy.port}",
                f"headwater.metrics.listen=127.0.0.1:{self.metrics_port}",
                *overrides,
            ],
        ).start()

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics").read()
        for line in text.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"metric {name} not exported")

    def close(self) -> None:
        self.broker.kill()
        self.spy.close()


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = Setup(tmp_path)
    yield s
    s.close()


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, count: int, partitions: int, tag: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        p.produce(topic, value=f"{tag}-{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def _consumer(bootstrap: str, topic: str, partitions: int) -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=200)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    c.seek_to_beginning()
    return c


def _drain(c: KafkaConsumer, seen: dict[tuple[int, int], bytes], want: int) -> None:
    deadline = time.monotonic() + 60
    while len(seen) < want and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=300).values():
            for r in records:
                key = (r.partition, r.offset)
                assert key not in seen, f"record {key} delivered twice"
                seen[key] = r.value
    assert len(seen) == want


def _poll_for(c: KafkaConsumer, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not c.poll(timeout_ms=200), "no records expected while idle"


def _settle(c: KafkaConsumer, spy: FetchSpy) -> None:
    """Poll until the client has told the broker all its positions: two exchanges
    in a row with no partitions either way (bounded wait; a noisy machine is slow)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert not c.poll(timeout_ms=200), "no records expected while settling"
        done = [e for e in spy.exchanges if e.response_partitions >= 0][-2:]
        if len(done) == 2 and all(
            e.request_partitions == 0 and e.response_partitions == 0 for e in done
        ):
            return
    raise AssertionError("the client never settled into empty incremental fetches")


def _since(spy: FetchSpy, mark: int) -> list[FetchExchange]:
    return [e for e in spy.exchanges[mark:] if e.response_partitions >= 0]


def test_kafka_python_goes_incremental_and_idle_fetches_are_empty(setup: Setup) -> None:
    _create(setup.broker.bootstrap, "wide", PARTITIONS)
    _produce(setup.broker.bootstrap, "wide", 5000, PARTITIONS, "a")
    c = _consumer(setup.spy.bootstrap, "wide", PARTITIONS)
    seen: dict[tuple[int, int], bytes] = {}
    try:
        _drain(c, seen, 5000)
        first = setup.spy.exchanges[0]
        assert (first.session_id, first.epoch) == (0, 0)
        assert first.request_partitions == PARTITIONS
        assert first.response_partitions == PARTITIONS, "a full response lists every partition"
        assert first.response_session_id != 0, "the broker created a session"
        # Let the client settle its positions (kafka-python re-sends partitions whose
        # position moved), then idle: nothing new, so no partitions either way.
        _settle(c, setup.spy)
        mark = len(setup.spy.exchanges)
        read_before = setup.metric("headwater_fetch_partitions_read_total")
        _poll_for(c, 2.0)
        idle = _since(setup.spy, mark)
        assert len(idle) >= 2
        later = _since(setup.spy, 1)
        assert all(e.session_id == first.response_session_id for e in later)
        assert all(e.epoch > 0 for e in later), "requests after the first are incremental"
        assert all(e.request_partitions == 0 and e.response_partitions == 0 for e in idle)
        # ...and the broker did not read the 1,000 cached partitions to learn that.
        assert setup.metric("headwater_fetch_partitions_read_total") == read_before

        # New data on a few partitions: only those come back.
        mark = len(setup.spy.exchanges)
        p = Producer({"bootstrap.servers": setup.broker.bootstrap})
        for q in (3, 500, 999):
            p.produce("wide", value=b"late", partition=q)
        p.flush(10)
        _drain(c, seen, 5003)
        with_data = [e for e in _since(setup.spy, mark) if e.response_partitions > 0]
        assert with_data and all(e.response_partitions <= 3 for e in with_data)
        assert setup.metric("kafka_server_fetchsessioncache_numincrementalfetchsessions") == 1
        assert (
            setup.metric("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached")
            == PARTITIONS
        )
    finally:
        c.close()


def test_broker_restart_falls_back_to_a_full_fetch_and_loses_nothing(setup: Setup) -> None:
    _create(setup.broker.bootstrap, "restart", 100)
    _produce(setup.broker.bootstrap, "restart", 1000, 100, "a")
    c = _consumer(setup.spy.bootstrap, "restart", 100)
    seen: dict[tuple[int, int], bytes] = {}
    try:
        _drain(c, seen, 1000)
        setup.broker.restart()
        mark = len(setup.spy.exchanges)
        _produce(setup.broker.bootstrap, "restart", 1000, 100, "b")
        _drain(c, seen, 2000)
        _settle(c, setup.spy)
        after = _since(setup.spy, mark)
        full = [e for e in after if e.epoch in (0, -1)]
        assert full, "the client re-established its session with a full fetch"
        assert any(e.epoch > 0 and e.response_error == 0 for e in after[after.index(full[0]) :])
        assert sorted(v for v in seen.values() if v.startswith(b"b-")) == sorted(
            f"b-{i}".encode() for i in range(1000)
        )
    finally:
        c.close()


def test_eviction_makes_the_evicted_client_fall_back_and_recover(tmp_path: Path) -> None:
    s = Setup(
        tmp_path,
        "max.incremental.fetch.session.cache.slots=1",
        "min.incremental.fetch.session.eviction.ms=300",
    )
    try:
        _create(s.broker.bootstrap, "small", 10)
        _create(s.broker.bootstrap, "large", 200)
        _produce(s.broker.bootstrap, "small", 100, 10, "s")
        small = _consumer(s.spy.bootstrap, "small", 10)
        seen_small: dict[tuple[int, int], bytes] = {}
        _drain(small, seen_small, 100)
        time.sleep(0.5)  # the small session is now older than the eviction time
        large = _consumer(s.broker.bootstrap, "large", 200)
        # Its first full fetch evicts the smaller, older session; on a busy
        # machine that fetch may take more than one poll to be sent.
        evictions = "kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total"
        deadline = time.monotonic() + 30
        while s.metric(evictions) < 1 and time.monotonic() < deadline:
            large.poll(timeout_ms=200)
        assert s.metric(evictions) == 1
        mark = len(s.spy.exchanges)
        _produce(s.broker.bootstrap, "small", 100, 10, "t")
        _drain(small, seen_small, 200)
        after = _since(s.spy, mark)
        assert any(e.response_error == FETCH_SESSION_ID_NOT_FOUND for e in after)
        assert any(e.session_id == 0 and e.epoch == 0 for e in after), "fell back to (0, 0)"
        small.close()
        large.close()
    finally:
        s.close()
