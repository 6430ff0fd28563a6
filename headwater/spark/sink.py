"""The ``headwater`` sink: each task produces its rows, batched and compressed.

Columns follow Spark's Kafka sink: ``value`` (binary or string, required),
``key`` (binary or string), ``topic`` (string; the ``topic`` option
overrides it), ``partition`` (int; otherwise the key's murmur2 partition),
``headers`` (array<struct<key string, value binary>>). The schema is
checked on the driver so a wrong column fails the query before any task runs.

Tasks take Arrow batches (the ``*ArrowWriter`` bases) because Spark's
row-by-row conversion to Python objects costs more than producing. The
producer batches per partition (``linger.ms``, ``batch.size``) and
compresses (``lz4`` unless ``kafka.compression.type`` says otherwise);
each task flushes and checks every send before reporting success, so a
committed micro-batch is on the broker. Like Spark's Kafka sink this is
at-least-once: a retried task produces its rows again.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
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

from headwater.spark.clients import ClientConfig, discard, pooled_producer
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


def _as_bytes(values: list[Any]) -> list[bytes | None]:
    return [v.encode() if isinstance(v, str) else v for v in values]


def produce_batches(
    options: SinkOptions, columns: SinkColumns, batches: Iterator[pa.RecordBatch]
) -> ProducedCount:
    """Produce every row, flush, and fail if any record was refused."""
    config = ClientConfig.of(options.bootstrap, options.client_settings)
    producer = pooled_producer(config)
    # Futures in send order; finished ones are checked and dropped after each
    # Arrow batch, so memory follows what is in flight, not the task's size.
    pending: collections.deque[Any] = collections.deque()
    count = 0
    try:
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            values = _as_bytes(batch.column("value").to_pylist())
            keys: Sequence[bytes | None] = (
                _as_bytes(batch.column("key").to_pylist()) if columns.has_key else [None] * n
            )
            if options.topic is not None:
                topics: Sequence[str | None] = [options.topic] * n
            else:
                topics = batch.column("topic").to_pylist()
            parts: Sequence[int | None] = (
                batch.column("partition").to_pylist() if columns.has_partition else [None] * n
            )
            headers: Sequence[Any] = (
                batch.column("headers").to_pylist() if columns.has_headers else [None] * n
            )
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise ValueError("null topic in the data and no 'topic' option")
                hdrs = headers[i]
                pending.append(
                    producer.send(
                        topic,
                        values[i],
                        key=keys[i],
                        headers=[(h["key"], h["value"]) for h in hdrs] if hdrs else None,
                        partition=parts[i],
                    )
                )
            count += n
            while pending and pending[0].done():
                pending.popleft().result()
        producer.flush()
        for future in pending:
            future.result()
    except BaseException:
        discard(config)
        raise
    return ProducedCount(count)


class HeadwaterBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """``df.write.format("headwater")``."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedCount:
        return produce_batches(self.options, self.columns, iterator)


class HeadwaterStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """``df.writeStream.format("headwater")``: at-least-once, like Spark's Kafka sink."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedCount:
        return produce_batches(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every task flushed before it reported success."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: produced records cannot be taken back (at-least-once)."""
