"""Exactly-once into a topic: kill -9 the driver between the sink's task writes and
its batch commit, restart, and read the output with read_committed.

The driver is a child process (this module run as a script) so the test can
kill it, JVM and Python workers included. To hit the window between the
tasks' writes and the driver's commit every time, the child registers a
copy of the ``headwater`` source whose stream writer announces each commit
with a file and waits a few seconds before committing; the test kills the
driver during that wait. (The class is defined in ``__main__``, so Spark's
cloudpickle ships it to the Python worker that runs the commit by value.)
The restarted driver uses the plain ``headwater`` format, finishes with
``availableNow`` and reads the output back through the ``headwater`` source
in both isolation levels. read_committed must see every input record exactly
once (Spark's read, Headwater's consumer and kafka-python agree), while
read_uncommitted also sees the killed batch's aborted writes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.spark

SOURCE = "eo-in"
OUTPUT = "eo-out"
RECORDS = 4000
PER_BATCH = 400
COMMIT_PAUSE_S = 8.0


def run_driver(bootstrap: str, workdir: Path, finish: bool) -> None:
    """The child: stream SOURCE into OUTPUT exactly once."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import headwater.spark
    from headwater.spark.sink import HeadwaterStreamWriter
    from headwater.spark.source import HeadwaterDataSource

    announce = workdir / "commits-announced"
    announce.mkdir(parents=True, exist_ok=True)

    class PausingWriter(HeadwaterStreamWriter):  # type: ignore[misc]
        def commit(self, messages: list[Any], batchId: int) -> None:
            (announce / str(batchId)).write_text(str(len(messages)))
            time.sleep(COMMIT_PAUSE_S)
            super().commit(messages, batchId)

    class PausingSource(HeadwaterDataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "headwater-pausing"

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            plain = super().streamWriter(schema, overwrite)
            return PausingWriter(plain.options, plain.columns)

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    headwater.spark.register(spark)
    spark.dataSource.register(PausingSource)
    df = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", SOURCE)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_BATCH))
        .load()
        .select("value")
    )
    writer = (
        df.writeStream.format("headwater" if finish else "headwater-pausing")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", OUTPUT)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(workdir / "checkpoint"))
    )
    query = writer.trigger(availableNow=True).start() if finish else writer.start()
    query.awaitTermination()
    if finish:
        # The output read back through the headwater source, in both isolation levels.
        report = {}
        for isolation in ("read_committed", "read_uncommitted"):
            out = (
                spark.read.format("headwater")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", OUTPUT)
                .option("kafka.isolation.level", isolation)
                .load()
            )
            report[isolation] = [out.count(), out.select("value").distinct().count()]
        print("REPORT " + json.dumps(report), flush=True)
    spark.stop()


def _start_driver(bootstrap: str, workdir: Path, finish: bool) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "tests.integration.test_spark_exactly_once_sink",
        bootstrap,
        str(workdir),
    ]
    if finish:
        cmd.append("--finish")
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group: JVM and workers die with it
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )


def _open_transactions(bootstrap: str) -> bool:
    """Whether the output has records past its last stable offset (written, not committed)."""
    from headwater.client.admin import AdminClient
    from headwater.client.consumer import Consumer
    from headwater.client.types import TopicPartition

    with AdminClient(bootstrap) as admin:
        tps = [TopicPartition(OUTPUT, p) for p in sorted(admin.describe_topic(OUTPUT).partitions)]
    with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed") as c:
        stable = c.end_offsets(tps)
    with Consumer(bootstrap_servers=bootstrap) as c:
        high = c.end_offsets(tps)
    return any(stable[tp] < high[tp] for tp in tps)


def _read_all(bootstrap: str, isolation: str) -> list[bytes]:
    from tests.integration.test_client_transactions import read_headwater

    return read_headwater(bootstrap, OUTPUT, isolation, 0)


