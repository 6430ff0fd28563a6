"""The source's row layout (Spark's Kafka schema) and its Arrow form.

Tasks hand Spark ``pyarrow.RecordBatch``es rather than Python tuples: Spark
would otherwise convert every value of every row one by one in Python,
which costs more than fetching and decoding the records. Spark checks a
returned batch against ``to_arrow_schema(schema, timezone="UTC")``
exactly (names, types, nullability), so the Arrow schema is derived the
same way instead of being written out by hand. The batches themselves come
from ``Consumer.poll_arrow`` (``headwater.client.arrow_records``), whose
schema a unit test holds equal to this one.
"""

from __future__ import annotations

from functools import cache

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
