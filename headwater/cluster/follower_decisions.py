"""What a follower does to its log after a fetch: the decisions of ``FollowerFetchState``.

The follower's fetch state reads a FetchResponse and answers with these
values; the replica fetcher (or a unit test) applies them with
:func:`apply_decision`. Keeping the choice (pure) apart from the writing
lets a test drive a follower through catch-up, divergence and
out-of-range without a socket, and read what it decided.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from headwater.cluster.partition import PartitionReplica
from headwater.log.errors import KafkaApiError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendRecords:
    """Append the leader's batches as they came, then take its high watermark and log start.

    ``records`` may end in a partial batch (the leader cuts at its byte limit)
    or be empty; ``Log.append_as_follower`` keeps the whole batches, the one
    place a follower trims.
    """

    replica: PartitionReplica
    records: bytes | memoryview
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Cut the log back to ``offset`` (its records from there on are not the leader's)."""

    replica: PartitionReplica
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class StartOver:
    """Drop the whole log and start empty at ``offset``: the leader's log start passed ours."""

    replica: PartitionReplica
    offset: int


@dataclass(frozen=True, slots=True)
class Backoff:
    """Fetch this partition again no sooner than ``until`` (monotonic seconds)."""

    replica: PartitionReplica
    error_code: int
    until: float


Decision = AppendRecords | TruncateTo | StartOver | Backoff


def apply_decision(decision: Decision, now_ms: int, *, who: str = "follower") -> bool:
    """Carry out ``decision`` on its replica's log; True when the log took new records.

    Raises ``KafkaApiError`` when the log refuses (a corrupt batch, an append
    out of step): the caller backs the partition off and fetches it again.
    """
    replica = decision.replica
    plog = replica.log
    if isinstance(decision, AppendRecords):
        end = plog.log_end_offset
        if len(decision.records):
            plog.append_as_follower(decision.records, now_ms)
        appended = plog.log_end_offset != end
        if decision.high_watermark >= 0:
            plog.update_high_watermark(min(decision.high_watermark, plog.log_end_offset))
        # After the high watermark, as Kafka's fetcher does: the log start may not
        # pass it, and the leader sends a new log start only once.
        if decision.log_start_offset > plog.log_start_offset:
            with contextlib.suppress(KafkaApiError):
                plog.delete_records(min(decision.log_start_offset, plog.log_end_offset))
        return appended
    if isinstance(decision, TruncateTo):
        log.info(
            "%s: %s-%d %s; truncating %d -> %d",
            who,
            replica.topic,
            replica.partition,
            decision.reason,
            plog.log_end_offset,
            decision.offset,
        )
        plog.truncate_to(decision.offset)
        return False
    if isinstance(decision, StartOver):
        log.info(
            "%s: %s-%d fell behind the leader's log start %d; starting over there",
            who,
            replica.topic,
            replica.partition,
            decision.offset,
        )
        plog.truncate_fully_and_start_at(decision.offset)
        return False
    log.debug(
        "%s: %s-%d error %d; backing off",
        who,
        replica.topic,
        replica.partition,
        decision.error_code,
    )
    return False
