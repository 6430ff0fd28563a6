"""Online migration of a running classic group to a consumer group and back (issue 29,
item 5), without sockets: classic cooperative members and consumer-protocol members
share one group, and no partition is ever owned by two of them."""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass, field

from kio.schema.consumer_protocol_subscription.v1 import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from headwater.group.consumer_group import MemberState
from headwater.group.consumer_group_coordinator import ConsumerGroupConfig
from headwater.group.coordinator import GroupConfig
from headwater.group.membership import GroupState
from headwater.group.offsets import OffsetCommitEntry
from headwater.protocol.consumer_protocol import decode_assignment, encode_assignment
from tests.unit.consumer_group_harness import GROUP, Client, Harness

PROTOCOL = "cooperative-sticky"
TOPIC = "orders"


def subscription(topics: tuple[str, ...], owned: set[int]) -> bytes:
    buffer = io.BytesIO()
    buffer.write(b"\x00\x01")
    entity_writer(ConsumerProtocolSubscription)(
        buffer,
        ConsumerProtocolSubscription(
            topics=topics,
            owned_partitions=(TopicPartition(topic=TOPIC, partitions=tuple(sorted(owned))),)
            if owned
            else (),
        ),
    )
    return buffer.getvalue()


@dataclass
class ClassicClient:
    """A cooperative classic consumer: rejoins when told, revokes what its new
    assignment lacks, then rejoins again (as librdkafka's cooperative-sticky does)."""

    h: Harness
    name: str
    member_id: str = ""
    generation: int = -1
    owned: set[int] = field(default_factory=set)
    must_rejoin: bool = True

    def join_pending(self):  # type: ignore[no-untyped-def]
        return self.h.coordinator.join_group(
            self.h.now,
            group_id=GROUP,
            member_id=self.member_id,
            protocol_type="consumer",
            protocols=[(PROTOCOL, subscription((TOPIC,), self.owned))],
            session_timeout_ms=10_000,
            rebalance_timeout_ms=30_000,
            client_id=self.name,
            require_known_member_id=False,
        )

    def joined(self, result) -> None:  # type: ignore[no-untyped-def]
        assert result.error is ErrorCode.none, result
        self.member_id = result.member_id
        self.generation = result.generation_id

    def sync(self, assignments: dict[str, bytes] | None = None) -> ErrorCode:
        result = self.h.coordinator.sync_group(
            self.h.now,
            group_id=GROUP,
            generation_id=self.generation,
            member_id=self.member_id,
            assignments=list((assignments or {}).items()),
            protocol_type="consumer",
            protocol_name=PROTOCOL,
        ).result()
        if result.error is not ErrorCode.none:
            self.must_rejoin = True
            return result.error
        assigned = {
            p for _, parts in decode_assignment(result.assignment).partitions for p in parts
        }
        revoked = self.owned - assigned
        self.owned = assigned
        self.must_rejoin = bool(revoked)
        return ErrorCode.none

    def beat(self) -> ErrorCode:
        error = self.h.coordinator.heartbeat(
            self.h.now, group_id=GROUP, generation_id=self.generation, member_id=self.member_id
        )
        if error in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
            self.must_rejoin = True
        return error

    def step(self) -> None:
        """In a consumer group: one heartbeat, and a rejoin + sync when needed."""
        self.beat()
        if self.must_rejoin:
            self.joined(self.join_pending().result())
            self.sync()

    def leave(self) -> None:
        self.h.coordinator.leave_group(self.h.now, group_id=GROUP, members=[(self.member_id, None)])


def running_classic_group(h: Harness, partitions: int) -> tuple[ClassicClient, ClassicClient]:
    """Two classic members that went through two classic rebalances: a leader with
    the first half, a follower with the second."""
    a, b = ClassicClient(h, "a"), ClassicClient(h, "b")
    a.joined(a.join_pending().result())
    a.sync({a.member_id: encode_assignment([(TOPIC, range(partitions))])})
    pending_b = b.join_pending()
    assert a.beat() is ErrorCode.rebalance_in_progress
    a.joined(a.join_pending().result())
    b.joined(pending_b.result())
    half = partitions // 2
    # Cooperative: the leader first hands out only what nobody has to give up.
    a.sync(
        {
            a.member_id: encode_assignment([(TOPIC, range(half))]),
            b.member_id: encode_assignment([(TOPIC, [])]),
        }
    )
    b.sync()
    assert a.must_rejoin  # it gave up the second half: a second round follows
    pending_a = a.join_pending()
    b.joined(b.join_pending().result())
    a.joined(pending_a.result())
    a.sync(
        {
            a.member_id: encode_assignment([(TOPIC, range(half))]),
            b.member_id: encode_assignment([(TOPIC, range(half, partitions))]),
        }
    )
    b.sync()
    classic = h.coordinator.group(GROUP)
    assert classic is not None and classic.state is GroupState.STABLE
    assert (a.owned, b.owned) == (set(range(half)), set(range(half, partitions)))
    return a, b


