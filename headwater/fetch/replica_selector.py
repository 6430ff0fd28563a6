"""KIP-392: which replica a consumer should fetch from.

The leader answers a consumer's Fetch (v11+, which carries the consumer's
``rack_id``) with a ``preferred_read_replica`` when another replica is closer.
This is Kafka's ``RackAwareReplicaSelector`` as ``ReplicaManager.findPreferredReadReplica``
feeds it, written as one pure function so the fetch path can ask it without
knowing how replicas are tracked:

* only the leader and in-sync followers whose log holds the fetch offset
  (``log_start_offset <= fetch_offset <= log_end_offset``) are candidates;
  a follower outside the ISR may lag for ever;
* a consumer without a rack, or with no candidate in its rack, stays on the leader;
* the leader wins when it is in the consumer's rack;
* otherwise the most caught-up replica of the rack (largest log end offset,
  then the one caught up most recently) -- Kafka's ``ReplicaView.comparator``.

Beyond Kafka, a follower is a candidate only once the high watermark the
leader last sent it covers the fetch offset. A follower serves consumers up to
the high watermark *it* knows, one fetch behind the leader's; sending a
consumer there before it knows offsets the consumer has already seen would
only bounce the consumer back (the follower answers OFFSET_NOT_AVAILABLE).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: Kafka's class name, as users write it in ``replica.selector.class``.
RACK_AWARE_SELECTOR_CLASS = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RACK_AWARE = "rack-aware"
_ALIASES = {
    RACK_AWARE_SELECTOR_CLASS: RACK_AWARE,
    "RackAwareReplicaSelector": RACK_AWARE,
    RACK_AWARE: RACK_AWARE,
    "rack_aware": RACK_AWARE,
}
#: ``replica_id`` of a consumer's fetch that has no preferred read replica.
NO_PREFERRED_REPLICA = -1


def parse_replica_selector(value: str) -> str | None:
    """The short name of the selector ``replica.selector.class`` names; None switches it off.

    Kafka takes any class implementing ``ReplicaSelector``; Headwater has the
    one Kafka ships, under its class name or a short name.
    """
    text = value.strip()
    if not text:
        return None
    selector = _ALIASES.get(text)
    if selector is None:
        raise ValueError(
            f"unknown replica selector {text!r}: "
            f"use {RACK_AWARE_SELECTOR_CLASS} (or {RACK_AWARE!r})"
        )
    return selector


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the leader knows of one replica when a consumer's fetch arrives."""

    broker_id: int
    rack: str | None
    log_start_offset: int
    log_end_offset: int
    #: The high watermark the leader last told this replica (the leader's own HW for itself).
    high_watermark: int
    #: Milliseconds since it was last caught up to the leader (0 for the leader).
    time_since_caught_up_ms: int


def preferred_read_replica(
    client_rack: str,
    fetch_offset: int,
    leader: ReplicaView,
    followers: Iterable[ReplicaView],
) -> int:
    """The replica the consumer in ``client_rack`` should read ``fetch_offset`` from.

    ``followers`` are the in-sync followers only. Returns ``NO_PREFERRED_REPLICA``
    when the consumer should keep reading from the leader (Kafka sends no
    preferred replica then, even though its selector returns the leader).
    """
    if not client_rack or leader.rack == client_rack:
        return NO_PREFERRED_REPLICA
    best: ReplicaView | None = None
    for replica in followers:
        if replica.rack != client_rack:
            continue
        if not replica.log_start_offset <= fetch_offset <= replica.log_end_offset:
            continue
        if replica.high_watermark < fetch_offset:
            continue
        if best is None or _more_caught_up(replica, best):
            best = replica
    return NO_PREFERRED_REPLICA if best is None else best.broker_id


def _more_caught_up(a: ReplicaView, b: ReplicaView) -> bool:
    """Kafka's ``ReplicaView.comparator``: larger log end, then more recently caught up;
    ties go to the lower broker id so the choice is stable."""
    if a.log_end_offset != b.log_end_offset:
        return a.log_end_offset > b.log_end_offset
    if a.time_since_caught_up_ms != b.time_since_caught_up_ms:
        return a.time_since_caught_up_ms < b.time_since_caught_up_ms
    return a.broker_id < b.broker_id
