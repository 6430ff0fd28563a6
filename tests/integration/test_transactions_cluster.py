"""Transactions in a three-broker cluster: markers to other leaders (WriteTxnMarkers)
and the kill -9 of a transaction coordinator mid-transaction."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from headwater.client.admin import AdminClient
from tests.integration.cluster_process import Cluster, read_committed, wait_for

pytestmark = pytest.mark.cluster

TXN_OVERRIDES = (
    "transaction.state.log.num.partitions=4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=300",
)


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect, overrides=TXN_OVERRIDES).start()
    try:
        yield c
    finally:
        c.stop()


def coordinator_of(cluster: Cluster, transactional_id: str) -> int:
    with AdminClient(cluster.bootstrap, request_timeout_ms=5000) as admin:
        return admin.describe_transaction(transactional_id).coordinator_id


def state_of(cluster: Cluster, transactional_id: str) -> str:
    with AdminClient(cluster.bootstrap, request_timeout_ms=5000) as admin:
        return admin.describe_transaction(transactional_id).state


def test_a_transaction_survives_the_kill_9_of_its_coordinator(cluster: Cluster) -> None:
    cluster.create_topic("out", partitions=3, replication=3)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": "failover-app",
            "transaction.timeout.ms": 60_000,
            "log_level": 2,
        }
    )
    producer.init_transactions(60)
    # Markers to all three partitions: most of them are led by other brokers.
    producer.begin_transaction()
    for i in range(30):
        producer.produce("out", value=b"first-%d" % i, partition=i % 3)
    producer.commit_transaction(60)

    producer.begin_transaction()
    for i in range(30):
        producer.produce("out", value=b"second-%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    coordinator = coordinator_of(cluster, "failover-app")
    cluster.kill(coordinator)
    # The new leader of the id's __transaction_state partition loads the
    # replicated Ongoing state; the client finds it and commits there.
    producer.commit_transaction(90)
    wait_for(
        lambda: coordinator_of(cluster, "failover-app") != coordinator,
        timeout=60,
        what="a new transaction coordinator",
    )
    wait_for(
        lambda: state_of(cluster, "failover-app") == "CompleteCommit",
        timeout=60,
        what="CompleteCommit on the new coordinator",
    )
    values = read_committed(cluster.bootstrap, "out", 60)
    assert sorted(values) == sorted(
        [b"first-%d" % i for i in range(30)] + [b"second-%d" % i for i in range(30)]
    )


def test_an_abandoned_transaction_is_aborted_by_the_next_coordinator(cluster: Cluster) -> None:
    cluster.create_topic("out", partitions=2, replication=3)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": "abandoned",
            "transaction.timeout.ms": 3000,
            "log_level": 2,
        }
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("out", value=b"never", partition=0)
    producer.produce("out", value=b"never", partition=1)
    assert producer.flush(30) == 0
    coordinator = coordinator_of(cluster, "abandoned")
    cluster.kill(coordinator)
    # Nobody ends the transaction: the new coordinator aborts it on timeout,
    # and every partition's LSO moves past it.
    wait_for(
        lambda: state_of(cluster, "abandoned") == "CompleteAbort",
        timeout=90,
        what="the timed-out transaction aborted",
    )
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    plain.produce("out", value=b"after", partition=0)
    plain.produce("out", value=b"after", partition=1)
    assert plain.flush(30) == 0
    assert read_committed(cluster.bootstrap, "out", 2) == [b"after", b"after"]
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)  # the zombie is fenced
