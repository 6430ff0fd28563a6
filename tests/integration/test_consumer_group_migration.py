"""Online migration of a running classic group to the consumer protocol and back
(issue 29, item 5), with confluent-kafka on one real broker.

A classic cooperative-sticky group of two consumes a six-partition topic while
records keep arriving; its members are replaced one by one by
``group.protocol=consumer`` members (the group becomes a consumer group with
classic members in it), then one by one by classic members again (the group
becomes classic once the last consumer-protocol member leaves). Every member
gets partitions, every record is read and committed once, and the rebalance
callbacks of all members together never show a partition owned twice.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient

import tests.integration.test_consumer_group_protocol as kip848
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_consumer_group_protocol import (
    Member,
    committed,
    consumer_config,
    create_topic,
    describe,
    produce,
    wait_for,
)

GROUP, TOPIC, PARTITIONS = "roll-g", "roll", 6
CLASSIC_SESSION_MS = 6000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = (*kip848.OVERRIDES, "group.initial.rebalance.delay.ms=0")
    b = BrokerProcess(tmp_path_factory.mktemp("migration") / "data", overrides=overrides).start(
        timeout=60
    )
    try:
        yield b
    finally:
        b.stop()


class Ownership:
    """Who owns what, according to every member's rebalance callbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[tuple[str, int], str] = {}
        self.violations: list[str] = []

    def assigned(self, name: str, partitions: list[TopicPartition]) -> None:
        with self.lock:
            for p in partitions:
                key = (p.topic, p.partition)
                holder = self.owner.get(key)
                if holder is not None and holder != name:
                    self.violations.append(f"{key} given to {name} while {holder} owns it")
                self.owner[key] = name

    def released(self, name: str, partitions: list[TopicPartition]) -> None:
        with self.lock:
            for p in partitions:
                key = (p.topic, p.partition)
                if self.owner.get(key) == name:
                    del self.owner[key]


