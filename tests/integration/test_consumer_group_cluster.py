"""KIP-848 on a 3-broker ZooKeeper cluster: the group coordinator is killed with
SIGKILL in the middle of a rebalance (issue 29, item 8).

The offsets partition's new leader replays the group's records and carries
on: no partition is ever owned by two members at once, no committed offset
goes backwards, and every record is read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from headwater.coordinator.placement import partition_for
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.test_consumer_group_protocol import Member

pytestmark = pytest.mark.cluster

GROUP, TOPIC, PARTITIONS, TOTAL = "cluster-g", "cluster-t", 6, 3000
OFFSETS_PARTITIONS = 3
OVERRIDES = (
    "group.consumer.session.timeout.ms=6000",
    "group.consumer.min.session.timeout.ms=1000",
    "group.consumer.heartbeat.interval.ms=500",
    f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}",
    "offsets.topic.replication.factor=3",
    "transaction.state.log.num.partitions=1",
)


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect, overrides=OVERRIDES).start()
    try:
        yield c
    finally:
        c.stop()


class Watch:
    """Samples who owns what and the committed offsets, and remembers any violation."""

    def __init__(self, cluster: Cluster, members: list[Member]) -> None:
        self.cluster = cluster
        self.members = members
        self.violations: list[str] = []
        self.highest: dict[int, int] = {}
        self._stop = threading.Event()
        self._probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last_commit_check = 0.0
        while not self._stop.is_set():
            owners: dict[tuple[str, int], str] = {}
            for m in list(self.members):
                for tp in m.assignment():
                    if tp in owners:
                        self.violations.append(f"{tp} owned by {owners[tp]} and {m.name}")
                    owners[tp] = m.name
            if time.monotonic() - last_commit_check > 0.5:
                last_commit_check = time.monotonic()
                self._check_commits()
            time.sleep(0.02)

    def _check_commits(self) -> None:
        try:
            answer = self._probe.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 5)
        except Exception:
            return  # the coordinator is moving
        for tp in answer:
            if tp.error is not None or tp.offset < 0:
                continue
            if tp.offset < self.highest.get(tp.partition, -1):
                self.violations.append(
                    f"committed offset of {tp.partition} went back from "
                    f"{self.highest[tp.partition]} to {tp.offset}"
                )
            self.highest[tp.partition] = max(tp.offset, self.highest.get(tp.partition, -1))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._probe.close()


def test_a_coordinator_killed_mid_rebalance_loses_no_ownership_and_no_commit(
    cluster: Cluster,
) -> None:
    cluster.create_topic(TOPIC, PARTITIONS, 3)

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(TOTAL):
            producer.produce(TOPIC, str(i).encode())
            if i % 100 == 99:
                producer.flush(30)
                time.sleep(0.1)
        assert producer.flush(60) == 0

    producing = threading.Thread(target=produce, daemon=True)
    producing.start()
    members = [Member(cluster.bootstrap, GROUP, [TOPIC], f"c{i}") for i in range(2)]
    watch = Watch(cluster, members)
    try:
        wait_for(
            lambda: [len(m.assignment()) for m in members] == [3, 3],
            60,
            "two members with three partitions each",
        )
        wait_for(lambda: all(m.seen for m in members), 30, "both reading")
        coordinator = cluster.leader("__consumer_offsets", partition_for(GROUP, OFFSETS_PARTITIONS))
        members.append(Member(cluster.bootstrap, GROUP, [TOPIC], "c2"))  # a rebalance starts
        time.sleep(0.3)  # let the heartbeat that starts it reach the coordinator
        cluster.kill(coordinator)
        wait_for(
            lambda: [len(m.assignment()) for m in members] == [2, 2, 2],
            90,
            "three members with two partitions each after the failover",
        )
        producing.join(120)
        wait_for(
            lambda: len({(p, o) for m in members for _, p, o in m.seen}) >= TOTAL,
            90,
            "every record read",
        )
    finally:
        for m in members:
            m.close()
        watch.stop()
    assert not watch.violations, watch.violations[:5]
    seen = {(p, o) for m in members for _, p, o in m.seen}
    assert len(seen) == TOTAL
    ends: dict[int, int] = {}
    for p, o in seen:
        ends[p] = max(ends.get(p, 0), o + 1)
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP})
    try:
        final = probe.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 30)
    finally:
        probe.close()
    assert {tp.partition: tp.offset for tp in final} == ends
