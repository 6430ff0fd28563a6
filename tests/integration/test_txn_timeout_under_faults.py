"""A transaction the coordinator times out while ZooKeeper is down and a broker is
paused: after the heal, a new producer with the same transactional id must get
through ``init_transactions`` in bounded time and commit (the fault campaign's
copy loop once spun there until its deadline).

The coordinator aborts with a bumped epoch (the old producer is fenced), but
neither its PrepareAbort nor its markers can be replicated while ZooKeeper is
stopped (the ISR cannot shrink) and a replica is SIGSTOPped; the paused broker
then loses its session when ZooKeeper returns, so leaderships move. Every one
of those steps is retried by the coordinator until the transaction is
CompleteAbort, and InitProducerId answers CONCURRENT_TRANSACTIONS only until then.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from headwater.client.admin import AdminClient
from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.broker_process import free_port
from tests.integration.cluster_process import Cluster, read_committed, wait_for

pytestmark = pytest.mark.cluster

TXN_ID = "fenced-app"
TIMEOUT_MS = 4000
OVERRIDES = (
    "transaction.state.log.num.partitions=4",
    "transaction.state.log.replication.factor=3",
    "transaction.state.log.min.isr=2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=300",
    "offsets.topic.replication.factor=3",
    "default.replication.factor=3",
)
#: The bound the fault campaign's copy loop needs: the heal to a working producer.
RECOVERY_S = 30.0


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """This test's own ZooKeeper: it is stopped on purpose (the shared one is not)."""
    server = ZooKeeperServer(tmp_path / "zookeeper", port=free_port(), tick_time_ms=500).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zookeeper.connect_string + "/fenced", overrides=OVERRIDES).start()
    try:
        yield c
    finally:
        if not zookeeper.running:
            zookeeper.start()
        for b in c.brokers:
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGCONT)
        c.stop()


def describe(cluster: Cluster) -> object:
    with AdminClient(cluster.bootstrap, request_timeout_ms=5000) as admin:
        return admin.describe_transaction(TXN_ID)


def transactional_producer(cluster: Cluster) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": TXN_ID,
            "transaction.timeout.ms": TIMEOUT_MS,
            "message.timeout.ms": TIMEOUT_MS,
            "log_level": 2,
        }
    )


def offsets_at(offset: int) -> list[TopicPartition]:
    return [TopicPartition("out", p, offset) for p in range(3)]


def committed_offsets(consumer: Consumer) -> list[int]:
    return [tp.offset for tp in consumer.committed(offsets_at(0), timeout=10)]


def init_within(producer: Producer, seconds: float) -> list[str]:
    """init_transactions, retried on retriable errors until ``seconds`` pass:
    the errors seen (with their time), or an AssertionError naming them."""
    errors: list[str] = []
    started = time.monotonic()
    deadline = started + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"init_transactions not done in {seconds:.0f} s: {errors}")
        try:
            producer.init_transactions(left)
            return errors
        except KafkaException as exc:
            error = exc.args[0]
            errors.append(f"+{time.monotonic() - started:.1f}s {error.name()}: {error.str()}")
            if error.fatal():
                raise AssertionError(f"init_transactions failed for good: {errors}") from exc
            time.sleep(0.2)


def coordinator_abort_lines(cluster: Cluster) -> list[str]:
    needle = f"aborting transaction of {TXN_ID!r}"
    return [line for b in cluster.brokers for line in b.lines if needle in line]


@pytest.mark.timeout(420)
@pytest.mark.parametrize("paused", ["partition-leader", "coordinator"])
def test_a_transaction_timed_out_while_zookeeper_is_down_lets_the_next_producer_in(
    cluster: Cluster, zookeeper: ZooKeeperServer, paused: str
) -> None:
    cluster.create_topic("out", partitions=3, replication=3, **{"min.insync.replicas": "2"})
    producer = transactional_producer(cluster)
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("out", value=b"first-%d" % i, partition=i % 3)
    producer.commit_transaction(60)

    # As the campaign's copy loop: the transaction also commits a group's offsets,
    # so its markers go to a __consumer_offsets partition too.
    group = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "fenced-copy"})
    producer.begin_transaction()
    for i in range(30):
        producer.produce("out", value=b"doomed-%d" % i, partition=i % 3)
    producer.send_offsets_to_transaction(offsets_at(7), group.consumer_group_metadata(), 30)
    assert producer.flush(30) == 0
    coordinator = describe(cluster).coordinator_id  # type: ignore[attr-defined]
    leaders = {cluster.leader("out", p) for p in range(3)}
    # A leader of one of the transaction's partitions that is not its coordinator.
    leader = min(leaders - {coordinator}, default=(coordinator + 1) % 3)

    # ZooKeeper down and that leader frozen: the ISRs cannot shrink, so neither the
    # coordinator's PrepareAbort nor its markers can be acknowledged for now.
    zookeeper.stop()
    frozen = [leader]
    cluster.pause(leader)
    try:
        wait_for(
            lambda: coordinator_abort_lines(cluster),
            timeout=TIMEOUT_MS / 1000 + 30,
            what="the coordinator to time the transaction out while ZooKeeper is down",
        )
        time.sleep(2)  # the abort's writes and markers wait on the frozen replica
        if paused == "coordinator":  # and the coordinator freezes mid-abort too
            cluster.pause(coordinator)
            frozen.append(coordinator)
            time.sleep(1)
    finally:
        zookeeper.start()
    time.sleep(3 + 2)  # past the frozen brokers' sessions: the controller moves leaderships
    for broker_id in frozen:
        cluster.resume(broker_id)
    wait_for(
        lambda: len(cluster.live_broker_ids()) == len(cluster.brokers),
        timeout=60,
        what="every broker registered again",
    )

    # Healed: the next producer of the id must get in within RECOVERY_S.
    successor = transactional_producer(cluster)
    errors = init_within(successor, RECOVERY_S)
    print(f"init_transactions after the heal saw: {errors or 'no error'}")
    successor.begin_transaction()
    for i in range(30):
        successor.produce("out", value=b"second-%d" % i, partition=i % 3)
    successor.send_offsets_to_transaction(offsets_at(3), group.consumer_group_metadata(), 30)
    successor.commit_transaction(60)

    wait_for(
        lambda: describe(cluster).state == "CompleteCommit",  # type: ignore[attr-defined]
        timeout=30,
        what="the successor's transaction complete",
    )
    values = read_committed(cluster.bootstrap, "out", 60, settle_s=2, log_level=2)
    assert sorted(values) == sorted(
        [b"first-%d" % i for i in range(30)] + [b"second-%d" % i for i in range(30)]
    )
    # The successor's offsets, never the aborted transaction's 7 (the group's
    # coordinator may still be moving after the heal: NOT_COORDINATOR is retried).
    wait_for(
        lambda: committed_offsets(group) == [3, 3, 3],
        timeout=60,
        what="the successor's committed offsets",
    )
    group.close()
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)  # the zombie was fenced by the timeout abort
