"""The source's row layout (Spark's Kafka schema) and its Arrow form.

Tasks hand Spark ``pyarrow.RecordBatch``es rather than Python tuples: Spark
would otherwise convert every value of every row one by one in Python,
which costs more than fetching and decoding the records. Spark checks a
returned batch against ``to_arrow_schema(schema, timezone="UTC")``
exactly (names, types, nullability), so the Arrow schema is derived the
same way instead of being written out by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from headwater.client.types import Header


def source_schema(include_headers: bool = False) -> StructType:
    """``key, value, topic, partition, offset, timestamp, timestampType[, headers]``."""
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        fields.append(
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [
                            StructField("key", StringType(), True),
                            StructField("value", BinaryType(), True),
                        ]
                    ),
                    True,
                ),
                True,
            )
        )
    return StructType(fields)


@cache
def arrow_schema(include_headers: bool = False) -> pa.Schema:
    return to_arrow_schema(source_schema(include_headers), timezone="UTC")


class RecordLike(Protocol):
    """What a task turns into a row: a client ``ConsumerRecord`` fits."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def timestamp_type(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> list[Header]: ...


def records_to_arrow(
    topic: str, partition: int, records: Sequence[RecordLike], include_headers: bool
) -> pa.RecordBatch:
    """One Arrow batch of rows for records of one partition."""
    schema = arrow_schema(include_headers)
    n = len(records)
    columns: list[Any] = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([r.offset for r in records], pa.int64()),
        # Kafka timestamps are milliseconds, Spark's are microseconds.
        pa.array([r.timestamp * 1000 for r in records], schema.field("timestamp").type),
        pa.array([r.timestamp_type for r in records], pa.int32()),
    ]
    if include_headers:
        columns.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records],
                schema.field("headers").type,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)
