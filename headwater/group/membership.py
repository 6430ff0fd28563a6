"""A consumer group's membership: its state machine, members and timers.

These are the nouns of Kafka's classic rebalance protocol (GroupMetadata and
MemberMetadata in Kafka); the verbs (join, sync, heartbeat, leave, expire) live
in `GroupCoordinator`. The legal state transitions are spelled out as a table
so a reader sees the protocol rather than the plumbing:

    Empty ---------------> PreparingRebalance <-------------------+
      ^                     |        ^                            |
      |  (last member gone) |        | (member joins, leaves,     |
      +---------------------+        |  changes metadata, expires)|
                            v        |                            |
                     CompletingRebalance --(leader's SyncGroup)--> Stable

Any state may go to Dead (the group is deleted).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.group.results import JoinResult, SyncResult

Protocols = tuple[tuple[str, bytes], ...]


class GroupState(enum.Enum):
    """The classic protocol's group states; values are the names DescribeGroups shows."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# state -> the states it may be entered from
LEGAL_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(RuntimeError):
    """The coordinator tried a transition the protocol forbids: a coordinator bug."""


@dataclass(eq=False, slots=True)
class Member:
    """One consumer in a group, with what it is currently waiting for."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: Protocols
    session_deadline_ms: int
    assignment: bytes | None = None
    awaiting_join: Pending[JoinResult] | None = None
    awaiting_sync: Pending[SyncResult] | None = None

    def metadata(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols, metadata and preference order: a rejoin that changes nothing."""
        return self.protocols == tuple(protocols)

    def touch(self, now_ms: int) -> None:
        """The member showed a sign of life: its session starts over."""
        self.session_deadline_ms = now_ms + self.session_timeout_ms

    @property
    def is_awaiting(self) -> bool:
        """Blocked in JoinGroup or SyncGroup: such a member cannot heartbeat, so never expires."""
        return self.awaiting_join is not None or self.awaiting_sync is not None


@dataclass(eq=False, slots=True)
class Group:
    """A group's membership and timers; plain data plus the rules about itself."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # Members told MEMBER_ID_REQUIRED, until they rejoin or their session lapses.
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline
    # Members that got the new generation but have not sent SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    join_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None
    # Set while a new group waits group.initial.rebalance.delay.ms for more members.
    initial_delay_remaining_ms: int | None = None
    new_member_added: bool = False
    # A group record is in the log (so deleting the group needs a tombstone).
    persisted: bool = False
    # When the group last became Empty (for empty-group retention).
    empty_since_ms: int = 0

    def transition_to(self, state: GroupState) -> None:
        if self.state not in LEGAL_PREVIOUS_STATES[state]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state.value} -> {state.value}"
            )
        self.state = state

    @property
    def can_rebalance(self) -> bool:
        return self.state in LEGAL_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def add(self, member: Member, protocol_type: str) -> None:
        if not self.members:
            self.protocol_type = protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's validateCurrentMember: a stale instance is fenced, a stranger unknown."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is not None and current != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(
        self, instance_id: str, old_id: str, new_id: str
    ) -> tuple[Member, Member]:
        """Give a restarted static member its predecessor's place (and assignment).

        Returns (new, old); the caller answers the old member's blocked requests.
        """
        old = self.members.pop(old_id)
        new = Member(
            member_id=new_id,
            group_instance_id=instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            session_timeout_ms=old.session_timeout_ms,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            protocols=old.protocols,
            session_deadline_ms=old.session_deadline_ms,
            assignment=old.assignment,
        )
        self.members[new_id] = new
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return new, old

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(
            member.awaiting_join is not None for member in self.members.values()
        )

    def rebalance_timeout_ms(self) -> int:
        """How long a rebalance waits: the longest any member asked for."""
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports."""
        counts = Counter(
            name for member in self.members.values() for name in set(member.protocol_names())
        )
        return [name for name, count in counts.items() if count == len(self.members)]

    def supports_protocols(self, protocol_type: str, protocol_names: Sequence[str]) -> bool:
        """Whether a member with these protocols may join (else INCONSISTENT_GROUP_PROTOCOL)."""
        if not self.members:
            return bool(protocol_type) and bool(protocol_names)
        candidates = set(self.candidate_protocols())
        return protocol_type == self.protocol_type and any(
            name in candidates for name in protocol_names
        )

    def select_protocol(self) -> str:
        """Each member votes for its most preferred common protocol; most votes wins.

        Ties go to the protocol listed first by the earliest member, so the
        choice is deterministic (Kafka leaves ties to map order).
        """
        candidates = self.candidate_protocols()
        if not candidates:
            # Only reachable if members changed protocols inconsistently; the
            # leader's favourite is as good an answer as any.
            leader = self.members.get(self.leader_id or "")
            return leader.protocols[0][0] if leader is not None and leader.protocols else ""
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(name for name in member.protocol_names() if name in candidates)] += 1
        order = [name for member in self.members.values() for name in member.protocol_names()]
        return max(candidates, key=lambda name: (votes[name], -order.index(name)))

    def elect_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined; False if nobody did."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False