class RollingMember(Member):
    """The KIP-848 tests' member, speaking either protocol, reporting to `Ownership`."""

    def __init__(
        self,
        broker: BrokerProcess,
        name: str,
        protocol: str,
        owners: Ownership,
        group: str = GROUP,
        topic: str = TOPIC,
    ) -> None:
        self.owners = owners
        self.protocol = protocol
        self.most_owned = 0
        #: Periodic commits refused in a race with a rebalance, and retried.
        self.refused: list[str] = []

        def config(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
            settings = consumer_config(bootstrap, group, **extra)
            if protocol == "classic":
                settings.update(
                    {
                        "group.protocol": "classic",
                        "partition.assignment.strategy": "cooperative-sticky",
                        "session.timeout.ms": CLASSIC_SESSION_MS,
                        "heartbeat.interval.ms": 500,
                    }
                )
            return settings

        with mock.patch.object(kip848, "consumer_config", config):
            super().__init__(broker, group, [topic], name)

    def _commit(self, partitions: list[TopicPartition] | None = None) -> None:
        """The helper's commit, except that a refused periodic commit is retried by the
        next one: an epoch or generation that changed while the commit was on its way
        (STALE_MEMBER_EPOCH, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS) is a race the
        protocol allows, and the client learns the new one from its next heartbeat."""
        attempted = dict(self._positions)
        before = len(self.errors)
        super()._commit(partitions)
        if len(self.errors) == before or partitions is not None:
            return
        self.refused.extend(self.errors[before:])
        del self.errors[before:]
        for key, offset in attempted.items():
            if key in self.owned:
                self._positions.setdefault(key, offset)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owners.assigned(self.name, partitions)
        super()._on_assign(consumer, partitions)
        self.most_owned = max(self.most_owned, len(self.owned))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        super()._on_revoke(consumer, partitions)
        self.owners.released(self.name, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        super()._on_lost(consumer, partitions)
        self.owners.released(self.name, partitions)


def group_type(broker: BrokerProcess, group: str = GROUP) -> ConsumerGroupType:
    """The group's type as ListGroups (v5) says it."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups().result(30)
    return next(g.type for g in listed.valid if g.group_id == group)


def test_a_running_classic_group_rolls_to_the_consumer_protocol_and_back(
    broker: BrokerProcess,
) -> None:
    create_topic(broker, TOPIC, PARTITIONS)
    owners = Ownership()
    stop = threading.Event()
    produced = [0]

    def keep_producing() -> None:
        while not stop.is_set():
            produce(broker, TOPIC, range(produced[0], produced[0] + 100))
            produced[0] += 100
            stop.wait(0.1)

    producer = threading.Thread(target=keep_producing, name="producer", daemon=True)
    members: list[RollingMember] = []

    def start(name: str, protocol: str) -> RollingMember:
        member = RollingMember(broker, name, protocol, owners)
        members.append(member)
        return member

    def balanced(a: RollingMember, b: RollingMember, what: str) -> None:
        wait_for(
            lambda: len(a.assignment()) == len(b.assignment()) == PARTITIONS // 2,
            40,
            what,
        )
        seen = (len(a.seen), len(b.seen))
        wait_for(
            lambda: len(a.seen) > seen[0] and len(b.seen) > seen[1], 20, f"both reading: {what}"
        )

    def alone(member: RollingMember, what: str) -> None:
        wait_for(lambda: len(member.assignment()) == PARTITIONS, 40, what)

    producer.start()
    try:
        c1, c2 = start("classic-1", "classic"), start("classic-2", "classic")
        balanced(c1, c2, "the classic group of two")
        assert group_type(broker) is ConsumerGroupType.CLASSIC

        # Upgrade, member by member.
        c1.close()
        alone(c2, "classic-2 to take everything")
        n1 = start("consumer-1", "consumer")
        balanced(c2, n1, "a consumer-protocol member beside a classic one")
        assert group_type(broker) is ConsumerGroupType.CONSUMER
        c2.close()
        alone(n1, "consumer-1 to take everything")
        n2 = start("consumer-2", "consumer")
        balanced(n1, n2, "two consumer-protocol members")

        # Downgrade, member by member.
        n1.close()
        alone(n2, "consumer-2 to take everything")
        c3 = start("classic-3", "classic")
        balanced(n2, c3, "a classic member joining the consumer group")
        assert group_type(broker) is ConsumerGroupType.CONSUMER
        n2.close()
        alone(c3, "classic-3 to take everything")
        assert group_type(broker) is ConsumerGroupType.CLASSIC
        c4 = start("classic-4", "classic")
        balanced(c3, c4, "the classic group of two again")
    finally:
        stop.set()
        producer.join(30)
    total = produced[0]
    live = [m for m in members if m.thread.is_alive()]
    wait_for(
        lambda: sum(len(m.seen) for m in members) >= total, 60, f"all {total} records to be read"
    )
    for m in live:
        m.close()
    seen = Counter((t, p, o) for m in members for t, p, o in m.seen)
    assert sum(seen.values()) == total
    assert max(seen.values()) == 1, "a record was read twice"
    ends = Counter(p for _, p, _ in seen)
    assert committed(broker, GROUP, TOPIC, PARTITIONS) == {p: ends[p] for p in range(PARTITIONS)}
    assert not owners.violations, owners.violations
    assert all(m.most_owned > 0 for m in members), [(m.name, m.most_owned) for m in members]
    assert all(not m.errors for m in members), [(m.name, m.errors) for m in members]
    described = describe(broker, GROUP)
    assert described.type is ConsumerGroupType.CLASSIC


def test_describe_shows_classic_members_inside_a_consumer_group(broker: BrokerProcess) -> None:
    """ConsumerGroupDescribe of a group mid-roll lists both kinds of members, each
    partition once."""
    group, topic = "roll-describe-g", "roll-describe"
    create_topic(broker, topic, 4)
    owners = Ownership()
    classic = RollingMember(broker, "classic", "classic", owners, group, topic)
    try:
        wait_for(lambda: len(classic.assignment()) == 4, 40, "the classic member's partitions")
        modern = RollingMember(broker, "modern", "consumer", owners, group, topic)
        try:
            wait_for(
                lambda: len(classic.assignment()) == len(modern.assignment()) == 2,
                40,
                "two partitions each",
            )
            assert group_type(broker, group) is ConsumerGroupType.CONSUMER
            described = describe(broker, group)
            assert sorted(m.client_id for m in described.members) == ["classic", "modern"]
            partitions = [
                (tp.topic, tp.partition)
                for m in described.members
                for tp in m.assignment.topic_partitions
            ]
            assert sorted(partitions) == [(topic, p) for p in range(4)]
        finally:
            modern.close()
    finally:
        classic.close()
    assert not owners.violations, owners.violations