def never_twice(*owned: set[int]) -> None:
    seen: set[int] = set()
    for parts in owned:
        assert not (seen & parts), f"a partition owned twice: {owned}"
        seen |= parts


def consumer_owned(c: Client, topic_id: uuid.UUID) -> set[int]:
    return set(c.partitions(topic_id))


def settle(
    h: Harness, classic: list[ClassicClient], modern: list[Client], topic_id: uuid.UUID
) -> None:
    """Everyone takes turns until nothing changes; ownership is checked after every step."""
    for _ in range(12):
        for c in classic:
            c.step()
            never_twice(*(x.owned for x in classic), *(consumer_owned(m, topic_id) for m in modern))
        for m in modern:
            m.beat()
            never_twice(*(x.owned for x in classic), *(consumer_owned(m, topic_id) for m in modern))
        group = h.cg.group(GROUP)
        if (
            group is not None
            and group.state.value == "Stable"
            and not any(c.must_rejoin for c in classic)
        ):
            return


def upgraded(h: Harness, partitions: int = 6):  # type: ignore[no-untyped-def]
    topic_id = h.topic(TOPIC, partitions)
    a, b = running_classic_group(h, partitions)
    c = h.client("c", TOPIC)
    joined = c.join()
    assert joined.error is ErrorCode.none
    return topic_id, a, b, c


def harness(**consumer: object) -> Harness:
    return Harness(
        ConsumerGroupConfig(session_timeout_ms=45_000, **consumer),  # type: ignore[arg-type]
        group_config=GroupConfig(initial_rebalance_delay_ms=0),
    )


def test_a_running_classic_group_upgrades_with_its_members_keeping_their_partitions() -> None:
    h = harness()
    topic_id, a, b, c = upgraded(h)
    assert h.coordinator.group(GROUP) is None  # no classic group any more
    group = h.group()
    assert set(group.members) == {a.member_id, b.member_id, c.member_id}
    for classic in (a, b):
        member = group.members[classic.member_id]
        assert member.uses_classic_protocol and member.subscribed_topic_names == (TOPIC,)
        # Stayed at the classic generation, holding what it held: nothing revoked yet.
        assert member.member_epoch == classic.generation
        assert set(member.assigned[topic_id]) <= classic.owned
    assert c.count() == 0  # every partition is still held by a classic member
    assert group.group_epoch == a.generation + 1


def test_classic_and_consumer_members_share_the_group_without_owning_a_partition_twice() -> None:
    h = harness()
    topic_id, a, b, c = upgraded(h)
    # The classic members learn through their heartbeat that they must rejoin.
    assert a.beat() is ErrorCode.rebalance_in_progress
    settle(h, [a, b], [c], topic_id)
    assert h.group().state.value == "Stable"
    assert len(a.owned) == len(b.owned) == c.count() == 2
    never_twice(a.owned, b.owned, consumer_owned(c, topic_id))
    assert a.owned | b.owned | consumer_owned(c, topic_id) == set(range(6))
    # SyncGroup and Heartbeat carry the member epoch as the generation.
    member = h.group().members[a.member_id]
    assert a.generation == member.member_epoch == h.group().group_epoch
    assert a.beat() is ErrorCode.none


def test_a_classic_member_revokes_before_anyone_gets_its_partitions() -> None:
    h = harness()
    topic_id, a, b, c = upgraded(h)
    a.beat()
    a.joined(a.join_pending().result())  # rejoins still owning 0, 1, 2
    state = h.group().members[a.member_id].state
    assert state is MemberState.UNREVOKED_PARTITIONS
    assert a.sync() is ErrorCode.none and a.must_rejoin  # its assignment lacks one: revoke
    c.beat()
    never_twice(a.owned, b.owned, consumer_owned(c, topic_id))
    # Not released yet as far as the coordinator knows: a has not rejoined without it.
    assert c.count() == 0
    a.joined(a.join_pending().result())
    a.sync()
    c.beat()
    assert c.count() == 1
    never_twice(a.owned, b.owned, consumer_owned(c, topic_id))


