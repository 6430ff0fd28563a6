"""One Spark task: read the records of one offset range, and nothing else.

The ``RangeTask`` is the ``InputPartition`` Spark pickles to an executor; it
carries everything the read needs (address, client settings, range, the
data-loss policy), so ``read_range`` depends on nothing but it.

The range end is exclusive and exact: records at or past it are dropped
even if a fetch returned them (batches are fetched whole), and the loop
stops as soon as the consumer's position reaches the end. The position,
not the last record seen, decides: a transaction marker or a compacted-away
record can sit at ``end - 1`` and will never show up as a record.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from headwater.client.errors import KafkaError
from headwater.client.types import TopicPartition
from headwater.protocol.error_codes import ErrorCode
from headwater.spark.clients import ClientConfig, discard, pooled_consumer
from headwater.spark.planning import OffsetRange, report_data_loss

POLL_INTERVAL_S = 0.5
MAX_ROWS_PER_BATCH = 65_536
"""Rows per Arrow batch handed to Spark at most. A fetch (4 MiB per partition,
``TASK_PARTITION_FETCH_BYTES``) becomes one batch; only a fetch that inflates
to more rows than this is sliced (without a copy)."""


@dataclass(frozen=True)
class RangeTask(InputPartition):  # type: ignore[misc]
    """The offsets ``[range.start, range.end)`` of one partition, and how to read them."""

    client: ClientConfig
    range: OffsetRange
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000


def read_range(task: RangeTask) -> Iterator[pa.RecordBatch]:
    """Yield the range's records as Arrow batches, in offset order."""
    r = task.range
    if r.size == 0:
        return
    try:
        yield from _read(task)
    except BaseException:
        # The consumer may hold a half-read state (or a dead connection): the
        # next task in this worker starts from a fresh one.
        discard(task.client)
        raise
    # Stop fetching until the next task says what to read: an idle worker
    # then sends nothing, and the next task's first fetch goes out at once.
    pooled_consumer(task.client).assign([])


def _read(task: RangeTask) -> Iterator[pa.RecordBatch]:
    r = task.range
    tp = TopicPartition(r.topic, r.partition)
    consumer = pooled_consumer(task.client)
    consumer.assign([tp])
    consumer.seek(tp, r.start)
    position = r.start
    deadline = time.monotonic() + task.poll_timeout_ms / 1000
    while position < r.end:
        try:
            table = consumer.poll_arrow(POLL_INTERVAL_S, include_headers=task.include_headers)
        except KafkaError as e:
            if e.code != ErrorCode.offset_out_of_range:
                raise
            position = _skip_lost_offsets(task, position)
            consumer.seek(tp, position)
            continue
        before = position
        # Only ``tp`` is assigned: every chunk is one fetch of it, in offset order.
        for chunk in table.to_batches():
            rows = _in_range(chunk, position, r.end)
            n = rows.num_rows
            if n == 0:
                continue
            for start in range(0, n, MAX_ROWS_PER_BATCH):
                yield rows.slice(start, MAX_ROWS_PER_BATCH)
            position = rows.column("offset")[n - 1].as_py() + 1
        # Control batches and compacted-away offsets move the position
        # without yielding records.
        position = max(position, min(consumer.position(tp), r.end))
        if position > before:
            deadline = time.monotonic() + task.poll_timeout_ms / 1000
        elif time.monotonic() > deadline:
            raise TimeoutError(
                f"no records from {r.topic}-{r.partition} at offset {position} for "
                f"{task.poll_timeout_ms} ms (reading up to {r.end}); raise the source "
                "option 'kafkaConsumer.pollTimeoutMs' if the broker is just slow"
            )


def _in_range(batch: pa.RecordBatch, position: int, end: int) -> pa.RecordBatch:
    """The rows with ``position <= offset < end`` (offsets rise: two binary searches)."""
    offsets = batch.column("offset").to_numpy()
    lo, hi = np.searchsorted(offsets, [position, end])
    return batch.slice(int(lo), int(hi - lo))


def _skip_lost_offsets(task: RangeTask, position: int) -> int:
    """Retention deleted offsets this task still had to read: fail, or move past them."""
    r = task.range
    tp = TopicPartition(r.topic, r.partition)
    log_start = pooled_consumer(task.client).beginning_offsets([tp])[tp]
    if log_start <= position:
        # Out of range at the top (truncation): nothing more to read here.
        report_data_loss(
            f"offset {position} of {r.topic}-{r.partition} is past the log end",
            task.fail_on_data_loss,
        )
        return r.end
    report_data_loss(
        f"offsets {position}..{min(log_start, r.end) - 1} of {r.topic}-{r.partition} were "
        f"deleted before this task read them (log starts at {log_start})",
        task.fail_on_data_loss,
    )
    return min(log_start, r.end)
