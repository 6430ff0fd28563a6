"""Classic consumer-group membership (``group.protocol=classic``) as a state machine, without I/O.

The model is the Java client's ``AbstractCoordinator``/``ConsumerCoordinator``
with the eager rebalance protocol:

1. **JoinGroup** with the member's subscription (a ConsumerProtocolSubscription
   per assignor in ``partition.assignment.strategy``), its session timeout and
   its rebalance timeout (``max.poll.interval.ms``). A new member first gets
   MEMBER_ID_REQUIRED with its id (KIP-394) and joins again with it.
2. The coordinator names a leader and an assignor. The leader gets every
   member's subscription and computes the assignment (``assignors``).
3. **SyncGroup**: the leader sends the assignment, everyone gets their own.
4. **Heartbeat** every ``heartbeat.interval.ms``; REBALANCE_IN_PROGRESS
   means join again. Eager: *everything* owned is revoked before rejoining.
   The leader also rejoins when the group's topics change (one appears, or
   its partition count changes: ``metadata_changed``).
5. **LeaveGroup** when the consumer closes (not for a static member, which
   keeps its place for its session timeout, as in Kafka).

``ClassicMembership`` builds each request as a dict and takes each response,
saying what to do next with an ``Action``: sync, rejoin (give everything up
first), lose everything (the generation is gone: no commit, ``lost``), look
the coordinator up again, or fail the application. The I/O side is
``classic_group_heartbeat``.

The ConsumerProtocol bytes go through the house's one codec,
``headwater.protocol.consumer_protocol``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from headwater.client import assignors
from headwater.client.assignors import MemberSubscription
from headwater.client.types import TopicPartition
from headwater.protocol import consumer_protocol

# Error codes (Kafka's Errors.java); the client may not import headwater.group.
NONE: Final = 0
COORDINATOR_LOAD_IN_PROGRESS: Final = 14
COORDINATOR_NOT_AVAILABLE: Final = 15
NOT_COORDINATOR: Final = 16
ILLEGAL_GENERATION: Final = 22
UNKNOWN_MEMBER_ID: Final = 25
REBALANCE_IN_PROGRESS: Final = 27
MEMBER_ID_REQUIRED: Final = 79
FENCED_INSTANCE_ID: Final = 82

COORDINATOR_ERRORS: Final = frozenset(
    {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
)
PROTOCOL_TYPE: Final = "consumer"
SUBSCRIPTION_VERSION: Final = 1  # topics, user data, owned partitions (empty: eager)
NO_GENERATION: Final = -1


# -- ConsumerProtocol bytes ---------------------------------------------------------
# The house's one codec (headwater.protocol.consumer_protocol), in the client's terms.


def encode_subscription(topics: Iterable[str]) -> bytes:
    return consumer_protocol.encode_subscription(topics, version=SUBSCRIPTION_VERSION)


def decode_subscription(data: bytes) -> tuple[str, ...]:
    """The topics of a ConsumerProtocolSubscription (none if undecodable)."""
    try:
        return consumer_protocol.decode_subscription(data).topics
    except consumer_protocol.ConsumerProtocolError:
        return ()


def encode_assignment(partitions: Iterable[TopicPartition], version: int = 0) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return consumer_protocol.encode_assignment(by_topic.items(), version=version)


def decode_assignment(data: bytes) -> set[TopicPartition] | None:
    """The partitions of a ConsumerProtocolAssignment; empty bytes are none, junk is None."""
    try:
        assignment = consumer_protocol.decode_assignment(data)
    except consumer_protocol.ConsumerProtocolError:
        return None
    return {TopicPartition(topic, p) for topic, parts in assignment.partitions for p in parts}


# -- the state machine --------------------------------------------------------------


class State(enum.Enum):
    UNSUBSCRIBED = "unsubscribed"
    UNJOINED = "unjoined"  # a JoinGroup is due (after revoking everything owned)
    SYNCING = "syncing"  # joined a generation; the SyncGroup is due
    STABLE = "stable"
    LEFT = "left"
    FATAL = "fatal"


class Action(enum.Enum):
    NONE = "none"
    JOIN = "join"  # send the next JoinGroup now (KIP-394's second step)
    SYNC = "sync"  # joined: send the SyncGroup (the leader assigns first)
    ASSIGNED = "assigned"  # synced: take ``owned``
    REJOIN = "rejoin"  # revoke everything owned (eager), then join after a back-off
    LOSE = "lose"  # the generation is gone: everything owned is lost (no commit), rejoin
    FIND_COORDINATOR = "find_coordinator"
    FAIL = "fail"  # raise ``error`` to the application


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    instance_id: str | None
    metadata: bytes


class ClassicMembership:
    """One consumer's place in a classic group; requests as dicts, responses as values."""

    def __init__(
        self,
        group_id: str,
        *,
        strategies: Sequence[str] = (assignors.RANGE, assignors.ROUNDROBIN),
        instance_id: str | None = None,
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 3_000,
    ) -> None:
        if not strategies:
            raise ValueError("no assignor")
        for name in strategies:
            if name not in assignors.ASSIGNORS:
                raise ValueError(f"unknown assignor {name!r}")
        self.group_id = group_id
        self.strategies = tuple(strategies)
        self.instance_id = instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.topics: tuple[str, ...] = ()
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol_name: str | None = None
        self.leader_id = ""
        self.members: tuple[JoinedMember, ...] = ()  # the leader's view of the group
        # The partition counts the leader assigned from: a change means a rebalance.
        self.assigned_counts: dict[str, int] | None = None
        self.owned: set[TopicPartition] = set()
        self.state = State.UNSUBSCRIBED
        self.error: tuple[int, str] | None = None

    # -- subscription -----------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | None, *, pattern: str | None = None) -> None:
        if pattern is not None:
            raise NotImplementedError(
                "a pattern subscription needs group.protocol=consumer (the broker evaluates it)"
            )
        wanted = tuple(sorted(set(topics or ())))
        if not wanted:
            raise ValueError("subscribe needs at least one topic")
        changed = wanted != self.topics
        self.topics = wanted
        if self.state in (State.UNSUBSCRIBED, State.LEFT) or (
            changed and self.state is not State.FATAL
        ):
            self.state = State.UNJOINED

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader_id

    # -- JoinGroup --------------------------------------------------------------------

    def join_request(self) -> dict[str, Any]:
        metadata = encode_subscription(self.topics)
        return {
            "group_id": self.group_id,
            "session_timeout": self.session_timeout_ms,
            "rebalance_timeout": self.rebalance_timeout_ms,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": name, "metadata": metadata} for name in self.strategies],
            "reason": None,
        }

    def on_join_response(
        self,
        code: int,
        *,
        member_id: str,
        generation: int,
        protocol_name: str | None,
        leader: str,
        members: Sequence[JoinedMember] = (),
    ) -> Action:
        if code == NONE:
            self.member_id = member_id
            self.generation = generation
            self.protocol_name = protocol_name
            self.leader_id = leader
            self.members = tuple(members) if member_id == leader else ()
            self.assigned_counts = None
            self.state = State.SYNCING
            return Action.SYNC
        if code == MEMBER_ID_REQUIRED:
            self.member_id = member_id
            return Action.JOIN
        if code == UNKNOWN_MEMBER_ID:
            self._reset(member=True)
            return Action.REJOIN
        if code == ILLEGAL_GENERATION:
            self._reset(member=False)
            return Action.REJOIN
        if code == REBALANCE_IN_PROGRESS:
            return Action.REJOIN
        if code in COORDINATOR_ERRORS:
            return Action.FIND_COORDINATOR
        return self._fail(code, "JoinGroup")

    # -- SyncGroup --------------------------------------------------------------------

    def leader_topics(self) -> set[str]:
        """Every topic some member subscribes to (the leader needs their partition counts)."""
        return {t for m in self.members for t in decode_subscription(m.metadata)}

    def assign(self, partitions_per_topic: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
        """The leader's assignment, by the assignor the coordinator chose."""
        name = self.protocol_name or self.strategies[0]
        self.assigned_counts = dict(partitions_per_topic)
        members = [
            MemberSubscription(m.member_id, decode_subscription(m.metadata), m.instance_id)
            for m in self.members
        ]
        return assignors.assign(name, partitions_per_topic, members)

    def sync_request(
        self, assignment: Mapping[str, Iterable[TopicPartition]] | None = None
    ) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": self.protocol_name,
            "assignments": [
                {"member_id": member, "assignment": encode_assignment(tps)}
                for member, tps in (assignment or {}).items()
            ],
        }

    def on_sync_response(self, code: int, assignment: bytes) -> Action:
        if code == NONE:
            owned = decode_assignment(assignment)
            if owned is None:
                return self._fail(0, "SyncGroup: undecodable assignment")
            self.owned = owned
            self.state = State.STABLE
            return Action.ASSIGNED
        self.state = State.UNJOINED
        if code == REBALANCE_IN_PROGRESS:
            return Action.REJOIN
        if code == UNKNOWN_MEMBER_ID:
            self._reset(member=True)
            return Action.REJOIN
        if code == ILLEGAL_GENERATION:
            self._reset(member=False)
            return Action.REJOIN
        if code in COORDINATOR_ERRORS:
            return Action.FIND_COORDINATOR
        return self._fail(code, "SyncGroup")

    # -- Heartbeat --------------------------------------------------------------------

    def heartbeat_request(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
        }

    def on_heartbeat_response(self, code: int) -> Action:
        if self.state is not State.STABLE:
            return Action.NONE  # an answer from before a rejoin started
        if code == NONE:
            return Action.NONE
        if code == REBALANCE_IN_PROGRESS:
            self.state = State.UNJOINED
            return Action.REJOIN
        if code in (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
            self._reset(member=code == UNKNOWN_MEMBER_ID)
            self.state = State.UNJOINED
            return Action.LOSE
        if code in COORDINATOR_ERRORS:
            return Action.FIND_COORDINATOR
        return self._fail(code, "Heartbeat")

    def metadata_changed(self, partitions_per_topic: Mapping[str, int]) -> bool:
        """The leader's check (Kafka's assignment snapshot): a subscribed topic appeared,
        went away or changed its partition count since the assignment; then rejoin."""
        if self.state is not State.STABLE or not self.is_leader or self.assigned_counts is None:
            return False
        if dict(partitions_per_topic) == self.assigned_counts:
            return False
        self.state = State.UNJOINED
        return True

    # -- what the I/O side reports ----------------------------------------------------

    def revoked(self) -> set[TopicPartition]:
        """Everything owned is given up (before a rejoin, eager); returns what was owned."""
        owned, self.owned = self.owned, set()
        return owned

    def commit_identity(self) -> tuple[int, str]:
        """(generation, member id) for OffsetCommit."""
        return self.generation, self.member_id

    def leave_request(self) -> dict[str, Any] | None:
        """The LeaveGroup to send when closing, or None: not joined, or a static member."""
        state, self.state = self.state, State.LEFT
        self.owned = set()
        if not self.member_id or self.instance_id or state in (State.FATAL, State.UNSUBSCRIBED):
            return None
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "members": [{"member_id": self.member_id, "group_instance_id": None}],
        }

    def _reset(self, *, member: bool) -> None:
        self.generation = NO_GENERATION
        if member:
            self.member_id = ""

    def _fail(self, code: int, what: str) -> Action:
        self.state = State.FATAL
        self.error = (code, f"{what} failed")
        return Action.FAIL
