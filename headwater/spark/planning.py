"""Turning offsets into work: admission control and offset ranges for tasks.

Pure functions over offset maps, so every rule (how a ``maxOffsetsPerTrigger``
budget is shared, where new or deleted partitions start, how ranges split
for ``minPartitions``, what counts as data loss) is tested without Spark or
a broker. The readers fetch log bounds, then call these.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from headwater.spark.offsets import OffsetMap, TopicPartition

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Offsets the query should have read are gone (retention, deletion, truncation)."""


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Raise under ``failOnDataLoss=true``; otherwise log and carry on, as Spark does."""
    if fail_on_data_loss:
        raise DataLossError(
            f"{message}. Some data may have been lost. If you want the query to go on "
            "regardless, set the source option 'failOnDataLoss' to 'false'."
        )
    log.warning("%s. Some data may have been lost; going on (failOnDataLoss=false).", message)


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: the unit of work of one task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def rate_limit(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], max_records: int
) -> OffsetMap:
    """End offsets that admit at most ``max_records`` offsets past ``start`` in total.

    The budget is shared in proportion to each partition's backlog, like
    Spark's Kafka source, but exactly: the total admitted is
    ``min(max_records, backlog)``, never more. When the budget allows, every
    backlogged partition first gets one offset (a small partition is never
    starved behind a big one), then the rest is shared in proportion to what
    remains, leftovers by largest remainder. Partitions missing from
    ``start`` are taken whole (the caller puts new partitions in ``start``
    at their first offset).
    """
    backlog = {tp: e - start[tp] for tp, e in end.items() if tp in start and e > start[tp]}
    if sum(backlog.values()) <= max_records:
        return dict(end)
    if max_records < len(backlog):
        biggest = sorted(backlog, key=lambda tp: (-backlog[tp], tp))[:max_records]
        granted = {tp: 1 for tp in biggest}
    else:
        rest = _largest_remainder(
            {tp: n - 1 for tp, n in backlog.items()}, max_records - len(backlog)
        )
        granted = {tp: 1 + rest[tp] for tp in backlog}
    out = dict(end)
    for tp in backlog:
        out[tp] = start[tp] + granted.get(tp, 0)
    return out


def _largest_remainder(
    weights: Mapping[TopicPartition, int], budget: int
) -> dict[TopicPartition, int]:
    """Split ``budget`` (at most the weights' sum) in proportion to the weights."""
    total = sum(weights.values())
    if total == 0:
        return {tp: 0 for tp in weights}
    # Integer arithmetic: float shares can round a floor up and overspend.
    granted = {tp: budget * w // total for tp, w in weights.items()}
    remainder = {tp: budget * w % total for tp, w in weights.items()}
    leftover = budget - sum(granted.values())
    order = sorted(
        (tp for tp in weights if granted[tp] < weights[tp]), key=lambda tp: (-remainder[tp], tp)
    )
    for tp in order[:leftover]:
        granted[tp] += 1
    return granted


def offset_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """Non-empty ranges from ``start`` to ``end``, reporting every kind of data loss.

    ``earliest`` is each partition's current log start offset. A partition in
    ``end`` but not ``start`` is new since the last batch and is read from
    its beginning (reporting loss if its beginning was already deleted); a
    partition in ``start`` but not ``end`` was deleted; a range that runs
    backwards means the partition was truncated or recreated; a range whose
    start is below the log start lost the offsets retention deleted, and is
    read from the log start when loss is tolerated.
    """
    ranges: list[OffsetRange] = []
    for tp in sorted(set(start) - set(end)):
        report_data_loss(f"partition {tp[0]}-{tp[1]} is gone", fail_on_data_loss)
    for tp in sorted(end):
        until = end[tp]
        log_start = earliest.get(tp, 0)
        if tp not in start:
            if log_start > 0:
                report_data_loss(
                    f"new partition {tp[0]}-{tp[1]} starts at offset {log_start}, not 0",
                    fail_on_data_loss,
                )
            begin = log_start
        else:
            begin = start[tp]
        if until < begin:
            report_data_loss(
                f"offset of {tp[0]}-{tp[1]} went back from {begin} to {until}",
                fail_on_data_loss,
            )
            continue
        if begin < log_start and begin < until:
            report_data_loss(
                f"offsets {begin}..{min(log_start, until) - 1} of {tp[0]}-{tp[1]} were deleted "
                f"(log starts at {log_start})",
                fail_on_data_loss,
            )
            begin = min(log_start, until)
        if until > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    return ranges


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split big ranges so there are at least ``min_partitions`` tasks (when possible).

    Each range gets a number of pieces proportional to its share of all
    offsets (at least one; leftovers by largest remainder, so the count is
    reached exactly unless there are fewer offsets than tasks asked for),
    and is cut into nearly equal consecutive pieces. Without
    ``min_partitions``, or with enough ranges already, one task per
    partition is kept: that is what keeps each partition's records in order
    within a task.
    """
    items = [r for r in ranges if r.size > 0]
    if not min_partitions or len(items) >= min_partitions:
        return items
    total = sum(r.size for r in items)
    wanted = min(min_partitions, total)
    shares = [r.size * wanted / total for r in items]
    counts = [max(1, math.floor(s)) for s in shares]
    while sum(counts) < wanted:
        i = max(
            (i for i, r in enumerate(items) if counts[i] < r.size),
            key=lambda i: shares[i] - counts[i],
        )
        counts[i] += 1
    out: list[OffsetRange] = []
    for r, pieces in zip(items, counts, strict=True):
        base, extra = divmod(r.size, pieces)
        begin = r.start
        for i in range(pieces):
            length = base + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, begin, begin + length))
            begin += length
    return out


def available_now_offsets(
    latest: Mapping[TopicPartition, int],
    target: Mapping[TopicPartition, int],
    start: Mapping[TopicPartition, int],
) -> OffsetMap:
    """``latest`` held to an ``availableNow`` target: nothing past it, no new partitions.

    A partition the query already reads but the target does not know (it
    came back from the checkpoint) stays where it is rather than looking
    deleted.
    """
    out: OffsetMap = {}
    for tp, offset in latest.items():
        if tp in target:
            out[tp] = min(offset, target[tp])
        elif tp in start:
            out[tp] = min(offset, start[tp])
    return out
