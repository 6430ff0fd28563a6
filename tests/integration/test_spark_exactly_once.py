"""Exactly-once into parquet: kill -9 the Spark driver mid-batch, restart, count.

The driver runs as a child process (this module run as a script), so the
test can kill it, JVM and Python workers included, the way a crash would.
The restarted driver resumes from the checkpoint, finishes with
``availableNow`` and reports what the parquet sink holds, read back through
Spark so the file sink's commit log decides what is visible (files of the
killed batch are on disk but not committed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.spark

TOPIC = "exactly-once"
RECORDS = 8000
PER_BATCH = 400


def run_driver(bootstrap: str, workdir: Path, finish: bool) -> None:
    """The child: stream TOPIC into parquet; with ``finish``, drain and report counts."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import headwater.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    headwater.spark.register(spark)
    df = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_BATCH))
        .load()
        .select("partition", "offset", "value")
    )
    writer = (
        df.writeStream.format("parquet")
        .option("path", str(workdir / "out"))
        .option("checkpointLocation", str(workdir / "checkpoint"))
    )
    query = writer.trigger(availableNow=True).start() if finish else writer.start()
    query.awaitTermination()
    if finish:
        out = spark.read.parquet(str(workdir / "out"))
        report = {
            "rows": out.count(),
            "distinct": out.select("partition", "offset").distinct().count(),
            "values": out.select("value").distinct().count(),
        }
        print("REPORT " + json.dumps(report), flush=True)
    spark.stop()


def _batch_ids(directory: Path) -> set[int]:
    if not directory.exists():
        return set()
    return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}


def _start_driver(bootstrap: str, workdir: Path, finish: bool) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "tests.integration.test_spark_exactly_once",
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


def test_kill_driver_mid_batch_then_restart_writes_every_record_once(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 4, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
        for i in range(RECORDS):
            producer.send(TOPIC, value=b"%d" % i, partition=i % 4)
        producer.flush()
        producer.close()

        workdir = tmp_path / "job"
        driver = _start_driver(broker.bootstrap, workdir, finish=False)
        offsets, commits = workdir / "checkpoint" / "offsets", workdir / "checkpoint" / "commits"
        deadline = time.monotonic() + 180
        killed_in_flight = None
        try:
            while time.monotonic() < deadline and driver.poll() is None:
                planned, done = _batch_ids(offsets), _batch_ids(commits)
                in_flight = planned - done
                if len(done) >= 2 and in_flight:
                    os.killpg(driver.pid, signal.SIGKILL)
                    killed_in_flight = sorted(in_flight)
                    break
                time.sleep(0.02)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        assert killed_in_flight, "the driver was never caught with a batch in flight"
        assert len(_batch_ids(commits)) < RECORDS // PER_BATCH, "killed too late to matter"

        finisher = _start_driver(broker.bootstrap, workdir, finish=True)
        out, _ = finisher.communicate(timeout=300)
        assert finisher.returncode == 0, out
        report = json.loads(
            next(line for line in out.splitlines() if line.startswith("REPORT "))[7:]
        )
        assert report == {"rows": RECORDS, "distinct": RECORDS, "values": RECORDS}
    finally:
        broker.stop()


if __name__ == "__main__":
    run_driver(sys.argv[1], Path(sys.argv[2]), finish="--finish" in sys.argv[3:])
