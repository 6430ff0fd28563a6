"""Which led partitions the periodic ISR check must look at: O(unsettled), not O(led).

Every ``replica.lag.time.max.ms / 2`` the replica manager shrinks the ISR of
each led partition whose followers lag (Kafka's ``maybeShrinkIsr``) and nudges
followers outside a full ISR to say where they are. Walking every led
partition each round cost O(led partitions) on an idle broker (issue 33 item 2).

A partition can need either only while it is *unsettled*: an ISR write is in
flight, a replica is outside the ISR, or some ISR follower's log end is behind
the leader's (only then can ``isr_to_shrink`` find a lagging follower: one at
the leader's log end is caught up however long ago it fetched, as in Kafka).
It becomes unsettled only through an event the replica manager sees and
reports with :meth:`IsrWatch.touch`: an append to the led log, a follower fetch
(a follower's log end may go back after its own truncation), or a new state
from ZooKeeper. The check visits the touched and the unsettled partitions and
forgets each once it is settled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from headwater.cluster.partition import PartitionReplica

PartitionKey = tuple[str, int]


def settled(replica: PartitionReplica) -> bool:
    """True when no ISR check can change anything until the next event: led, no ISR
    write in flight, every replica in the ISR and at the leader's log end."""
    if not replica.is_leader or replica.pending_isr is not None:
        return False
    isr = replica.isr
    if any(r not in isr for r in replica.replicas):
        return False
    end = replica.log.log_end_offset
    for r in isr:
        if r == replica.local_id:
            continue
        follower = replica.followers.get(r)
        if follower is None or follower.log_end_offset < end:
            return False
    return True


class IsrWatch:
    """The led partitions the next ISR check visits (see the module docstring)."""

    def __init__(self) -> None:
        self._keys: set[PartitionKey] = set()
        #: Partitions visited by checks (for tests: an idle check visits none).
        self.visited = 0

    def __len__(self) -> int:
        return len(self._keys)

    def touch(self, key: PartitionKey) -> None:
        """Something happened to a led partition: look at it in the next check."""
        self._keys.add(key)

    def check(
        self,
        replicas: Mapping[PartitionKey, PartitionReplica],
        now_ms: int,
        lag_max_ms: int,
        shrink: Callable[[PartitionReplica, tuple[int, ...]], None],
        nudge: Callable[[PartitionReplica], None],
    ) -> None:
        """One ISR round: ``shrink`` each visited partition with lagging followers (to
        the ISR without them), else ``nudge`` it (followers outside the ISR say where
        they are); forget the ones not led here any more and the settled ones."""
        keys = self._keys
        for key in list(keys):
            self.visited += 1
            replica = replicas.get(key)
            if replica is None or not replica.is_leader:
                keys.discard(key)
                continue
            shrunk = replica.isr_to_shrink(now_ms, lag_max_ms)
            if shrunk is not None:
                shrink(replica, shrunk)
                continue
            # Again each round: a nudge read while an ISR write was in flight
            # (or that lost its race) could not expand the ISR.
            nudge(replica)
            if settled(replica):
                keys.discard(key)