@pytest.mark.timeout(900)  # two Spark drivers on a shared 2-core machine
def test_kill_driver_between_task_writes_and_commit_writes_every_record_once(
    tmp_path: Path,
) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic(SOURCE, 4, 1), NewTopic(OUTPUT, 3, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
        for i in range(RECORDS):
            producer.send(SOURCE, value=b"%d" % i, partition=i % 4)
        producer.flush()
        producer.close()

        workdir = tmp_path / "job"
        announced = workdir / "commits-announced"
        driver = _start_driver(broker.bootstrap, workdir, finish=False)
        killed_at = None
        deadline = time.monotonic() + 240
        try:
            while time.monotonic() < deadline and driver.poll() is None:
                batches = {int(p.name) for p in announced.glob("*")}
                if batches and max(batches) >= 1:
                    killed_at = max(batches)
                    # The tasks have written; the driver waits before its EndTxn calls.
                    assert _open_transactions(broker.bootstrap), "nothing was left uncommitted"
                    os.killpg(driver.pid, signal.SIGKILL)
                    break
                time.sleep(0.05)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        assert killed_at is not None, "the driver never reached a batch commit"
        assert (killed_at + 1) * PER_BATCH < RECORDS, "killed too late to matter"

        finisher = _start_driver(broker.bootstrap, workdir, finish=True)
        out, _ = finisher.communicate(timeout=300)
        assert finisher.returncode == 0, out[-2000:]
        report = json.loads(
            next(line for line in out.splitlines() if line.startswith("REPORT "))[7:]
        )
        # Spark's own read of the output: read_committed holds each record once ...
        assert report["read_committed"] == [RECORDS, RECORDS]
        # ... read_uncommitted also the aborted writes of the killed batch.
        assert report["read_uncommitted"][0] > RECORDS
        assert report["read_uncommitted"][1] == RECORDS

        committed = Counter(_read_all(broker.bootstrap, "read_committed"))
        assert sorted(committed) == sorted(b"%d" % i for i in range(RECORDS))
        assert set(committed.values()) == {1}, "a record was written twice"
        everything = _read_all(broker.bootstrap, "read_uncommitted")
        assert len(everything) > RECORDS, "the killed batch's writes were aborted, not missing"

        # A second reader agrees (kafka-python, read_committed).
        consumer = KafkaConsumer(
            OUTPUT,
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            consumer_timeout_ms=5000,
        )
        values = [m.value for m in consumer]
        consumer.close()
        assert Counter(values) == committed
    finally:
        broker.stop()


# -- in-process: batch writes and the topic column ---------------------------------


@pytest.fixture(scope="module")
def spark_and_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import headwater.spark

    broker = BrokerProcess(tmp_path_factory.mktemp("eo-broker") / "data").start()
    session = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-exactly-once-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    headwater.spark.register(session)
    try:
        yield session, broker.bootstrap
    finally:
        session.stop()
        broker.stop()


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from headwater.client.admin import AdminClient

    with AdminClient(bootstrap) as admin:
        admin.create_topics([(topic, partitions, {})])


def test_exactly_once_batch_write_commits_all_tasks_at_job_commit(
    spark_and_broker: tuple[Any, str],
) -> None:
    from tests.integration.test_client_transactions import read_headwater

    spark, bootstrap = spark_and_broker
    _create(bootstrap, "eo-batch", 3)
    rows = [(f"k{i}", b"v%d" % i) for i in range(300)]
    (
        spark.createDataFrame(rows, "key string, value binary")
        .repartition(2)
        .write.format("headwater")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "eo-batch")
        .option("exactlyOnce", "true")
        .save()
    )
    got = read_headwater(bootstrap, "eo-batch", "read_committed", 300)
    assert sorted(got) == sorted(v for _, v in rows)


def test_exactly_once_batch_write_that_fails_leaves_nothing_committed(
    spark_and_broker: tuple[Any, str],
) -> None:
    from tests.integration.test_client_transactions import read_headwater

    spark, bootstrap = spark_and_broker
    _create(bootstrap, "eo-failed", 3)
    # Rows of the second input partition name a partition that does not exist:
    # that task fails, so the job aborts, the first task's transaction included.
    rows = [(b"ok%d" % i, 0 if i < 100 else 7) for i in range(200)]
    df = spark.createDataFrame(rows, "value binary, partition int").coalesce(2)
    with pytest.raises(Exception, match="does not exist"):
        (
            df.write.format("headwater")
            .mode("append")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", "eo-failed")
            .option("exactlyOnce", "true")
            .save()
        )
    assert read_headwater(bootstrap, "eo-failed", "read_committed", 0) == []


def test_exactly_once_stream_with_a_topic_column_is_written_once(
    spark_and_broker: tuple[Any, str], tmp_path: Path
) -> None:
    from tests.integration.test_client_transactions import read_headwater

    spark, bootstrap = spark_and_broker
    _create(bootstrap, "eo-copy-in", 2)
    _create(bootstrap, "eo-copy-out", 2)
    from headwater.client.producer import Producer

    with Producer(bootstrap_servers=bootstrap) as p:
        for i in range(200):
            p.send("eo-copy-in", b"v%d" % i, partition=i % 2)
        p.flush()
    for _ in range(2):  # the second run finds nothing new and writes nothing
        q = (
            spark.readStream.format("headwater")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "eo-copy-in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "70")
            .load()
            .selectExpr("'eo-copy-out' as topic", "upper(cast(value as string)) as value")
            .writeStream.format("headwater")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("exactlyOnce", "true")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None
    got = read_headwater(bootstrap, "eo-copy-out", "read_committed", 200)
    assert sorted(got) == sorted(b"V%d" % i for i in range(200))


if __name__ == "__main__":
    run_driver(sys.argv[1], Path(sys.argv[2]), finish="--finish" in sys.argv[3:])
