"""KIP-848 membership (``group.protocol=consumer``) as a state machine, without I/O.

The model is Kafka's ``ConsumerMembershipManager``/``HeartbeatRequestManager``
(Java client 4.x): the member joins with epoch 0, the coordinator computes
its target assignment and sends it in a heartbeat response; the member
reconciles it **revocation first** (partitions no longer assigned are given
up before new ones are taken), then acknowledges by sending the partitions it
owns in its next heartbeat. The coordinator decides the session timeout and
the heartbeat interval; the member only follows the interval it is given.

``Membership`` builds each ConsumerGroupHeartbeat as a dict (the whole
request when joining, afterwards only the fields that changed), takes each
response, and says what to do next: ``reconcile`` hands out a
``Reconciliation`` (what to revoke, what to add), which the I/O side
(``consumer_group_heartbeat``) carries out and reports with
``reconciled``. Errors become ``Action`` values: rejoin after releasing
everything (fenced), find the coordinator again, or fail the application.

The client may not import ``headwater.group``: the wire constants it needs
are repeated here with Kafka's values.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from headwater.client.types import TopicPartition

# Error codes (Kafka's Errors.java).
NONE: Final = 0
COORDINATOR_LOAD_IN_PROGRESS: Final = 14
COORDINATOR_NOT_AVAILABLE: Final = 15
NOT_COORDINATOR: Final = 16
UNKNOWN_MEMBER_ID: Final = 25
INVALID_REQUEST: Final = 42
GROUP_MAX_SIZE_REACHED: Final = 81
UNRELEASED_INSTANCE_ID: Final = 111
FENCED_MEMBER_EPOCH: Final = 110
UNSUPPORTED_ASSIGNOR: Final = 112
STALE_MEMBER_EPOCH: Final = 113

JOIN_EPOCH: Final = 0
LEAVE_EPOCH: Final = -1
LEAVE_STATIC_EPOCH: Final = -2
FIRST_CLIENT_MEMBER_ID_VERSION: Final = 1  # v1 (KIP-1082): the member names itself
#: Kafka's default rebalance timeout (max.poll.interval.ms), sent when joining.
DEFAULT_REBALANCE_TIMEOUT_MS: Final = 300_000

COORDINATOR_ERRORS: Final = frozenset(
    {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
)
FENCED_ERRORS: Final = frozenset({FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID})


class State(enum.Enum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"  # epoch 0 sent, no answer yet
    RECONCILING = "reconciling"  # a target differs from what is owned
    ACKNOWLEDGING = "acknowledging"  # reconciled; the next heartbeat says so
    STABLE = "stable"
    FENCED = "fenced"  # everything must be released, then rejoin with epoch 0
    LEAVING = "leaving"  # the leave heartbeat is due
    LEFT = "left"
    FATAL = "fatal"


class Action(enum.Enum):
    NONE = "none"
    RECONCILE = "reconcile"  # a new target: call ``reconcile``
    FIND_COORDINATOR = "find_coordinator"
    RELEASE_ALL = "release_all"  # fenced: on_partitions_lost, then ``released``
    FAIL = "fail"  # raise ``error`` to the application


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """One step towards the target: revoke first, then add."""

    revoke: frozenset[TopicPartition]
    add: frozenset[TopicPartition]
    target: frozenset[TopicPartition]
    epoch: int


@dataclass(slots=True)
class _Sent:
    """What the coordinator already knows from us (to send only changes)."""

    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int | None = None
    names: tuple[str, ...] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: frozenset[TopicPartition] | None = None


@dataclass(slots=True)
class Membership:
    """One member's side of ConsumerGroupHeartbeat; every method is pure state."""

    group_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    remote_assignor: str | None = None
    rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS
    member_id: str = ""
    member_epoch: int = JOIN_EPOCH
    state: State = State.UNSUBSCRIBED
    heartbeat_interval_ms: int = 0
    topic_names: tuple[str, ...] | None = None
    topic_regex: str | None = None
    owned: frozenset[TopicPartition] = frozenset()
    error: tuple[int, str] | None = None
    # The latest target as (topic id -> partitions) and its epoch; None: no news.
    _target_ids: dict[uuid.UUID, frozenset[int]] | None = None
    _target_epoch: int = 0
    _sent: _Sent = field(default_factory=_Sent)
    _in_flight: bool = False

    # -- the application's side --------------------------------------------------

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None) -> None:
        """Topic names or an RE2 regex (evaluated by the broker); joins if not a member."""
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe to topic names or to a pattern, not both")
        self.topic_names = None if topics is None else tuple(sorted(set(topics)))
        self.topic_regex = pattern
        if self.state in (State.UNSUBSCRIBED, State.LEFT, State.FATAL):
            self._join()

    def _join(self) -> None:
        self.state = State.JOINING
        self.member_epoch = JOIN_EPOCH
        self.error = None
        self._sent = _Sent()
        self._target_ids = None

    def leave(self) -> bool:
        """Start leaving; True if a leave heartbeat must be sent (we are a member)."""
        if self.state in (State.UNSUBSCRIBED, State.LEFT, State.FATAL) or not self.member_id:
            self.state = State.LEFT
            return False
        self.state = State.LEAVING
        return True

    @property
    def leave_epoch(self) -> int:
        return LEAVE_STATIC_EPOCH if self.instance_id else LEAVE_EPOCH

    # -- requests -------------------------------------------------------------------

    def heartbeat_due(self, since_last_s: float) -> bool:
        """Whether a heartbeat should go now (``since_last_s``: time since the last one)."""
        if self._in_flight or self.state in (
            State.UNSUBSCRIBED,
            State.LEFT,
            State.FATAL,
            State.FENCED,
        ):
            return False
        if self.state in (State.JOINING, State.ACKNOWLEDGING, State.LEAVING):
            return True
        return since_last_s * 1000 >= self.heartbeat_interval_ms

    def heartbeat_request(self, version: int) -> dict[str, Any]:
        """The next ConsumerGroupHeartbeat as a dict; marks it in flight."""
        if not self.member_id and version >= FIRST_CLIENT_MEMBER_ID_VERSION:
            self.member_id = str(uuid.uuid4())
        self._in_flight = True
        if self.state is State.LEAVING:
            return {
                "group_id": self.group_id,
                "member_id": self.member_id,
                "member_epoch": self.leave_epoch,
                "instance_id": self.instance_id,
                "rebalance_timeout": -1,
                "subscribed_topic_names": None,
                "subscribed_topic_regex": None,
                "server_assignor": None,
                "topic_partitions": None,
            }
        full = self.member_epoch == JOIN_EPOCH
        sent = self._sent
        data: dict[str, Any] = {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": -1,
            "subscribed_topic_names": None,
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": None,
        }
        # The instance id goes in every request of a static member (Kafka does so).
        data["instance_id"] = self.instance_id
        if full or sent.rack_id != self.rack_id:
            data["rack_id"] = self.rack_id
        if full or sent.rebalance_timeout_ms != self.rebalance_timeout_ms:
            data["rebalance_timeout"] = self.rebalance_timeout_ms
        if full or sent.names != self.topic_names or sent.regex != self.topic_regex:
            if self.topic_regex is not None:
                data["subscribed_topic_regex"] = self.topic_regex
            else:
                data["subscribed_topic_names"] = list(self.topic_names or ())
        if full or sent.assignor != self.remote_assignor:
            data["server_assignor"] = self.remote_assignor
        owned = self.owned if self.state is not State.JOINING else frozenset()
        if full or sent.owned != owned:
            data["topic_partitions"] = owned
        return data

    def sent(self, data: Mapping[str, Any], topic_ids: Mapping[str, uuid.UUID]) -> dict[str, Any]:
        """Records what ``data`` tells the coordinator; returns it with partitions by topic id.

        ``topic_ids`` maps the names of owned topics to their ids.
        """
        out = dict(data)
        owned = data.get("topic_partitions")
        sent = self._sent
        if data.get("rack_id") is not None or data["member_epoch"] == JOIN_EPOCH:
            sent.rack_id = self.rack_id
        if data.get("rebalance_timeout", -1) != -1:
            sent.rebalance_timeout_ms = self.rebalance_timeout_ms
        if (
            data.get("subscribed_topic_names") is not None
            or data.get("subscribed_topic_regex") is not None
        ):
            sent.names, sent.regex = self.topic_names, self.topic_regex
        if data.get("server_assignor") is not None or data["member_epoch"] == JOIN_EPOCH:
            sent.assignor = self.remote_assignor
        if owned is not None:
            sent.owned = frozenset(owned)
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(owned):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            out["topic_partitions"] = [
                {"topic_id": topic_ids[t], "partitions": ps} for t, ps in by_topic.items()
            ]
        return out

    def request_failed(self) -> None:
        """The heartbeat got no answer: everything is sent again next time."""
        self._in_flight = False
        self._sent = _Sent()

    # -- responses ------------------------------------------------------------------

    def on_response(
        self,
        error_code: int,
        *,
        error_message: str | None = None,
        member_id: str | None = None,
        member_epoch: int = -1,
        heartbeat_interval_ms: int = 0,
        assignment: Mapping[uuid.UUID, Iterable[int]] | None = None,
    ) -> Action:
        """Takes one heartbeat response; says what the I/O side must do."""
        self._in_flight = False
        if error_code != NONE:
            return self._on_error(error_code, error_message)
        if self.state is State.LEAVING:
            self.state = State.LEFT
            self.member_epoch = JOIN_EPOCH
            return Action.NONE
        if self.state in (State.LEFT, State.UNSUBSCRIBED, State.FENCED):
            return Action.NONE  # an answer that arrived after we moved on
        if member_id:
            self.member_id = member_id
        if heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = heartbeat_interval_ms
        self.member_epoch = member_epoch
        if self.state is State.ACKNOWLEDGING:
            self.state = State.STABLE
        if assignment is not None:
            self._target_ids = {t: frozenset(ps) for t, ps in assignment.items()}
            self._target_epoch = member_epoch
        if self.state is State.JOINING:
            self.state = State.STABLE if assignment is None else State.RECONCILING
        if self._target_ids is not None:
            self.state = State.RECONCILING
            return Action.RECONCILE
        return Action.NONE

    def _on_error(self, code: int, message: str | None) -> Action:
        if code in COORDINATOR_ERRORS:
            self._sent = _Sent()  # a new coordinator may not know what the old one did
            return Action.FIND_COORDINATOR
        if self.state is State.LEAVING:
            self.state = State.LEFT  # leaving anyway: the session timeout removes us
            return Action.NONE
        if code in FENCED_ERRORS:
            self.state = State.FENCED
            return Action.RELEASE_ALL
        self.state = State.FATAL
        self.error = (code, message or "")
        return Action.FAIL

    # -- reconciliation -------------------------------------------------------------

    def unresolved(self) -> set[uuid.UUID]:
        return set(self._target_ids or ())

    def reconcile(self, names: Mapping[uuid.UUID, str]) -> Reconciliation | None:
        """The step towards the latest target; None while a topic id has no name yet.

        Taking it consumes the target: a newer one arriving meanwhile makes
        the next call compute the next step from what is then owned.
        """
        target_ids = self._target_ids
        if target_ids is None:
            return None
        if any(t not in names for t in target_ids):
            return None
        target = frozenset(TopicPartition(names[t], p) for t, ps in target_ids.items() for p in ps)
        self._target_ids = None
        return Reconciliation(
            revoke=self.owned - target,
            add=target - self.owned,
            target=target,
            epoch=self._target_epoch,
        )

    def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        self.owned = self.owned - frozenset(partitions)

    def reconciled(self, step: Reconciliation) -> None:
        """``step`` was carried out (revoked, then added): acknowledge it next."""
        self.owned = step.target
        if self.state is State.RECONCILING and self._target_ids is None:
            self.state = State.ACKNOWLEDGING

    def released(self) -> None:
        """Fenced, every partition released: rejoin with epoch 0 (same member id)."""
        self.owned = frozenset()
        self._join()