def test_the_last_consumer_member_leaving_downgrades_the_group_to_classic() -> None:
    h = harness()
    topic_id, a, b, c = upgraded(h)
    settle(h, [a, b], [c], topic_id)
    c.leave()
    assert h.cg.group(GROUP) is None
    classic = h.coordinator.group(GROUP)
    assert classic is not None and classic.state is GroupState.PREPARING_REBALANCE
    assert set(classic.members) == {a.member_id, b.member_id}
    assert classic.protocol_type == "consumer" and classic.protocol_name == PROTOCOL
    # Its record says what each member owns now, never a partition twice.
    owned = [
        {p for _, parts in decode_assignment(m.assignment or b"").partitions for p in parts}
        for m in classic.members.values()
    ]
    never_twice(*owned)
    assert a.beat() is ErrorCode.rebalance_in_progress
    # The classic rebalance: both rejoin; the leader assigns.
    pending = [x.join_pending() for x in (a, b)]
    results = [p.result() for p in pending]
    for x, r in zip((a, b), results, strict=True):
        x.joined(r)
    assert classic.generation_id > c.epoch
    leader = a if results[0].leader_id == a.member_id else b
    follower = b if leader is a else a
    leader.sync(
        {
            leader.member_id: encode_assignment([(TOPIC, leader.owned | {4, 5} - follower.owned)]),
            follower.member_id: encode_assignment([(TOPIC, follower.owned)]),
        }
    )
    follower.sync()
    never_twice(a.owned, b.owned)
    assert classic.state is GroupState.STABLE


def test_the_downgrade_is_durable_and_the_consumer_records_are_gone() -> None:
    h = harness()
    topic_id, a, b, c = upgraded(h)
    settle(h, [a, b], [c], topic_id)
    c.leave()
    h.restart()
    assert h.cg.group(GROUP) is None
    classic = h.coordinator.group(GROUP)
    assert classic is not None and set(classic.members) == {a.member_id, b.member_id}


def test_the_upgraded_group_and_its_classic_members_survive_a_failover() -> None:
    h = harness()
    topic_id, a, b, c = upgraded(h)
    settle(h, [a, b], [c], topic_id)
    before = {m: (x.member_epoch, dict(x.assigned)) for m, x in h.group().members.items()}
    h.restart()
    group = h.group()
    assert {m: (x.member_epoch, dict(x.assigned)) for m, x in group.members.items()} == before
    assert group.members[a.member_id].classic is not None
    assert a.beat() is ErrorCode.none
    assert h.coordinator.group(GROUP) is None


def test_a_classic_member_commits_with_its_generation_as_member_epoch() -> None:
    h = harness()
    topic_id, a, b, c = upgraded(h)
    settle(h, [a, b], [c], topic_id)

    def commit(generation: int) -> ErrorCode:
        return h.coordinator.commit_offsets(
            h.now,
            group_id=GROUP,
            generation_id=generation,
            member_id=a.member_id,
            entries=[OffsetCommitEntry(TOPIC, min(a.owned), 5, -1, "")],
            timestamp_ms=1,
            api_version=8,
        ).result()[0]

    assert commit(a.generation) is ErrorCode.none
    assert commit(a.generation - 1) is ErrorCode.illegal_generation


def test_a_silent_classic_member_is_fenced_after_its_session_timeout() -> None:
    h = harness()
    topic_id, a, b, c = upgraded(h)
    settle(h, [a, b], [c], topic_id)
    for _ in range(4):
        h.advance(3_000)
        a.beat()
        c.beat()
    assert b.member_id not in h.group().members
    assert b.beat() is ErrorCode.unknown_member_id
    settle(h, [a], [c], topic_id)
    assert a.owned | consumer_owned(c, topic_id) == set(range(6))


def test_a_classic_member_leaving_keeps_the_consumer_group() -> None:
    h = harness()
    topic_id, a, b, c = upgraded(h)
    settle(h, [a, b], [c], topic_id)
    b.leave()
    group = h.group()
    assert b.member_id not in group.members
    settle(h, [a], [c], topic_id)
    assert a.owned | consumer_owned(c, topic_id) == set(range(6))


def test_the_migration_policy_can_refuse_the_upgrade() -> None:
    for policy in ("disabled", "downgrade"):
        h = harness(migration_policy=policy)
        h.topic(TOPIC, 4)
        running_classic_group(h, 4)
        joined = h.client("c", TOPIC).join()
        assert joined.error is ErrorCode.group_id_not_found
        assert h.coordinator.group(GROUP) is not None


def test_the_migration_policy_can_refuse_the_downgrade() -> None:
    h = harness(migration_policy="upgrade")
    topic_id, a, b, c = upgraded(h)
    settle(h, [a, b], [c], topic_id)
    c.leave()
    assert h.coordinator.group(GROUP) is None
    settle(h, [a, b], [], topic_id)
    assert a.owned | b.owned == set(range(6))
