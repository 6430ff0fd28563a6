"""A KIP-848 consumer group and its members: Kafka's ConsumerGroup and ConsumerGroupMember.

Three epochs drive the protocol:

* the **group epoch** rises whenever what the assignment depends on changes
  (a member joins or leaves, a subscription changes, a subscribed topic
  appears, disappears or grows);
* the **target assignment epoch** is the group epoch the coordinator last
  computed a target assignment for (what every member *should* own);
* each **member epoch** says which target the member has reconciled to.

A member moves to the target one step at a time (``consumer_group_reconciliation.py``):
partitions it must give up are revoked first, and a partition another member
still holds is withheld until that member acknowledges its release, so no
partition is ever owned by two members. ``ConsumerGroup.owners`` is that
ownership: every partition assigned to, or pending revocation from, a member.

This module is the data and its invariants only; the protocol rules live in
``consumer_group_coordinator.py``, a member's steps in
``consumer_group_reconciliation.py``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from headwater.group.consumer_group_records import (
    Assignment,
    ClassicMemberMetadata,
    TopicMetadata,
)

#: A member leaves for good with this epoch, a static member "for now" with -2.
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

TopicPartition = tuple[uuid.UUID, int]


class MemberState(enum.IntEnum):
    """Where a member is in its reconciliation (values as Kafka's records store them)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    """What ListGroups and describe say (Kafka's names)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY_ASSIGNMENT: Assignment = {}


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member; immutable so an update is compared with the old value to decide
    which records to write (Kafka builds a new member and compares the same way)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    #: Set while the member speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat)
    #: inside this group, during an online migration.
    classic: ClassicMemberMetadata | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def subscription_key(self) -> tuple[object, ...]:
        """What the member metadata record holds: a change is written."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic,
        )

    def assignment_key(self) -> tuple[object, ...]:
        """What the current assignment record holds: a change is written."""
        return (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            _frozen(self.assigned),
            _frozen(self.pending_revocation),
        )

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def owned_partitions(self) -> Iterator[TopicPartition]:
        """Partitions this member holds: assigned, or not yet released."""
        for assignment in (self.assigned, self.pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    yield topic_id, partition


def _frozen(assignment: Assignment) -> frozenset[tuple[uuid.UUID, frozenset[int]]]:
    return frozenset((t, p) for t, p in assignment.items() if p)


def assignments_equal(a: Assignment, b: Assignment) -> bool:
    return _frozen(a) == _frozen(b)


class ConsumerGroup:
    """A consumer group's members, epochs and target assignment."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        #: group.instance.id -> member id
        self.static_members: dict[str, str] = {}
        #: member id -> the partitions it should own
        self.target: dict[str, Assignment] = {}
        #: partition -> the member holding it (assigned or pending revocation)
        self.owners: dict[TopicPartition, str] = {}
        #: the subscribed topics as last written (partition metadata record)
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        # Timers, kept beside the data: the coordinator sets and reads them.
        self.session_deadlines: dict[str, int] = {}
        #: member id -> (deadline, member epoch it was set at): revocation not acked in time
        self.rebalance_deadlines: dict[str, tuple[int, int]] = {}

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def update_member(self, member: ConsumerGroupMember) -> None:
        """Put the member's new state in place, keeping ``owners`` and the static index."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        for tp in member.owned_partitions():
            self.owners[tp] = member.member_id
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        if (
            member.instance_id is not None
            and self.static_members.get(member.instance_id) == member_id
        ):
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        self.session_deadlines.pop(member_id, None)
        self.rebalance_deadlines.pop(member_id, None)
        return member

    def _release(self, member: ConsumerGroupMember) -> None:
        for tp in member.owned_partitions():
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]

    def owner_epoch(self, tp: TopicPartition) -> int:
        """Kafka's currentPartitionEpoch: the owner's epoch, or -1 when the partition is free."""
        owner = self.owners.get(tp)
        if owner is None:
            return -1
        member = self.members.get(owner)
        return -1 if member is None else member.member_epoch

    def all_classic_except(self, member_id: str) -> bool:
        """Kafka's allMembersUseClassicProtocolExcept: may the group become classic
        once ``member_id`` is gone?"""
        return all(m.uses_classic_protocol for i, m in self.members.items() if i != member_id)

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Whether a partition of the member's target is still held by another member."""
        target = self.target.get(member.member_id, {})
        for topic_id, parts in target.items():
            for partition in parts - member.assigned.get(topic_id, frozenset()):
                owner = self.owners.get((topic_id, partition))
                if owner is not None and owner != member.member_id:
                    return True
        return False

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def subscribed_topic_names(self, resolve: Mapping[str, frozenset[str]]) -> frozenset[str]:
        """Every topic some member subscribes to; ``resolve`` maps a regex to the topics
        it matches now."""
        names: set[str] = set()
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
            if member.subscribed_topic_regex is not None:
                names.update(resolve.get(member.subscribed_topic_regex, frozenset()))
        return frozenset(names)

    def validate_offset_commit(
        self, member_id: str, member_epoch: int, *, transactional: bool, api_version: int
    ) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit: a member commits at its own epoch.

        Epoch -1 is the admin client or a consumer managing its own partitions,
        allowed only while the group is empty. A non-transactional commit from a
        member needs OffsetCommit v9+, which carries the member epoch.
        """
        if member_epoch < 0 and not self.members:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member.uses_classic_protocol:
            # A classic member commits with its generation, which is its member epoch.
            if member_epoch != member.member_epoch:
                return ErrorCode.illegal_generation
            return ErrorCode.none
        if not transactional and api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Kafka's validateOffsetFetch: a member fetching names its current epoch."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member.uses_classic_protocol:
            # A classic client names no epoch (-1); a generation must be current.
            if member_epoch >= 0 and member_epoch != member.member_epoch:
                return ErrorCode.illegal_generation
            return ErrorCode.none
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none
