"""Headwater's own consumer with ``client.rack`` on a real 3-broker cluster (KIP-392).

Brokers 0, 1, 2 sit in racks a, b, c on a real ZooKeeper with Kafka's
``RackAwareReplicaSelector``; every topic is placed explicitly with its leader
on broker 0 (rack a), so a consumer in rack b should read from broker 1's
copy. The brokers' per-topic bytes-out metrics (record bytes served to
consumers) say who served it. Through a ``kill -9`` of that follower and
through a leader change, the consumer must read every record once, in order.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from headwater.client.consumer import Consumer
from headwater.client.producer import Producer
from headwater.client.types import RecordMetadata, TopicPartition
from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.zookeeper import fresh_chroot_connect

pytestmark = pytest.mark.cluster

SELECTOR = "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesoutpersec_total"
LEADER, RACK_B, RACK_C = 0, 1, 2


@pytest.fixture
def cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    """A cluster per test: the fault tests kill brokers. FAST_FAILOVER's 3 s ZooKeeper
    sessions and replica lag limit apply."""
    c = Cluster(
        tmp_path,
        fresh_chroot_connect(zookeeper),
        overrides=[SELECTOR, "transaction.state.log.num.partitions=4"],
        metrics=True,
        racks=["a", "b", "c"],
    ).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def slow_isr_cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    """A dead follower stays in the ISR (and the leader keeps naming it) for 20 s."""
    c = Cluster(
        tmp_path,
        fresh_chroot_connect(zookeeper),
        overrides=[SELECTOR, "zookeeper.session.timeout.ms=20000", "replica.lag.time.max.ms=20000"],
        metrics=True,
        racks=["a", "b", "c"],
    ).start()
    try:
        yield c
    finally:
        c.stop()


def make_topic(cluster: Cluster, replicas: list[int]) -> str:
    """One partition on ``replicas`` (the first leads), all of them in sync."""
    name = f"rack-{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()  # alive until the future completes
    admin.create_topics([NewTopic(name, num_partitions=1, replica_assignment=[replicas])])[
        name
    ].result(30)
    wait_for(lambda: cluster.leader(name) == replicas[0], what=f"leader of {name}")
    wait_for(lambda: cluster.isr(name) == set(replicas), what=f"full ISR of {name}")
    return name


def bytes_out(cluster: Cluster, broker: int, topic: str) -> float:
    """Record bytes ``broker`` served to consumers from ``topic``."""
    return cluster.metric(broker, f'{BYTES_OUT}{{topic="{topic}"}}')


def consumer_in_rack(cluster: Cluster, rack: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "client.rack": rack,
            "fetch.max.wait.ms": 100,
            "auto.offset.reset": "earliest",
        }
    )


class Reader:
    """Polls one partition on its own thread; keeps every (offset, value) it is handed."""

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self.consumer = consumer
        self.got: list[tuple[int, int]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        self._thread = threading.Thread(target=self._run, name="rack-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                records = self.consumer.poll(0.2)
            except Exception as exc:  # kept for the test to fail on
                self.errors.append(exc)
                return
            self.got.extend((r.offset, int(r.value or b"-1")) for r in records)

    def wait_for_count(self, count: int, timeout: float = 60.0) -> None:
        wait_for(
            lambda: len(self.got) >= count or self.errors,
            timeout=timeout,
            what=f"{count} records read (have {len(self.got)})",
        )
        assert not self.errors, self.errors

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


class Writer:
    """Our own idempotent ``acks=all`` producer writing 0, 1, 2, ... until stopped."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5}
        )
        self.futures: list[concurrent.futures.Future[RecordMetadata]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rack-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.futures.append(self.producer.send(self.topic, b"%d" % i, partition=0))
            i += 1
            if i % 50 == 0:
                self._stop.wait(0.02)  # a steady stream (~2,500/s), not a flood

    def stop(self) -> int:
        """Stop, wait for every acknowledgement; the number of records written."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            try:
                self.producer.flush(120)
            finally:
                self.producer.close()
        for f in self.futures:
            f.result(0)  # raises if a record was not written
        return len(self.futures)


def assert_once_in_order(got: list[tuple[int, int]], total: int) -> None:
    offsets = [o for o, _ in got]
    values = [v for _, v in got]
    assert len(got) == total, f"read {len(got)} records of {total}"
    assert offsets == list(range(total)), "offsets skipped or repeated"
    assert values == list(range(total)), "values skipped or repeated"


def test_a_consumer_in_rack_b_reads_every_record_from_the_rack_b_follower(
    cluster: Cluster,
) -> None:
    topic = make_topic(cluster, [LEADER, RACK_B, RACK_C])
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as producer:
        for i in range(2000):
            producer.send(topic, b"%d" % i, partition=0)
        producer.flush(60)
    reader = Reader(consumer_in_rack(cluster, "b"), topic)
    try:
        reader.wait_for_count(2000)
    finally:
        reader.stop()
    assert_once_in_order(reader.got, 2000)
    assert bytes_out(cluster, RACK_B, topic) > 2000  # the follower in rack b served them
    assert bytes_out(cluster, LEADER, topic) == 0  # the leader served no records
    assert bytes_out(cluster, RACK_C, topic) == 0


def test_kill_9_of_the_preferred_follower_falls_back_to_the_leader(cluster: Cluster) -> None:
    topic = make_topic(cluster, [LEADER, RACK_B, RACK_C])
    writer = Writer(cluster, topic)
    reader = Reader(consumer_in_rack(cluster, "b"), topic)
    try:
        reader.wait_for_count(1000)
        assert bytes_out(cluster, RACK_B, topic) > 0
        assert bytes_out(cluster, LEADER, topic) == 0
        killed_at = time.monotonic()
        cluster.kill(RACK_B)
        read_at_kill = len(reader.got)
        reader.wait_for_count(read_at_kill + 2000, timeout=60)
        # On the first error, not after metadata.max.age.ms (5 minutes here): the
        # leader served the records, while ZooKeeper still listed the dead follower.
        assert bytes_out(cluster, LEADER, topic) > 0
        assert time.monotonic() - killed_at < 60
        total = writer.stop()
        reader.wait_for_count(total)
    finally:
        writer.stop()
        reader.stop()
    assert_once_in_order(reader.got, total)
    assert bytes_out(cluster, RACK_C, topic) == 0


def test_a_leader_change_keeps_the_consumer_on_its_follower(cluster: Cluster) -> None:
    """Leader 0 dies; broker 2 (rack c, next in the assignment) takes over, and broker 1
    in rack b, now following 2, keeps serving the consumer in rack b."""
    topic = make_topic(cluster, [LEADER, RACK_C, RACK_B])
    writer = Writer(cluster, topic)
    reader = Reader(consumer_in_rack(cluster, "b"), topic)
    try:
        reader.wait_for_count(1000)
        served_before = bytes_out(cluster, RACK_B, topic)
        assert served_before > 0
        assert bytes_out(cluster, LEADER, topic) == 0
        cluster.kill(LEADER)
        wait_for(lambda: cluster.leader(topic) == RACK_C, what="broker 2 leading")
        read_at_change = len(reader.got)
        reader.wait_for_count(read_at_change + 2000, timeout=60)
        total = writer.stop()
        reader.wait_for_count(total)
        assert bytes_out(cluster, RACK_B, topic) > served_before  # still the rack-b follower
    finally:
        writer.stop()
        reader.stop()
    assert_once_in_order(reader.got, total)


def test_a_consumer_without_a_rack_reads_from_the_leader(cluster: Cluster) -> None:
    topic = make_topic(cluster, [LEADER, RACK_B, RACK_C])
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as producer:
        for i in range(300):
            producer.send(topic, b"%d" % i, partition=0)
        producer.flush(60)
    reader = Reader(consumer_in_rack(cluster, ""), topic)
    try:
        reader.wait_for_count(300)
    finally:
        reader.stop()
    assert_once_in_order(reader.got, 300)
    assert bytes_out(cluster, LEADER, topic) > 0
    assert bytes_out(cluster, RACK_B, topic) == bytes_out(cluster, RACK_C, topic) == 0


def test_a_dead_follower_still_in_the_isr_is_avoided(slow_isr_cluster: Cluster) -> None:
    """The leader keeps naming the killed follower while it is in the ISR; the consumer
    reads the rest of the backlog from the leader meanwhile instead of waiting for the
    ISR to shrink (20 s here, 30 s by Kafka's default)."""
    cluster = slow_isr_cluster
    topic = make_topic(cluster, [LEADER, RACK_B, RACK_C])
    total = 6000
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as producer:
        for i in range(total):
            producer.send(topic, b"%d" % i, partition=0)
        producer.flush(60)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "client.rack": "b",
            "fetch.max.wait.ms": 100,
            "max.partition.fetch.bytes": 2048,  # a backlog of many fetches
        }
    )
    tp = TopicPartition(topic, 0)
    got: list[tuple[int, int]] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 30
        while len(got) < 500 and time.monotonic() < deadline:
            got.extend((r.offset, int(r.value or b"-1")) for r in consumer.poll(0.2))
        assert 500 <= len(got) < total
        assert bytes_out(cluster, LEADER, topic) == 0
        cluster.kill(RACK_B)
        killed_at = time.monotonic()
        while len(got) < total and time.monotonic() < killed_at + 30:
            got.extend((r.offset, int(r.value or b"-1")) for r in consumer.poll(0.2))
        took = time.monotonic() - killed_at
    finally:
        consumer.close()
    assert_once_in_order(got, total)
    assert bytes_out(cluster, LEADER, topic) > 0
    assert RACK_B in cluster.isr(topic), f"the ISR shrank first ({took:.1f} s): nothing shown"


