"""The leader's divergence rule for a follower fetch (KIP-320/KIP-595 truncation on fetch).

One rule, in one place: the fetch planner applies it to every follower fetch
(Fetch v12+ ``last_fetched_epoch``) and the unit tests call it directly.

Kafka's ``Partition.readRecords`` decides, in this order:

1. the leader looks up the end of the follower's ``last_fetched_epoch`` in its
   own epoch history; when the history cannot answer (no entries, or an epoch
   newer than every epoch it knows) the fetch fails with OFFSET_OUT_OF_RANGE.
   Answering "no divergence" instead would let the leader count the follower's
   fetch offset as progress (ISR, high watermark) over records it never had;
2. a fetch offset below the leader's log start is OFFSET_OUT_OF_RANGE whether
   or not the epochs diverge (the follower starts over at the log start);
3. when the leader knows only an older epoch there, or that epoch ends before
   the follower's fetch offset, the follower holds records the leader does not:
   the answer is (epoch, end offset), the point it must truncate to;
4. otherwise the follower's log is a prefix of the leader's: read on.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from headwater.log.errors import OffsetOutOfRangeError


class EpochHistory(Protocol):
    """What the rule reads of the leader's log (a ``Log`` is one)."""

    @property
    def log_start_offset(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...


class Divergence(NamedTuple):
    """Where the follower must cut its log: the Fetch response's ``diverging_epoch``."""

    epoch: int
    end_offset: int


def diverging_epoch(
    leader: EpochHistory, fetch_offset: int, last_fetched_epoch: int
) -> Divergence | None:
    """None to read on, else where the follower's log left the leader's.

    A request without an epoch (< 0, before Fetch v12) is not checked. Raises
    ``OffsetOutOfRangeError`` when the leader's epoch history cannot place
    ``last_fetched_epoch`` or ``fetch_offset`` is below its log start.
    """
    if last_fetched_epoch < 0:
        return None
    epoch, end = leader.end_offset_for_epoch(last_fetched_epoch)
    if epoch < 0 or end < 0:
        raise OffsetOutOfRangeError(
            f"no end offset for the last fetched epoch {last_fetched_epoch} "
            "in the leader's epoch history"
        )
    start = leader.log_start_offset
    if fetch_offset < start:
        raise OffsetOutOfRangeError(f"offset {fetch_offset} is below the log start {start}")
    if epoch < last_fetched_epoch or end < fetch_offset:
        return Divergence(epoch, end)
    return None
