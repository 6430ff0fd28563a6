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
  for ``read_uncommitted``, last stable offset for ``read_committed``);
* KIP-392: a leader may send a consumer to a closer replica instead of
  reading (``redirect``), and a follower serving a consumer answers
  OFFSET_NOT_AVAILABLE above the high watermark it knows (``follower_read``).

The result holds ``FileSlice`` values, never bytes: the socket writer sends
them with ``sendfile``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from headwater.log.divergence import diverging_epoch
from headwater.log.errors import KafkaApiError, OffsetOutOfRangeError
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    PartitionData,
    PartitionFetch,
)
from headwater.steps import drain

#: The only leader epoch a single broker ever has.
LEADER_EPOCH = 0

LogLookup = Callable[[str, int], Log | None]
"""Find the log of (topic name, partition); None when it does not exist."""

ServingCheck = Callable[[str, int], int]
"""The error code for reading (topic, partition) here, 0 when this broker serves it.

A cluster answers NOT_LEADER_OR_FOLLOWER for partitions led elsewhere; the
planner stays free of how leadership is known."""

RedirectCheck = Callable[[str, int, int], int]
"""KIP-392: the replica a consumer should read (topic, partition, fetch offset) from
instead of this leader, or -1 to read here (``headwater.fetch.replica_selector``)."""

FollowerCheck = Callable[[str, int], bool]
"""True when this broker serves (topic, partition) to a consumer as a follower."""


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
    #: Some partition got a ``preferred_read_replica``: answer at once (Kafka's
    #: fetchMessages does not park a fetch that redirects the consumer).
    redirected: bool = False


def _missing(p: PartitionFetch) -> PartitionData:
    unknown_id = p.topic_id != ZERO_UUID and not p.topic
    return PartitionData(
        topic_id=p.topic_id,
        topic=p.topic,
        partition=p.partition,
        error_code=ErrorCode.unknown_topic_id
        if unknown_id
        else ErrorCode.unknown_topic_or_partition,
    )


def leader_epoch_error(current_leader_epoch: int, leader_epoch: int = LEADER_EPOCH) -> int:
    """FENCED / UNKNOWN_LEADER_EPOCH for a client whose leader epoch is not ours (KIP-320).

    Older than ours: the client talks to a leader it should have left behind
    (fenced). Newer: we have not yet heard of the election it has (unknown).
    """
    if current_leader_epoch < 0 or current_leader_epoch == leader_epoch:
        return ErrorCode.none
    return (
        ErrorCode.fenced_leader_epoch
        if current_leader_epoch < leader_epoch
        else ErrorCode.unknown_leader_epoch
    )


READ_STEP = 32
"""Partitions read between two yields of :func:`read_partitions_steps`: the first
read of a partition loads its log from disk (~0.1-0.2 ms), so 256 of them made
one step of 25-50 ms."""


def read_partitions(
    partitions: Sequence[PartitionFetch],
    lookup: LogLookup,
    *,
    max_bytes: int,
    isolation: Isolation,
    topic_id_of: Callable[[str], uuid.UUID] | None = None,
    aborted_list: bool = False,
    serving: ServingCheck | None = None,
    authorized: Callable[[str], bool] | None = None,
    redirect: RedirectCheck | None = None,
    follower_read: FollowerCheck | None = None,
) -> FetchResult:
    """Read ``partitions`` in order under the KIP-74 limits, all at once."""
    steps = read_partitions_steps(
        partitions,
        lookup,
        max_bytes=max_bytes,
        isolation=isolation,
        topic_id_of=topic_id_of,
        aborted_list=aborted_list,
        serving=serving,
        authorized=authorized,
        redirect=redirect,
        follower_read=follower_read,
    )
    return drain(steps)


