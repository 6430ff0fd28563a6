"""Partition-state and replication metrics of a 3-broker cluster through a broker's loss.

What an operator's dashboard shows when a broker dies: partitions under-replicated
and at their minimum ISR, ISR shrinks, a partition whose only replica died counted
offline by the controller; and after the broker returns, ISR expands and nothing
under-replicated.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from tests.integration.cluster_process import Cluster, wait_for

pytestmark = pytest.mark.cluster

RM = "kafka_server_replicamanager_"
CONTROLLER = "kafka_controller_kafkacontroller_"


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect, metrics=True, overrides=["min.insync.replicas=2"]).start()
    try:
        yield c
    finally:
        c.stop()


def total(c: Cluster, name: str, brokers: tuple[int, ...] = (0, 1, 2)) -> float:
    return sum(c.metric(b, name) for b in brokers)


def test_partition_states_through_a_broker_loss(cluster: Cluster) -> None:
    c = cluster
    c.create_topic("replicated", partitions=3, replication=3)
    victim = next(b for b in (0, 1, 2) if b != c.controller_id())
    survivors = tuple(b for b in (0, 1, 2) if b != victim)
    admin = c.admin()
    solo = NewTopic("solo", 1, replica_assignment=[[victim]])
    admin.create_topics([solo], request_timeout=30)["solo"].result(30)
    wait_for(lambda: c.all_have_leaders("solo", 1), what="leader of solo")
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce("replicated", value=b"r%d" % i, partition=i % 3)
    assert producer.flush(30) == 0

    wait_for(lambda: total(c, RM + "underreplicatedpartitions") == 0, what="all in sync")
    assert total(c, RM + "atminisrpartitioncount") == 0  # ISR 3 > min 2
    assert total(c, CONTROLLER + "activecontrollercount") == 1
    assert total(c, CONTROLLER + "offlinepartitionscount") == 0
    assert total(c, "kafka_network_requestmetrics_requestspersec_total") > 0
    wait_for(
        lambda: total(c, "kafka_server_brokertopicmetrics_replicationbytesoutpersec_total") > 0,
        what="followers' fetches counted",
    )
    assert total(c, "kafka_server_brokertopicmetrics_messagesinpersec_total") == 300
    shrinks_before = total(c, RM + "isrshrinks_total")

    c.kill(victim)
    wait_for(
        lambda: total(c, RM + "underreplicatedpartitions", survivors) == 3,
        timeout=60,
        what="3 partitions under-replicated",
    )
    wait_for(lambda: total(c, RM + "atminisrpartitioncount", survivors) == 3, what="at min ISR")
    assert total(c, RM + "underminisrpartitioncount", survivors) == 0
    # The controller took the dead broker out of the ISRs: as in Kafka, that is
    # not a leader's IsrShrink (those come from a follower that falls behind).
    assert total(c, RM + "isrshrinks_total", survivors) >= shrinks_before
    wait_for(
        lambda: total(c, CONTROLLER + "offlinepartitionscount", survivors) == 1,
        what="the solo partition offline",
    )

    expands_before = total(c, RM + "isrexpands_total", survivors)
    c.restart(victim)
    wait_for(
        lambda: total(c, RM + "underreplicatedpartitions") == 0,
        timeout=60,
        what="back in sync",
    )
    assert total(c, RM + "isrexpands_total") > expands_before
    wait_for(lambda: total(c, CONTROLLER + "offlinepartitionscount") == 0, what="solo back")
