"""The fetch planner: which bytes of which partitions one FetchResponse carries.

Pure logic over ``Log`` objects (no sockets): given the partitions of a
fetch in the order they must be served, it applies KIP-74 and the chapter's
read path:

* partitions are served in the given order;
* each partition gets at most ``partition_max_bytes`` and at most what is
  left of the request-level ``max_bytes``;
* the *first partition that returns data* may exceed both limits by one
  whole batch, so a fetch always makes progress (``min_one_batch``);
* reads stop at the isolation bound (log end for followers, high watermark
  for ``read_uncommitted``, last stable offset for ``read_committed``).

The result holds ``FileSlice`` values, never bytes: the socket writer sends
them with ``sendfile``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from headwater.fetch.types import (
    ZERO_UUID,
    Isolation,
    PartitionData,
    PartitionFetch,
)
from headwater.log.errors import OffsetOutOfRangeError
from headwater.log.log import Log

NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_AUTHORIZATION_FAILED = 29
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNKNOWN_TOPIC_ID = 100

#: The only leader epoch a single broker ever has.
LEADER_EPOCH = 0

LogLookup = Callable[[str, int], Log | None]
"""Find the log of (topic name, partition); None when it does not exist."""


def isolation_for(replica_id: int, isolation_level: int) -> Isolation:
    """The chapter's FetchIsolation: followers read to the log end, consumers less."""
    if replica_id >= 0:
        return Isolation.LOG_END
    if isolation_level == 1:
        return Isolation.TXN_COMMITTED
    return Isolation.HIGH_WATERMARK


@dataclass(slots=True)
class FetchResult:
    """The planner's answer: per-partition data in serving order, and its size."""

    partitions: list[PartitionData]
    bytes_read: int
    has_error: bool


def _missing(p: PartitionFetch) -> PartitionData:
    unknown_id = p.topic_id != ZERO_UUID and not p.topic
    return PartitionData(
        topic_id=p.topic_id,
        topic=p.topic,
        partition=p.partition,
        error_code=UNKNOWN_TOPIC_ID if unknown_id else UNKNOWN_TOPIC_OR_PARTITION,
    )


def leader_epoch_error(current_leader_epoch: int) -> int:
    """FENCED / UNKNOWN_LEADER_EPOCH for a client whose leader epoch is not ours."""
    if current_leader_epoch < 0 or current_leader_epoch == LEADER_EPOCH:
        return NONE
    return FENCED_LEADER_EPOCH if current_leader_epoch < LEADER_EPOCH else UNKNOWN_LEADER_EPOCH


def read_partitions(
    partitions: Sequence[PartitionFetch],
    lookup: LogLookup,
    *,
    max_bytes: int,
    isolation: Isolation,
    topic_id_of: Callable[[str], uuid.UUID] | None = None,
    aborted_list: bool = False,
    authorized: Callable[[str], bool] | None = None,
) -> FetchResult:
    """Read ``partitions`` in order under the KIP-74 limits.

    ``aborted_list`` makes read_committed responses carry an empty
    aborted-transactions list (librdkafka expects one) instead of null.
    ``authorized(topic)`` False answers TOPIC_AUTHORIZATION_FAILED for the
    partition without reading it (or saying whether it exists).
    """
    remaining = max(0, max_bytes)
    min_one_batch = True
    out: list[PartitionData] = []
    total = 0
    has_error = False
    for p in partitions:
        if authorized is not None and p.topic and not authorized(p.topic):
            out.append(
                PartitionData(
                    topic_id=p.topic_id,
                    topic=p.topic,
                    partition=p.partition,
                    error_code=TOPIC_AUTHORIZATION_FAILED,
                )
            )
            has_error = True
            continue
        log = lookup(p.topic, p.partition) if p.topic else None
        if log is None:
            out.append(_missing(p))
            has_error = True
            continue
        topic_id = p.topic_id
        if topic_id == ZERO_UUID and topic_id_of is not None:
            topic_id = topic_id_of(p.topic)
        data = PartitionData(topic_id=topic_id, topic=p.topic, partition=p.partition)
        if aborted_list:
            data.aborted_transactions = []
        error = leader_epoch_error(p.current_leader_epoch)
        if not error:
            limit = min(p.partition_max_bytes, remaining)
            try:
                result = log.read(p.fetch_offset, max(0, limit), isolation, min_one_batch)
            except OffsetOutOfRangeError:
                error = OFFSET_OUT_OF_RANGE
        if error:
            # The client needs the log's bounds to recover (e.g. reset its position).
            data.error_code = error
            data.high_watermark = log.high_watermark
            data.last_stable_offset = log.last_stable_offset
            data.log_start_offset = log.log_start_offset
            out.append(data)
            has_error = True
            continue
        data.high_watermark = result.high_watermark
        data.last_stable_offset = result.last_stable_offset
        data.log_start_offset = result.log_start_offset
        records = result.records
        if records is not None and records.size > 0:
            data.records = records
            total += records.size
            remaining = max(0, remaining - records.size)
            min_one_batch = False
        out.append(data)
    return FetchResult(out, total, has_error)