def read_partitions_steps(
    partitions: Sequence[PartitionFetch],
    lookup: LogLookup,
    *,
    max_bytes: int,
    isolation: Isolation,
    topic_id_of: Callable[[str], uuid.UUID] | None = None,
    aborted_list: bool = False,
    serving: ServingCheck | None = None,
    authorized: Callable[[str], bool] | None = None,
    redirect: RedirectCheck | None = None,
    follower_read: FollowerCheck | None = None,
) -> Generator[None, None, FetchResult]:
    """Read ``partitions`` in order under the KIP-74 limits, yielding every ``READ_STEP``.

    The broker runs the steps in time slices (``run_cooperatively``): reading
    100,000 partitions takes far longer than any other client may wait.

    ``aborted_list`` (read_committed) makes responses carry the aborted
    transactions overlapping the returned records, from the log's
    transaction index (an empty list, never null: librdkafka expects one).
    ``serving`` refuses partitions this broker does not lead. Followers
    (``LOG_END``) whose log diverged get the divergence point instead of data
    (``headwater.log.divergence``: OFFSET_OUT_OF_RANGE when the leader's epoch
    history cannot place their last fetched epoch).
    ``authorized(topic)`` False answers ErrorCode.topic_authorization_failed for the
    partition without reading it (or saying whether it exists).
    ``redirect`` (a leader with a replica selector, a consumer with a rack) may
    answer a partition with a ``preferred_read_replica`` and no records.
    ``follower_read`` marks partitions served to a consumer by a follower: an
    offset above the high watermark it knows, but in its log, is one the leader
    made visible and this replica has not yet heard is committed:
    OFFSET_NOT_AVAILABLE (retriable; the client goes back to the leader).
    """
    remaining = max(0, max_bytes)
    min_one_batch = True
    out: list[PartitionData] = []
    total = 0
    has_error = False
    redirected = False
    for n, p in enumerate(partitions, 1):
        if n % READ_STEP == 0:
            yield None
        if authorized is not None and p.topic and not authorized(p.topic):
            out.append(
                PartitionData(
                    topic_id=p.topic_id,
                    topic=p.topic,
                    partition=p.partition,
                    error_code=ErrorCode.topic_authorization_failed,
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
        error = serving(p.topic, p.partition) if serving is not None else ErrorCode.none
        if error:
            data.error_code = error
            out.append(data)
            has_error = True
            continue
        error = leader_epoch_error(p.current_leader_epoch, log.partition_leader_epoch)
        if not error and isolation is Isolation.LOG_END and p.last_fetched_epoch >= 0:
            try:
                diverged = diverging_epoch(log, p.fetch_offset, p.last_fetched_epoch)
            except OffsetOutOfRangeError:
                diverged, error = None, ErrorCode.offset_out_of_range
            if diverged is not None:
                data.diverging_epoch, data.diverging_end_offset = diverged
                data.high_watermark = log.high_watermark
                data.last_stable_offset = log.last_stable_offset
                data.log_start_offset = log.log_start_offset
                out.append(data)
                continue
        if not error and redirect is not None:
            preferred = redirect(p.topic, p.partition, p.fetch_offset)
            if preferred >= 0:
                data.preferred_read_replica = preferred
                _bounds(data, log)
                out.append(data)
                redirected = True
                continue
        if (
            not error
            and follower_read is not None
            and log.high_watermark < p.fetch_offset <= log.log_end_offset
            and follower_read(p.topic, p.partition)
        ):
            error = ErrorCode.offset_not_available
        if not error:
            limit = min(p.partition_max_bytes, remaining)
            try:
                result = log.read(p.fetch_offset, max(0, limit), isolation, min_one_batch)
            except OffsetOutOfRangeError:
                error = ErrorCode.offset_out_of_range
            except KafkaApiError as exc:
                # KAFKA_STORAGE_ERROR (an offline directory), CORRUPT_MESSAGE (a batch
                # the scrubber found bad): the client is told, never given the bytes.
                error = ErrorCode(exc.kafka_error_code)
        if error:
            # The client needs the log's bounds to recover (e.g. reset its position).
            data.error_code = error
            _bounds(data, log)
            out.append(data)
            has_error = True
            continue
        data.high_watermark = result.high_watermark
        data.last_stable_offset = result.last_stable_offset
        data.log_start_offset = result.log_start_offset
        if aborted_list and result.aborted_transactions:
            data.aborted_transactions = result.aborted_transactions
        if isolation is Isolation.LOG_END:
            data.readable_end = result.log_end_offset
        records = result.records
        if records is not None and records.size > 0:
            data.records = records
            total += records.size
            remaining = max(0, remaining - records.size)
            min_one_batch = False
        out.append(data)
    return FetchResult(out, total, has_error, redirected)


def _bounds(data: PartitionData, log: Log) -> None:
    """The log's bounds, which a client needs to recover from an error or to move."""
    data.high_watermark = log.high_watermark
    data.last_stable_offset = log.last_stable_offset
    data.log_start_offset = log.log_start_offset
