"""Online migration between a classic group and a consumer group (KIP-848).

Kafka 4's ``group.consumer.migration.policy`` (``bidirectional`` by default)
lets a running group change protocol member by member:

* **upgrade**: the first consumer-protocol member to join a non-empty classic
  group of the "consumer" protocol type turns it into a consumer group in
  which the existing members stay, as *classic members*, with their
  subscriptions and the partitions they own now (Kafka's
  ``ConsumerGroup.fromClassicGroup``). Nothing is revoked that need not be:
  the server-side assignor starts from what they hold.
* **downgrade**: when the last consumer-protocol member leaves and only
  classic members remain, the group becomes a classic group again (Kafka's
  ``ClassicGroup.fromConsumerGroup``) and rebalances the classic way.

Pure: groups in, groups out. The coordinators write the records and run the
timers (``consumer_group_coordinator.py``, ``coordinator.py``).
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from headwater.group.consumer_group import ConsumerGroup, ConsumerGroupMember, MemberState
from headwater.group.consumer_group_records import Assignment, ClassicMemberMetadata
from headwater.group.membership import Group, GroupState, Member
from headwater.group.topics_image import TopicsImage
from headwater.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
)
from headwater.protocol.consumer_protocol import encode_assignment as encode_consumer_assignment

UPGRADE_POLICIES = frozenset({"bidirectional", "upgrade"})
DOWNGRADE_POLICIES = frozenset({"bidirectional", "downgrade"})


class MigrationRefused(Exception):
    """The group cannot change protocol (the reason is the message)."""


def by_ids(partitions: tuple[tuple[str, tuple[int, ...]], ...], topics: TopicsImage) -> Assignment:
    """Named partitions as an assignment by topic id; unknown topics are dropped."""
    assignment: dict[uuid.UUID, frozenset[int]] = {}
    for name, parts in partitions:
        topic = topics.get(name)
        if topic is not None and parts:
            assignment[topic.topic_id] = assignment.get(topic.topic_id, frozenset()) | frozenset(
                parts
            )
    return assignment


def by_names(assignment: Assignment, topics: TopicsImage) -> list[tuple[str, frozenset[int]]]:
    named = []
    for topic_id, parts in assignment.items():
        name = topics.name_of(topic_id)
        if name is not None and parts:
            named.append((name, parts))
    return named


def protocol_version(protocols: tuple[tuple[str, bytes], ...]) -> int:
    """The ConsumerProtocol version a classic member speaks (its first protocol's),
    which its assignment is encoded in."""
    try:
        return decode_subscription(protocols[0][1]).version if protocols else 0
    except ConsumerProtocolError:
        return 0


def encode_assignment(
    assignment: Assignment, protocols: tuple[tuple[str, bytes], ...], topics: TopicsImage
) -> bytes:
    return encode_consumer_assignment(
        by_names(assignment, topics), version=protocol_version(protocols)
    )


# ------------------------------------------------------------------- upgrade


def check_upgrade(classic: Group, policy: str, max_size: int) -> None:
    """Kafka's validateOnlineUpgrade; MigrationRefused says why not."""
    if policy not in UPGRADE_POLICIES:
        raise MigrationRefused(f"online upgrade is disabled (migration policy {policy})")
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise MigrationRefused("the group does not use the consumer embedded protocol")
    if len(classic.members) > max_size:
        raise MigrationRefused("the group is larger than group.consumer.max.size")


def _subscription(classic: Group, member: Member) -> Subscription:
    metadata = member.metadata(classic.protocol_name) if classic.protocol_name else b""
    if not metadata and member.protocols:
        metadata = member.protocols[0][1]
    return decode_subscription(metadata)


def consumer_group_from_classic(classic: Group, topics: TopicsImage) -> ConsumerGroup:
    """Kafka's ConsumerGroup.fromClassicGroup: every member stays, STABLE at the
    classic generation, owning (and targeted to) its last classic assignment.

    Raises MigrationRefused when a member's metadata or assignment is not the
    consumer protocol's."""
    group = ConsumerGroup(classic.group_id)
    group.group_epoch = classic.generation_id
    group.assignment_epoch = classic.generation_id
    for member in classic.members.values():
        try:
            subscription = _subscription(classic, member)
            assigned = by_ids(decode_assignment(member.assignment or b"").partitions, topics)
        except ConsumerProtocolError as exc:
            raise MigrationRefused(f"malformed embedded consumer protocol: {exc}") from None
        converted = ConsumerGroupMember(
            member_id=member.member_id,
            instance_id=member.group_instance_id,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=subscription.topics,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            member_epoch=classic.generation_id,
            previous_member_epoch=classic.generation_id,
            state=MemberState.STABLE,
            assigned=assigned,
            classic=ClassicMemberMetadata(member.session_timeout_ms, member.protocols),
        )
        _take_free(group, converted)
        group.target[member.member_id] = dict(group.members[member.member_id].assigned)
    return group


def _take_free(group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    """Add the member keeping only partitions nobody holds yet: a stale classic
    assignment never gives one partition two owners."""
    assigned = {
        topic_id: frozenset(p for p in parts if (topic_id, p) not in group.owners)
        for topic_id, parts in member.assigned.items()
    }
    group.update_member(replace(member, assigned={t: p for t, p in assigned.items() if p}))


# ----------------------------------------------------------------- downgrade


def may_downgrade(group: ConsumerGroup, leaving_member_id: str, policy: str, max_size: int) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMember: with ``leaving_member_id``
    gone, only classic members remain (at least one), and the policy allows it."""
    return (
        group.all_classic_except(leaving_member_id)
        and len(group.members) > 1
        and policy in DOWNGRADE_POLICIES
        and len(group.members) - 1 <= max_size
    )


def classic_group_from_consumer(
    group: ConsumerGroup, leaving_member_id: str, topics: TopicsImage, now_ms: int
) -> Group:
    """Kafka's ClassicGroup.fromConsumerGroup: a STABLE classic group at the group
    epoch, each remaining member with its JoinGroup protocols and, as its
    assignment, the partitions it owns now (Kafka uses the target; what is owned
    is what the classic rebalance that follows must start from)."""
    classic = Group(
        group.group_id,
        state=GroupState.STABLE,
        generation_id=group.group_epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        empty_since_ms=now_ms,
    )
    for member_id, member in group.members.items():
        if member_id == leaving_member_id or member.classic is None:
            continue
        classic.add(
            Member(
                member_id=member_id,
                group_instance_id=member.instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                session_timeout_ms=member.classic.session_timeout_ms,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                protocols=member.classic.protocols,
                session_deadline_ms=now_ms + member.classic.session_timeout_ms,
            ),
            CONSUMER_PROTOCOL_TYPE,
        )
    classic.protocol_name = classic.select_protocol()
    for member_id, classic_member in classic.members.items():
        owned: dict[uuid.UUID, frozenset[int]] = {}
        for topic_id, partition in group.members[member_id].owned_partitions():
            owned[topic_id] = owned.get(topic_id, frozenset()) | {partition}
        classic_member.assignment = encode_assignment(owned, classic_member.protocols, topics)
    return classic
