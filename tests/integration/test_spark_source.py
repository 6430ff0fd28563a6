"""The ``headwater`` Spark source and sink against a real broker and Spark ``local[2]``.

One broker and one SparkSession serve the whole module (a session costs
~10 s to start); every test uses its own topics. Data is produced and
checked with kafka-python, an independent client.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions, NewTopic

from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("spark-broker"),
        overrides=["log.retention.check.interval.ms=200"],
    ).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import headwater.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    headwater.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


def create_topic(broker: BrokerProcess, name: str, partitions: int, **configs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
    finally:
        admin.close()


def produce(
    broker: BrokerProcess, topic: str, records: list[tuple[int, bytes | None, bytes]], **kw: Any
) -> None:
    """(partition, key, value) triples, in order, each with header ``n``."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, **kw)
    for i, (partition, key, value) in enumerate(records):
        producer.send(topic, value=value, key=key, partition=partition, headers=[("n", b"%d" % i)])
    producer.flush()
    producer.close()


def reader(spark: Any, broker: BrokerProcess, topic: str, **options: Any) -> Any:
    r = spark.read.format("headwater").option("kafka.bootstrap.servers", broker.bootstrap)
    r = r.option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def stream(spark: Any, broker: BrokerProcess, **options: Any) -> Any:
    r = spark.readStream.format("headwater").option("headwater.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


# -- batch ---------------------------------------------------------------------


def test_batch_read_returns_every_record_with_kafka_columns(
    spark: Any, broker: BrokerProcess
) -> None:
    create_topic(broker, "all", 3)
    sent = [(i % 3, b"k%d" % i, b"v%d" % i) for i in range(300)]
    before_ms = int(time.time() * 1000)
    produce(broker, "all", sent)
    df = reader(spark, broker, "all", includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    rows = df.collect()
    assert len(rows) == 300
    by_value = {r.value: r for r in rows}
    for i, (partition, key, value) in enumerate(sent):
        row = by_value[value]
        assert (row.key, row.topic, row.partition, row.offset) == (key, "all", partition, i // 3)
        assert row.timestampType == 0
        assert abs(row.timestamp.timestamp() * 1000 - before_ms) < 60_000
        assert [(h.key, h.value) for h in row.headers] == [("n", b"%d" % i)]


def test_batch_read_of_exact_offset_ranges(spark: Any, broker: BrokerProcess) -> None:
    create_topic(broker, "ranges", 3)
    produce(broker, "ranges", [(i % 3, None, b"%d" % i) for i in range(90)])  # 30 per partition
    df = reader(
        spark,
        broker,
        "ranges",
        startingOffsets='{"ranges":{"0":5,"1":-2,"2":29}}',
        endingOffsets='{"ranges":{"0":10,"1":3,"2":-1}}',
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, 10)] + [(1, 0), (1, 1), (1, 2), (2, 29)]


def test_batch_read_of_an_empty_topic_has_no_rows(spark: Any, broker: BrokerProcess) -> None:
    create_topic(broker, "empty", 2)
    assert reader(spark, broker, "empty").count() == 0


def test_min_partitions_splits_ranges_without_changing_the_rows(
    spark: Any, broker: BrokerProcess
) -> None:
    create_topic(broker, "split", 2)
    produce(broker, "split", [(i % 2, None, b"%d" % i) for i in range(400)])
    plain = reader(spark, broker, "split")
    split = reader(spark, broker, "split", minPartitions=7)
    assert plain.rdd.getNumPartitions() == 2
    assert split.rdd.getNumPartitions() >= 7
    rows = sorted((r.partition, r.offset, r.value) for r in split.collect())
    assert rows == sorted((r.partition, r.offset, r.value) for r in plain.collect())
    assert len(rows) == 400


def test_subscribe_pattern_and_assign_pick_their_partitions(
    spark: Any, broker: BrokerProcess
) -> None:
    for name in ("pat-a", "pat-b", "other-pat"):
        create_topic(broker, name, 2)
        produce(broker, name, [(i % 2, None, name.encode()) for i in range(10)])
    pattern = spark.read.format("headwater").option("kafka.bootstrap.servers", broker.bootstrap)
    df = pattern.option("subscribePattern", "pat-.*").load()
    assert sorted({r.topic for r in df.collect()}) == ["pat-a", "pat-b"]
    assigned = spark.read.format("headwater").option("kafka.bootstrap.servers", broker.bootstrap)
    df = assigned.option("assign", '{"pat-b":[1]}').load()
    assert {(r.topic, r.partition) for r in df.collect()} == {("pat-b", 1)}
    assert df.count() == 5


def _wait_for_log_start(broker: BrokerProcess, tp: TopicPartition, timeout: float = 30) -> int:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            start = consumer.beginning_offsets([tp])[tp]
            if start > 0:
                return int(start)
            time.sleep(0.3)
        raise AssertionError("retention did not delete anything")
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def expired_topic(broker: BrokerProcess) -> int:
    """A topic whose first segments retention has deleted; returns the log start offset."""
    create_topic(broker, "expired", 1, **{"retention.ms": "120000", "segment.bytes": "2000"})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    now = int(time.time() * 1000)
    for i in range(100):
        # The first half is 200 s old: retention deletes the segments holding only those.
        ts = now - 200_000 if i < 50 else now
        producer.send("expired", value=b"x" * 100, partition=0, timestamp_ms=ts)
        producer.flush()
    producer.close()
    return _wait_for_log_start(broker, TopicPartition("expired", 0))


def test_batch_read_of_deleted_offsets_fails_or_skips_by_fail_on_data_loss(
    spark: Any, broker: BrokerProcess, expired_topic: int
) -> None:
    start = '{"expired":{"0":0}}'
    with pytest.raises(Exception, match="were deleted"):
        reader(spark, broker, "expired", startingOffsets=start).collect()
    rows = reader(spark, broker, "expired", startingOffsets=start, failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == list(range(expired_topic, 100))


# -- streaming -----------------------------------------------------------------


def _run_available_now(df: Any, name: str, checkpoint: Path) -> tuple[Any, list[int]]:
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    return q, [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def test_max_offsets_per_trigger_sizes_every_batch_under_available_now(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker, "limited", 4)
    produce(broker, "limited", [(i % 4, None, b"%d" % i) for i in range(1000)])
    df = stream(
        spark, broker, subscribe="limited", startingOffsets="earliest", maxOffsetsPerTrigger=300
    )
    _, sizes = _run_available_now(df, "limited_sink", tmp_path / "ckpt")
    assert sizes == [300, 300, 300, 100]
    got = spark.sql("select count(*) n, count(distinct partition, offset) d from limited_sink")
    assert got.first().asDict() == {"n": 1000, "d": 1000}


def test_stream_resumes_from_checkpoint_without_rereading(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker, "resume", 2)
    produce(broker, "resume", [(i % 2, None, b"a%d" % i) for i in range(100)])
    df = stream(spark, broker, subscribe="resume", startingOffsets="earliest")
    out = tmp_path / "out"

    def run() -> None:
        q = (
            df.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    assert spark.read.parquet(str(out)).count() == 100
    produce(broker, "resume", [(i % 2, None, b"b%d" % i) for i in range(60)])
    run()
    values = [r.value for r in spark.read.parquet(str(out)).collect()]
    assert sorted(values) == sorted(
        [b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(60)]
    )


def test_stream_picks_up_partitions_added_while_running(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker, "growing", 2)
    produce(broker, "growing", [(i % 2, None, b"old%d" % i) for i in range(20)])
    df = stream(spark, broker, subscribe="growing", startingOffsets="earliest")
    q = (
        df.writeStream.format("memory")
        .queryName("growing_sink")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        _wait_rows(spark, q, "growing_sink", 20)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_partitions({"growing": NewPartitions(4)})
        admin.close()
        produce(broker, "growing", [(2 + i % 2, None, b"new%d" % i) for i in range(10)])
        _wait_rows(spark, q, "growing_sink", 30)
    finally:
        q.stop()
    rows = spark.sql("select partition, offset from growing_sink").collect()
    assert sorted((r.partition, r.offset) for r in rows if r.partition >= 2) == [
        (p, o) for p in (2, 3) for o in range(5)
    ]
    assert len(rows) == 30


def _wait_rows(spark: Any, q: Any, table: str, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert q.exception() is None, q.exception()
        if spark.sql(f"select count(*) c from {table}").first().c >= n:
            return
        time.sleep(0.3)
    raise AssertionError(f"{table} did not reach {n} rows")


def test_stream_over_deleted_offsets_fails_or_skips_by_fail_on_data_loss(
    spark: Any, broker: BrokerProcess, expired_topic: int, tmp_path: Path
) -> None:
    start = '{"expired":{"0":0}}'
    df = stream(spark, broker, subscribe="expired", startingOffsets=start)
    q = (
        df.writeStream.format("memory")
        .queryName("expired_strict")
        .option("checkpointLocation", str(tmp_path / "strict"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="were deleted"):
        q.awaitTermination(120)
    df = stream(spark, broker, subscribe="expired", startingOffsets=start, failOnDataLoss="false")
    _run_available_now(df, "expired_lenient", tmp_path / "lenient")
    offsets = [r.offset for r in spark.sql("select offset from expired_lenient").collect()]
    assert sorted(offsets) == list(range(expired_topic, 100))


# -- sink ----------------------------------------------------------------------


def _consume_all(broker: BrokerProcess, topic: str, n: int) -> list[Any]:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) >= n:
            break
    consumer.close()
    return got


def test_batch_sink_round_trip_read_back_by_kafka_python(spark: Any, broker: BrokerProcess) -> None:
    create_topic(broker, "sunk", 3)
    rows = [(f"k{i}", f"value {i}".encode(), i % 3, [(f"h{i}", b"x")]) for i in range(500)]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, headers array<struct<key string, value binary>>",
    )
    (
        df.write.format("headwater")
        .mode("append")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", "sunk")
        .option("kafka.compression.type", "zstd")
        .save()
    )
    got = _consume_all(broker, "sunk", 500)
    assert len(got) == 500
    by_key = {m.key: m for m in got}
    for key, value, partition, headers in rows:
        m = by_key[key.encode()]
        assert (m.value, m.partition, m.headers) == (value, partition, headers)


def test_stream_sink_copies_a_topic_with_topic_column(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker, "copy-in", 2)
    create_topic(broker, "copy-out", 2)
    produce(broker, "copy-in", [(i % 2, b"k%d" % i, b"v%d" % i) for i in range(200)])
    df = stream(spark, broker, subscribe="copy-in", startingOffsets="earliest")
    q = (
        df.selectExpr("'copy-out' as topic", "key", "upper(cast(value as string)) as value")
        .writeStream.format("headwater")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    got = _consume_all(broker, "copy-out", 200)
    assert sorted((m.key, m.value) for m in got) == sorted(
        (b"k%d" % i, b"V%d" % i) for i in range(200)
    )


def test_sink_without_topic_fails_before_any_task(spark: Any, broker: BrokerProcess) -> None:
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="topic"):
        df.write.format("headwater").mode("append").option(
            "kafka.bootstrap.servers", broker.bootstrap
        ).save()


def test_sink_refuses_overwrite_mode(spark: Any, broker: BrokerProcess) -> None:
    df = spark.createDataFrame([(b"v",)], "value binary")
    writer = df.write.format("headwater").mode("overwrite")
    with pytest.raises(Exception, match="only appends"):
        writer.option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "x").save()


# -- last: restarts the module's broker ------------------------------------------


def test_stream_rides_over_a_broker_restart(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker, "restart", 2)
    produce(broker, "restart", [(i % 2, None, b"a%d" % i) for i in range(100)])
    df = stream(spark, broker, subscribe="restart", startingOffsets="earliest")
    q = (
        df.writeStream.format("memory")
        .queryName("restart_sink")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        _wait_rows(spark, q, "restart_sink", 100)
        broker.restart()
        produce(broker, "restart", [(i % 2, None, b"b%d" % i) for i in range(100)])
        _wait_rows(spark, q, "restart_sink", 200, timeout=90)
    finally:
        q.stop()
    got = spark.sql("select count(*) n, count(distinct partition, offset) d from restart_sink")
    assert got.first().asDict() == {"n": 200, "d": 200}
