"""The ``headwater`` sink: each task produces its rows, batched and compressed.

Columns follow Spark's Kafka sink: ``value`` (binary or string, required),
``key`` (binary or string), ``topic`` (string; the ``topic`` option
overrides it), ``partition`` (int; otherwise the key's murmur2 partition),
``headers`` (array<struct<key string, value binary>>). The schema is
checked on the driver so a wrong column fails the query before any task runs.

Tasks take Arrow batches (the ``*ArrowWriter`` bases) because Spark's
row-by-row conversion to Python objects costs more than producing, and
hand them on as columns: rows are grouped by topic and partition with
vectorised Arrow/numpy calls and ``Producer.send_arrow`` encodes each
group into RecordBatch v2 without a Python object per row. The producer
sends batches of about ``batch.size`` and compresses (``lz4`` unless
``kafka.compression.type`` says otherwise);
each task flushes and checks every send before reporting success, so a
committed micro-batch is on the broker. Like Spark's Kafka sink this is
at-least-once by default: a retried task produces its rows again.

With ``.option("exactlyOnce", "true")`` it is exactly-once for
``read_committed`` readers (``headwater.spark.exactly_once`` has the whole
design): each task writes its rows and the sink's progress (query id, batch
id, through TxnOffsetCommit under a group per task) inside one Kafka
transaction which it does not commit; the driver's ``commit(messages,
batchId)`` commits all of them, ``abort`` aborts them. After a crash, the
replayed batch's tasks fence their predecessors (``init_transactions``),
skip when their progress says the batch is in, and write again otherwise.
"""

from __future__ import annotations

import collections
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from headwater.records.columnar_encode import key_partitions
from headwater.spark.clients import ClientConfig, discard, pooled_producer
from headwater.spark.exactly_once import (
    TransactionalCommit,
    abort_all,
    commit_all,
    current_place,
    new_job_id,
    write_transactionally,
)
from headwater.spark.options import SinkOptions


@dataclass(frozen=True)
class SinkColumns:
    """Which optional columns the input has; decided once on the driver."""

    has_key: bool
    has_topic_column: bool
    has_partition: bool
    has_headers: bool


def _is_headers_type(dt: DataType) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = {(f.name, type(f.dataType)) for f in dt.elementType.fields}
    return fields == {("key", StringType), ("value", BinaryType)}


def check_sink_schema(schema: StructType, options: SinkOptions) -> SinkColumns:
    """Validate the input columns like Spark's Kafka sink does."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise ValueError("the headwater sink needs a 'value' column (binary or string)")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], BinaryType | StringType):
            raise ValueError(f"sink column '{name}' must be binary or string, not {types[name]}")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise ValueError(f"sink column 'topic' must be a string, not {types['topic']}")
    if options.topic is None and "topic" not in types:
        raise ValueError("the headwater sink needs a 'topic' column or the 'topic' option")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise ValueError(f"sink column 'partition' must be an int, not {types['partition']}")
    if "headers" in types and not _is_headers_type(types["headers"]):
        raise ValueError(
            "sink column 'headers' must be array<struct<key: string, value: binary>>, "
            f"not {types['headers']}"
        )
    return SinkColumns(
        has_key="key" in types,
        has_topic_column="topic" in types,
        has_partition="partition" in types,
        has_headers="headers" in types,
    )


@dataclass(frozen=True)
class ProducedCount(WriterCommitMessage):  # type: ignore[misc]
    """A task's commit message: how many records it produced."""

    records: int


def produce_batches(
    options: SinkOptions, columns: SinkColumns, batches: Iterator[pa.RecordBatch]
) -> ProducedCount:
    """Produce every row, flush, and fail if any record was refused."""
    config = ClientConfig.of(options.bootstrap, options.client_settings)
    producer = pooled_producer(config)
    try:
        count, _ = produce_rows(producer, options, columns, batches)
    except BaseException:
        discard(config)
        raise
    return ProducedCount(count)


