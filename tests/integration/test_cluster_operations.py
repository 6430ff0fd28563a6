"""Operating a three-broker cluster on a real ZooKeeper: DeleteRecords on leaders reaching
followers, ``topics describe`` with a dead broker, controlled shutdown, leader elections."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.integration.cluster_process import Cluster, wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect).start()
    try:
        yield c
    finally:
        c.stop()


def _produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})  # fmt: skip
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(60) == 0


def _earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, partition)
    return int(admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset)


def test_delete_records_reaches_the_followers(cluster: Cluster) -> None:
    cluster.create_topic("trimmed", partitions=1, replication=3, **{"min.insync.replicas": "2"})
    _produce(cluster.bootstrap, "trimmed", 200)
    admin = cluster.admin()
    tp = TopicPartition("trimmed", 0)
    assert (
        admin.delete_records([TopicPartition("trimmed", 0, 150)])[tp].result(30).low_watermark
        == 150
    )  # type: ignore[index]
    # Followers copy the new log start from their fetches (and keep it on disk):
    # after the leader dies, the new leader starts at 150 too.
    leader = cluster.leader("trimmed")

    def followers_start() -> set[str]:
        return {
            (b.data_dir / "trimmed-0" / "log-start-offset").read_text().strip()
            for i, b in enumerate(cluster.brokers)
            if i != leader
        }

    wait_for(lambda: followers_start() == {"150"}, what="followers' log start 150")
    cluster.kill(leader)
    wait_for(lambda: cluster.leader("trimmed") not in (leader, -1), what="a new leader")
    wait_for(lambda: _earliest(cluster.bootstrap, "trimmed") == 150, what="log start 150")


def test_topics_describe_works_right_after_a_broker_dies(cluster: Cluster) -> None:
    cluster.create_topic("described", partitions=3, replication=3)
    cluster.kill(0)
    live = ",".join(b.bootstrap for b in cluster.brokers[1:])
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "topics", "describe", "described",
         "--bootstrap", live],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("Partition:") == 3
    assert time.monotonic() - started < 30