def test_read_committed_on_the_follower_stops_at_the_last_stable_offset(
    cluster: Cluster,
) -> None:
    topic = make_topic(cluster, [LEADER, RACK_B, RACK_C])
    tp = TopicPartition(topic, 0)
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as plain:
        for i in range(100):
            plain.send(topic, b"%d" % i, partition=0)
        plain.flush(60)
    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "rack-txn"})
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "client.rack": "b",
            "isolation.level": "read_committed",
            "fetch.max.wait.ms": 100,
        }
    )
    got: list[int] = []

    def read_until(count: int, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while len(got) < count and time.monotonic() < deadline:
            got.extend(int(r.value or b"-1") for r in consumer.poll(0.2))

    try:
        txn.init_transactions()
        txn.begin_transaction()
        for i in range(100, 150):
            txn.send(topic, b"%d" % -i, partition=0)
        txn.abort_transaction()
        txn.begin_transaction()
        for i in range(100, 150):
            txn.send(topic, b"%d" % i, partition=0)
        txn.flush(30)  # written, not committed: the last stable offset stays before them
        consumer.assign([tp])
        consumer.seek(tp, 0)
        read_until(100)
        assert got == list(range(100))
        read_until(101, within=2.0)  # nothing more may come while the transaction is open
        assert got == list(range(100))
        txn.commit_transaction()
        read_until(150)
    finally:
        consumer.close()
        txn.close()
    assert got == list(range(150))  # the aborted ones skipped, the committed ones once
    assert bytes_out(cluster, RACK_B, topic) > 0
    assert bytes_out(cluster, LEADER, topic) == 0