def produce_rows(
    producer: Any, options: SinkOptions, columns: SinkColumns, batches: Iterator[pa.RecordBatch]
) -> tuple[int, str | None]:
    """Send every row and check every send (flushing first); returns the row count and
    the first topic written to (None: no rows)."""
    # Futures in send order; finished ones are checked and dropped after each
    # Arrow batch, so memory follows what is in flight, not the task's size.
    pending: collections.deque[Any] = collections.deque()
    partition_counts: dict[str, int] = {}
    first_topic: str | None = None
    count = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        for topic, rows in _by_topic(batch, options.topic):
            if topic not in partition_counts:
                partition_counts[topic] = len(producer.partitions_for(topic))
                first_topic = first_topic or topic
            for partition, part in _by_partition(rows, columns, partition_counts[topic]):
                pending.extend(
                    producer.send_arrow(
                        topic,
                        partition,
                        part.column("value"),
                        part.column("key") if columns.has_key else None,
                        headers=_headers(part) if columns.has_headers else None,
                    )
                )
        count += batch.num_rows
        while pending and pending[0].done():
            pending.popleft().result()
    producer.flush()
    for future in pending:
        future.result()
    return count, first_topic


def write_task(
    options: SinkOptions, columns: SinkColumns, job_id: str, batches: Iterator[pa.RecordBatch]
) -> WriterCommitMessage:
    """One task's write, in the mode the options ask for."""
    if not options.exactly_once:
        return produce_batches(options, columns, batches)
    return write_transactionally(
        options,
        current_place(job_id),
        batches,
        lambda producer, rows: produce_rows(producer, options, columns, rows),
    )


def _by_topic(batch: pa.RecordBatch, topic: str | None) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of each target topic: the ``topic`` option, else the ``topic`` column."""
    if topic is not None:
        yield topic, batch
        return
    column = batch.column("topic")
    if column.null_count:
        raise ValueError("null topic in the data and no 'topic' option")
    names = pc.unique(column).to_pylist()
    if len(names) == 1:
        yield names[0], batch
        return
    for name in names:
        yield name, batch.filter(pc.equal(column, name))


def _by_partition(
    rows: pa.RecordBatch, columns: SinkColumns, num_partitions: int
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Rows grouped by partition, as Spark's Kafka sink picks them.

    The ``partition`` column if given (null: as if absent), else the murmur2
    partition of the key (the producer's default partitioner, vectorised),
    else one random partition per Arrow batch (sticky, KIP-480 style).
    """
    n = rows.num_rows
    parts = np.full(n, random.randrange(num_partitions), np.int32)
    if columns.has_key:
        keys = rows.column("key")
        hashed = key_partitions(keys, num_partitions)
        valid = keys.is_valid().to_numpy(zero_copy_only=False)
        parts = np.where(valid, hashed, parts)
    if columns.has_partition:
        given = rows.column("partition")
        valid = given.is_valid().to_numpy(zero_copy_only=False)
        parts = np.where(valid, given.fill_null(0).to_numpy(), parts).astype(np.int32)
        bad = parts[(parts < 0) | (parts >= num_partitions)]
        if len(bad):
            raise ValueError(
                f"partition {int(bad[0])} does not exist ({num_partitions} partitions)"
            )
    first = int(parts[0])
    if (parts == first).all():
        yield first, rows
        return
    order = np.argsort(parts, kind="stable")
    ordered = parts[order]
    cuts = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), n]
    for lo, hi in itertools.pairwise(cuts):
        yield int(ordered[lo]), rows.take(pa.array(order[lo:hi]))


def _headers(rows: pa.RecordBatch) -> list[list[tuple[str, bytes | None]] | None]:
    return [
        [(h["key"], h["value"]) for h in hs] if hs else None
        for hs in rows.column("headers").to_pylist()
    ]


class HeadwaterBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """``df.write.format("headwater")``; with ``exactlyOnce``, all-or-nothing at job commit."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns
        self.job_id = new_job_id()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_task(self.options, self.columns, self.job_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            commit_all(self.options, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            abort_all(self.options, messages)


class HeadwaterStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """``df.writeStream.format("headwater")``: at-least-once like Spark's Kafka sink,
    or exactly-once with ``exactlyOnce`` (the driver commits each micro-batch)."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns
        self.job_id = new_job_id()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_task(self.options, self.columns, self.job_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: nothing to do, every task flushed before it reported success.
        Exactly-once: commit every task's transaction."""
        if self.options.exactly_once:
            commit_all(self.options, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: produced records cannot be taken back. Exactly-once: abort them."""
        if self.options.exactly_once:
            abort_all(self.options, messages)


__all__ = [
    "HeadwaterBatchWriter",
    "HeadwaterStreamWriter",
    "ProducedCount",
    "SinkColumns",
    "TransactionalCommit",
    "check_sink_schema",
    "produce_batches",
]
