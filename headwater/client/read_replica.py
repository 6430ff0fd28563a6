"""KIP-392 on the client: which broker each partition is fetched from.

Sans-I/O. A consumer with ``client.rack`` sends its rack in every Fetch
(v11+). A leader with a rack-aware ``replica.selector.class`` may answer a
partition with no records and ``preferred_read_replica``: an in-sync replica
in the consumer's rack. From then on the partition is fetched there, under a
*lease* that ends after ``metadata.max.age.ms`` (Kafka's
``SubscriptionState.preferredReadReplica``) or at the first error from that
replica, whichever comes first; then the leader is asked again and decides.

The rules here are Kafka's Java consumer (``FetchCollector``) with
librdkafka's where Java has none:

* a response naming another replica drops its records, if any (librdkafka):
  the position never moves on a redirect, so nothing is skipped or repeated;
* OFFSET_OUT_OF_RANGE from a replica that is not the leader is *not* a
  reason to reset the position: a follower's log and high watermark trail the
  leader's, so the leader is asked instead (Java's ``clearPreferredReadReplica``);
  only the leader's out-of-range applies ``auto.offset.reset``;
* the follower's other errors (it lags: OFFSET_NOT_AVAILABLE; it is no
  longer a replica, lost its disk, or cannot be reached) also send the
  partition back to the leader with its position unchanged.

Beyond both clients, a replica that *failed* (could not be reached, said it
is no replica of the partition, or the metadata no longer shows it as a live
replica) is avoided for a while: a leader whose
ISR still lists a dead follower keeps redirecting consumers to it until the
follower is dropped from the ISR (``replica.lag.time.max.ms``, 30 s by
default), and a consumer that obeyed would make no progress meanwhile. While
a partition avoids its replica, the consumer fetches it from the leader
*without* its rack, which is the only way to make a rack-aware leader serve
it (a fetch carries one rack for all its partitions, so the leader's other
partitions of that fetch come from the leader too, for that short while). The
avoidance doubles with each consecutive failure (1 s, 2 s, ... up to
the lease length) and is forgotten once the replica serves data again.
A follower that only lags is not avoided: that is the normal, brief case the
leader's selector already steers around (the consumer waits ``retry.backoff.ms``
before fetching from that broker again, so a leader that keeps naming it
cannot make the two bounce a partition back and forth at network speed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from headwater.client.errors import RETRIABLE_CODES
from headwater.client.types import TopicPartition

NO_PREFERRED_REPLICA: Final = -1
OFFSET_OUT_OF_RANGE: Final = 1
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
NOT_LEADER_OR_FOLLOWER: Final = 6
REPLICA_NOT_AVAILABLE: Final = 9
KAFKA_STORAGE_ERROR: Final = 56
FENCED_LEADER_EPOCH: Final = 74
UNKNOWN_LEADER_EPOCH: Final = 75
OFFSET_NOT_AVAILABLE: Final = 78
UNKNOWN_TOPIC_ID: Final = 100
INCONSISTENT_TOPIC_ID: Final = 103

#: A preferred replica answering one of these gives the partition back to the leader.
REPLICA_ERRORS: Final[frozenset[int]] = frozenset(
    {
        OFFSET_OUT_OF_RANGE,
        UNKNOWN_TOPIC_OR_PARTITION,
        NOT_LEADER_OR_FOLLOWER,
        REPLICA_NOT_AVAILABLE,
        KAFKA_STORAGE_ERROR,
        FENCED_LEADER_EPOCH,
        UNKNOWN_LEADER_EPOCH,
        OFFSET_NOT_AVAILABLE,
        UNKNOWN_TOPIC_ID,
        INCONSISTENT_TOPIC_ID,
    }
)
#: ... and of those, these say the replica is behind, not broken: no avoidance,
#: and no metadata refresh (it cannot tell anything new).
LAGGING_ERRORS: Final[frozenset[int]] = frozenset({OFFSET_OUT_OF_RANGE, OFFSET_NOT_AVAILABLE})

FIRST_AVOID_S: Final = 1.0


class Action(enum.Enum):
    """What the consumer does with one partition of a fetch response."""

    USE = "use"  # hand the records out
    MOVE = "move"  # fetch from the named replica; records (if any) dropped
    TO_LEADER = "to_leader"  # back to the leader, position unchanged
    RESET = "reset"  # the leader says out of range: auto.offset.reset
    RETRY = "retry"  # same broker again after a back-off and a metadata refresh
    FAIL = "fail"  # pause the partition with the error


def decide(
    error_code: int, preferred_read_replica: int, *, served_by: int, from_replica: bool
) -> Action:
    """The action for one partition answered by node ``served_by``.

    ``from_replica``: the partition was fetched from a broker other than its
    leader (a preferred read replica), either when the request left or by the
    metadata known now; its answers are never authoritative about offsets.
    """
    if error_code == 0:
        if preferred_read_replica != NO_PREFERRED_REPLICA and preferred_read_replica != served_by:
            return Action.MOVE
        return Action.USE
    if from_replica and error_code in REPLICA_ERRORS:
        return Action.TO_LEADER
    if error_code == OFFSET_OUT_OF_RANGE:
        return Action.RESET
    if error_code in RETRIABLE_CODES:
        return Action.RETRY
    return Action.FAIL


@dataclass(slots=True)
class _Lease:
    node_id: int
    expires: float


@dataclass(slots=True)
class _Avoidance:
    node_id: int
    until: float
    strikes: int


class ReadReplicas:
    """Per partition: the preferred read replica's lease, and replicas to avoid.

    Times are seconds on any monotonic clock (the consumer uses its loop's).
    Leases outlive the assignment of their partition: they describe the
    cluster, not the application, and a Spark worker that reads the same
    partition task after task then goes straight to its replica.
    """

    def __init__(self, lease_s: float, first_avoid_s: float = FIRST_AVOID_S) -> None:
        self.lease_s = lease_s
        self.first_avoid_s = min(first_avoid_s, lease_s)
        self._leases: dict[TopicPartition, _Lease] = {}
        self._avoid: dict[TopicPartition, _Avoidance] = {}

    # -- leases ---------------------------------------------------------------------

    def preferred(self, tp: TopicPartition, now: float) -> int | None:
        """The replica to fetch ``tp`` from instead of its leader, if any (drops expired leases)."""
        lease = self._leases.get(tp)
        if lease is None:
            return None
        if now >= lease.expires:
            del self._leases[tp]
            return None
        return lease.node_id

    def prefer(self, tp: TopicPartition, node_id: int, now: float) -> None:
        """A leader named ``node_id`` as ``tp``'s preferred read replica."""
        self._leases[tp] = _Lease(node_id, now + self.lease_s)

    def clear(self, tp: TopicPartition) -> int | None:
        """Back to the leader; returns the replica the lease was on, if any."""
        lease = self._leases.pop(tp, None)
        return None if lease is None else lease.node_id

    def leased_to(self, node_id: int) -> list[TopicPartition]:
        """The partitions whose lease is on ``node_id`` (expired ones included)."""
        return [tp for tp, lease in self._leases.items() if lease.node_id == node_id]

    # -- failures -------------------------------------------------------------------

    def failed(self, tp: TopicPartition, node_id: int, now: float) -> float:
        """``node_id`` failed ``tp``: clear the lease, avoid the replica; returns for how long."""
        lease = self._leases.get(tp)
        if lease is not None and lease.node_id == node_id:
            del self._leases[tp]
        previous = self._avoid.get(tp)
        strikes = previous.strikes + 1 if previous and previous.node_id == node_id else 1
        span = min(self.first_avoid_s * 2.0 ** min(strikes - 1, 30), self.lease_s)
        self._avoid[tp] = _Avoidance(node_id, now + span, strikes)
        return span

    def served(self, tp: TopicPartition, node_id: int) -> None:
        """``node_id`` served ``tp`` data: its earlier failures are forgiven."""
        avoidance = self._avoid.get(tp)
        if avoidance is not None and avoidance.node_id == node_id:
            del self._avoid[tp]

    @property
    def has_avoidances(self) -> bool:
        """Whether any partition remembers a failed replica (a fast path for the common case)."""
        return bool(self._avoid)

    def avoiding(self, tp: TopicPartition, now: float) -> int | None:
        """The replica ``tp`` is avoiding now, if any (its lease is then gone too)."""
        avoidance = self._avoid.get(tp)
        if avoidance is None or now >= avoidance.until:
            return None
        return avoidance.node_id

    def forget(self, tp: TopicPartition) -> None:
        self._leases.pop(tp, None)
        self._avoid.pop(tp, None)
