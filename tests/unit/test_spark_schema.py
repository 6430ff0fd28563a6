"""Row layout of the Spark source and input checks of the sink (no Spark session)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from headwater.client.arrow_records import record_schema, to_record_batch
from headwater.records.columnar import decode_columns
from headwater.records.compression import Compression
from headwater.records.record import RecordBatchBuilder
from headwater.spark.clients import ClientConfig
from headwater.spark.options import SinkOptions
from headwater.spark.planning import OffsetRange
from headwater.spark.schema import arrow_schema, source_schema
from headwater.spark.sink import SinkColumns, check_sink_schema
from headwater.spark.source import HeadwaterDataSource
from headwater.spark.task import RangeTask, _in_range


def columns(include_headers: bool) -> pa.RecordBatch:
    builder = RecordBatchBuilder(Compression.LZ4, base_offset=7, timestamp_type=1)
    builder.append(1_700_000_000_123, b"k7", None, [("h", b"x"), ("n", None)])
    return decode_columns(builder.build(), include_headers=include_headers)


@pytest.mark.parametrize("include_headers", [False, True])
def test_arrow_batches_match_the_schema_spark_checks(include_headers: bool) -> None:
    batch = to_record_batch("t", 3, columns(include_headers), include_headers)
    expected = to_arrow_schema(source_schema(include_headers), timezone="UTC")
    assert batch.schema.equals(expected)
    assert record_schema(include_headers).equals(expected)
    assert arrow_schema(include_headers).equals(expected)


def test_rows_carry_kafka_fields_and_microsecond_timestamps() -> None:
    rows = to_record_batch("t", 3, columns(True), True).to_pylist()
    assert rows == [
        {
            "key": b"k7",
            "value": None,
            "topic": "t",
            "partition": 3,
            "offset": 7,
            "timestamp": datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC),
            "timestampType": 1,
            "headers": [{"key": "h", "value": b"x"}, {"key": "n", "value": None}],
        }
    ]


def test_empty_columns_give_an_empty_batch() -> None:
    empty = decode_columns(b"")
    assert to_record_batch("t", 0, empty, False).num_rows == 0


def test_data_source_schema_follows_include_headers_option() -> None:
    plain = HeadwaterDataSource({"subscribe": "t"}).schema()
    with_headers = HeadwaterDataSource({"includeheaders": "true"}).schema()
    assert plain.fieldNames() == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
    ]  # fmt: skip
    assert with_headers.fieldNames()[-1] == "headers"


def test_task_keeps_only_records_inside_the_range() -> None:
    builder = RecordBatchBuilder(base_offset=0)
    for i in range(10):
        builder.append(i, None, b"%d" % i)
    batch = to_record_batch("t", 3, decode_columns(builder.build()), False)
    kept = _in_range(batch, 2, 6)
    assert kept.column("offset").to_pylist() == [2, 3, 4, 5]
    assert _in_range(batch, 10, 12).num_rows == 0


def test_tasks_pickle_with_everything_they_need() -> None:
    task = RangeTask(
        client=ClientConfig.of("h:1", {"isolation.level": "read_committed"}),
        range=OffsetRange("t", 3, 10, 20),
        include_headers=True,
        fail_on_data_loss=False,
    )
    assert pickle.loads(pickle.dumps(task)) == task


def test_client_config_puts_user_settings_over_defaults_and_address_last() -> None:
    config = ClientConfig.of("h:1", {"fetch.max.wait.ms": "7", "bootstrap.servers": "x:2"})
    settings = config.client_settings(fetch_max_wait_ms="20", client_id="me")
    assert settings == {"fetch.max.wait.ms": "7", "client.id": "me", "bootstrap.servers": "h:1"}


HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def schema(**columns: object) -> StructType:
    return StructType([StructField(name, dt) for name, dt in columns.items()])  # type: ignore[arg-type]


def test_sink_accepts_kafka_sink_columns() -> None:
    cols = check_sink_schema(
        schema(
            topic=StringType(),
            key=StringType(),
            value=BinaryType(),
            partition=IntegerType(),
            headers=HEADERS,
        ),
        SinkOptions("h:1"),
    )
    assert cols == SinkColumns(True, True, True, True)


def test_sink_topic_option_replaces_the_topic_column() -> None:
    cols = check_sink_schema(schema(value=StringType()), SinkOptions("h:1", topic="out"))
    assert cols == SinkColumns(False, False, False, False)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"topic": StringType()}, "'value' column"),
        ({"value": BinaryType()}, "'topic' column or the 'topic' option"),
        ({"topic": StringType(), "value": LongType()}, "'value' must be binary or string"),
        ({"topic": IntegerType(), "value": BinaryType()}, "'topic' must be a string"),
        ({"topic": StringType(), "value": BinaryType(), "partition": LongType()}, "'partition'"),
        ({"topic": StringType(), "value": BinaryType(), "headers": StringType()}, "'headers'"),
    ],
)
def test_sink_refuses_wrong_columns_on_the_driver(columns: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_sink_schema(schema(**columns), SinkOptions("h:1"))
