"""The Arrow form of consumed records: Spark's Kafka row layout, without pyspark.

``Consumer.poll_arrow`` returns tables of this schema and the Spark source
hands its batches to Spark unchanged, so the two must agree exactly:
``tests/unit/test_spark_schema.py`` checks it against
``pyspark.sql.pandas.types.to_arrow_schema`` of the source's schema.
"""

from __future__ import annotations

from functools import cache
from typing import Final

import numpy as np
import pyarrow as pa

from headwater.records.columnar import HEADER_TYPE

TIMESTAMP_TYPE: Final = pa.timestamp("us", tz="UTC")


@cache
def record_schema(include_headers: bool = False) -> pa.Schema:
    """``key, value, topic, partition, offset, timestamp, timestampType[, headers]``."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def to_record_batch(
    topic: str, partition: int, columns: pa.RecordBatch, include_headers: bool
) -> pa.RecordBatch:
    """Decoder columns (``headwater.records.columnar``) of one partition as a record batch.

    Kafka timestamps are milliseconds, Arrow's (and Spark's) here are
    microseconds; everything else is passed through without a copy.
    """
    n = columns.num_rows
    millis = columns.column("timestamp").to_numpy(zero_copy_only=True)
    micros = pa.Array.from_buffers(TIMESTAMP_TYPE, n, [None, pa.py_buffer(millis * np.int64(1000))])
    arrays = [
        columns.column("key"),
        columns.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        columns.column("offset"),
        micros,
        columns.column("timestampType"),
    ]
    if include_headers:
        arrays.append(columns.column("headers"))
    return pa.RecordBatch.from_arrays(arrays, schema=record_schema(include_headers))
