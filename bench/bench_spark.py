"""Headwater into Spark, side by side with librdkafka and Headwater's own client, one run.

One Headwater broker process (``headwater serve``) on a fresh data dir;
confluent-kafka's producer fills a topic of ``--partitions`` partitions with
``--records`` records of ``--value-bytes`` (short keys, ``--codec``). Then,
for ``--rounds`` rounds, each reader reads the whole topic once, in turn:

* **confluent-kafka**: one ``confluent_kafka.Consumer`` assigned every
  partition, ``consume(10000)`` touching every value, with
  ``fetch.queue.backoff.ms=0`` (librdkafka's default of 1000 ms stalls it
  whenever its local queue fills: /work/shared/notes/real-clients.md);
* **headwater client**: ``headwater.client.Consumer.poll`` (one
  ``ConsumerRecord`` per record) touching every value;
* **spark batch**: ``spark.read.format("headwater")`` into ``noop``;
* **spark availableNow**: ``spark.readStream.format("headwater")`` with
  ``trigger(availableNow=True)`` into ``noop`` (wall time from ``start()``,
  a fresh checkpoint each time).

Spark runs on ``--master`` (``local[2]`` by default) in one session that a
first, unmeasured read of each kind has warmed. Each figure is the median
over the rounds; the broker's CPU seconds per reader come from
``/proc/PID/stat``.

**Fixed cost** of a query: the same two Spark queries over a topic holding
one record (one partition), against Spark queries of the same shape on
Spark's own sources: ``spark.range(1)`` for the batch read and the
``rate-micro-batch`` source (one row, ``availableNow``) for the stream.
The difference is what the headwater source adds per query.

**Stream planning**: what Spark's stream-reader process runs per trigger
(``latestOffset`` then ``partitions``, ``maxOffsetsPerTrigger`` 1,000),
called in this process against the same broker: milliseconds per micro-batch.

Prints a table and writes bench/results/spark.json.
Run: ``.venv/bin/python bench/bench_spark.py [--records N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from brokers import Headwater, ScratchDir, machine_info

TOPIC = "bench-spark"
TINY_TOPIC = "bench-spark-one"


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from headwater.client.admin import AdminClient

    with AdminClient(bootstrap) as admin:
        admin.create_topics([(name, partitions, {})])


def produce(bootstrap: str, topic: str, n: int, size: int, codec: str, parts: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "compression.type": codec,
            "acks": 1,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"v" * size
    started = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, key=b"%d" % i, partition=i % parts)
                break
            except BufferError:
                producer.poll(0.01)
    left = producer.flush(120)
    assert left == 0, f"{left} records not delivered"
    return time.perf_counter() - started


def confluent_read(bootstrap: str, n: int, parts: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.time_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 0,
        }
    )
    started = time.perf_counter()
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(parts)])
    count = size = 0
    while count < n:
        # consume() blocks until it has the whole count (or times out): never
        # ask for more than is left, or the last call waits out its timeout.
        for msg in consumer.consume(min(n - count, 10_000), 1.0):
            if msg.error():
                continue
            size += len(msg.value())
            count += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def headwater_read(bootstrap: str, n: int, parts: int) -> float:
    from headwater.client.consumer import Consumer
    from headwater.client.types import TopicPartition

    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        tps = [TopicPartition(TOPIC, p) for p in range(parts)]
        started = time.perf_counter()
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        count = size = 0
        while count < n:
            for rec in consumer.poll(1.0):
                size += len(rec.value or b"")
                count += 1
        return time.perf_counter() - started


def one_row_source() -> type:
    """The smallest Python streaming source (one row, then nothing): the floor under
    any Python data source's per-query cost (Spark starts a Python process for
    the stream reader of every query). Defined in a function so that
    cloudpickle ships it by value to Spark's Python processes."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class OneRowReader(DataSourceStreamReader):  # type: ignore[misc]
        def initialOffset(self) -> dict[str, int]:
            return {"offset": 0}

        def latestOffset(self) -> dict[str, int]:
            return {"offset": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition(end["offset"] - start["offset"])]

        def read(self, partition: InputPartition) -> Any:
            yield pa.RecordBatch.from_pydict({"id": list(range(partition.value))})

    class OneRowSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "bench_one_row"

        def schema(self) -> str:
            return "id long"

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return OneRowReader()

    return OneRowSource


def stream_planning_ms(bootstrap: str, batches: int = 100) -> float:
    """Driver-side cost of one micro-batch's planning, outside Spark, in milliseconds.

    What Spark's stream-reader process runs per trigger (``latestOffset``
    under ``maxOffsetsPerTrigger``, then ``partitions``), 1,000 offsets per
    micro-batch; the best of three passes of ``batches`` micro-batches.
    """
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from headwater.spark.source import HeadwaterDataSource

    source = HeadwaterDataSource(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": TOPIC,
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "1000",
        }
    )
    reader = source.streamReader(source.schema())
    first = reader.initialOffset()
    passes = []
    for _ in range(3):
        start = first
        started = time.perf_counter()
        for _ in range(batches):
            end = reader.latestOffset(start, ReadMaxRows(1000))
            reader.partitions(start, end)
            start = end
        passes.append((time.perf_counter() - started) / batches * 1000)
    return min(passes)


RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
# What the stream-reader process imports before Headwater's reader can plan.
HEADWATER_PLANNING = "headwater.spark.source, headwater.spark.reader, headwater.client.consumer"
NO_HYPOTHESIS = "import sys; sys.modules['hypothesis'] = None; "


def stream_runner_imports(rounds: int = 5) -> dict[str, float]:
    """Wall seconds (median) of the imports in the Python process Spark starts per query.

    For every streaming query over a Python source, Spark execs a fresh
    ``python -m pyspark.sql.streaming.python_streaming_source_runner`` with
    ``$SPARK_HOME/python/lib/pyspark.zip`` first on ``PYTHONPATH``. The zip
    holds no bytecode, so that process compiles pyspark's modules on every
    start; the second figure imports the same modules from site-packages.
    Then Headwater's planning imports on top, with and without ``hypothesis``
    (a test dependency: ``kio`` imports it when it is installed).
    """
    import subprocess

    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    spark_path = os.pathsep.join(str(p) for p in sorted(lib.glob("*.zip"), reverse=True))
    cases = {
        "runner, pyspark from pyspark.zip (as Spark starts it)": (spark_path, f"import {RUNNER}"),
        "runner, pyspark from site-packages": ("", f"import {RUNNER}"),
        "runner from zip + headwater planning": (
            spark_path,
            f"import {RUNNER}; import {HEADWATER_PLANNING}",
        ),
        "runner from zip + headwater planning, no hypothesis": (
            spark_path,
            f"{NO_HYPOTHESIS}import {RUNNER}; import {HEADWATER_PLANNING}",
        ),
    }
    out: dict[str, float] = {}
    for name, (path, code) in cases.items():
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if path:
            env["PYTHONPATH"] = path
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # as Spark's Python workers run
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=env, check=True)
            times.append(time.perf_counter() - started)
        out[name] = round(statistics.median(times), 3)
    return out


def hide_hypothesis() -> None:
    """Make ``import hypothesis`` fail in this process and every one it starts.

    ``kio`` imports hypothesis whenever it is installed, and the project's venv
    has it for the tests; a user's install of Headwater does not. A package of
    that name that raises ImportError, first on ``PYTHONPATH`` (which Spark
    passes on to its Python processes), measures the install without it.
    """
    shadow = Path(tempfile.mkdtemp(prefix="bench-no-hypothesis-"))
    (shadow / "hypothesis").mkdir()
    (shadow / "hypothesis" / "__init__.py").write_text(
        'raise ImportError("hidden by bench_spark --without-hypothesis")\n'
    )
    paths = [str(shadow), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    sys.modules.pop("hypothesis", None)


class SparkRunner:
    def __init__(self, master: str) -> None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        import headwater.spark

        self.spark = (
            SparkSession.builder.master(master)
            .appName("bench-spark")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        headwater.spark.register(self.spark)
        self.spark.dataSource.register(one_row_source())

    def batch_read(self, bootstrap: str, topic: str) -> float:
        started = time.perf_counter()
        (
            self.spark.read.format("headwater")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )
        return time.perf_counter() - started

    def stream_read(self, bootstrap: str, topic: str, n: int) -> float:
        reader = (
            self.spark.readStream.format("headwater")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
        )
        return self._available_now(reader, n)

    def range_read(self) -> float:
        started = time.perf_counter()
        self.spark.range(1, numPartitions=1).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started

    def rate_stream(self) -> float:
        reader = (
            self.spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", 1)
            .option("numPartitions", 1)
        )
        return self._available_now(reader, 1)

    def python_stream(self) -> float:
        return self._available_now(self.spark.readStream.format("bench_one_row"), 1)

    def _available_now(self, reader: Any, n: int) -> float:
        with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
            started = time.perf_counter()
            query = (
                reader.load()
                .writeStream.format("noop")
                .option("checkpointLocation", tmp)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            elapsed = time.perf_counter() - started
            rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
            assert rows == n, (rows, n)
            return elapsed

    def stop(self) -> None:
        self.spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--codec", default="lz4")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--without-hypothesis",
        action="store_true",
        help="hide the test-only hypothesis from every process (as in an install of "
        "Headwater alone: kio imports it whenever it is installed)",
    )
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "spark.json"))
    args = parser.parse_args()
    if args.without_hypothesis:
        hide_hypothesis()
    n = args.records - args.records % args.partitions
    parts = args.partitions

    from headwater.records.columnar import warm_up

    warm_up()  # numba's cache load, once, outside every figure
    with ScratchDir("bench-spark-data-") as data, Headwater(data) as broker:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, TOPIC, parts)
        produce_s = produce(bootstrap, TOPIC, n, args.value_bytes, args.codec, parts)
        create_topic(bootstrap, TINY_TOPIC, 1)
        produce(bootstrap, TINY_TOPIC, 1, args.value_bytes, "none", 1)
        planning_ms = stream_planning_ms(bootstrap)
        runner_imports = stream_runner_imports()
        spark = SparkRunner(args.master)
        try:
            cold = {
                "batch_1_record_s": round(spark.batch_read(bootstrap, TINY_TOPIC), 3),
                "stream_1_record_s": round(spark.stream_read(bootstrap, TINY_TOPIC, 1), 3),
            }
            spark.batch_read(bootstrap, TOPIC)
            spark.stream_read(bootstrap, TOPIC, n)
            spark.range_read()
            spark.rate_stream()
            spark.python_stream()
            readers: dict[str, Callable[[], float]] = {
                "confluent-kafka": lambda: confluent_read(bootstrap, n, parts),
                "headwater client": lambda: headwater_read(bootstrap, n, parts),
                "spark batch": lambda: spark.batch_read(bootstrap, TOPIC),
                "spark availableNow": lambda: spark.stream_read(bootstrap, TOPIC, n),
            }
            fixed: dict[str, Callable[[], float]] = {
                "headwater batch, 1 record": lambda: spark.batch_read(bootstrap, TINY_TOPIC),
                "spark range(1)": spark.range_read,
                "headwater availableNow, 1 record": lambda: spark.stream_read(
                    bootstrap, TINY_TOPIC, 1
                ),
                "rate-micro-batch availableNow, 1 row": spark.rate_stream,
                "python source availableNow, 1 row": spark.python_stream,
            }
            times: dict[str, list[float]] = {k: [] for k in (*readers, *fixed)}
            broker_cpu: dict[str, list[float]] = {k: [] for k in readers}
            for _ in range(args.rounds):
                for name, run in readers.items():
                    cpu = broker.cpu_seconds()
                    times[name].append(run())
                    broker_cpu[name].append(broker.cpu_seconds() - cpu)
                for name, run in fixed.items():
                    times[name].append(run())
        finally:
            spark.stop()

    med = {k: statistics.median(v) for k, v in times.items()}
    base = n / med["confluent-kafka"]
    batch = n / med["spark batch"]
    results: dict[str, Any] = {
        "machine": machine_info(),
        "records": n,
        "partitions": parts,
        "value_bytes": args.value_bytes,
        "codec": args.codec,
        "master": args.master,
        "rounds": args.rounds,
        "produce_s": round(produce_s, 3),
        "stream_planning_ms_per_micro_batch": round(planning_ms, 2),
        "readers": {
            name: {
                "seconds": round(med[name], 3),
                "records_per_s": round(n / med[name]),
                "x_confluent": round(n / med[name] / base, 2),
                "x_spark_batch": round(n / med[name] / batch, 2),
                "broker_cpu_s": round(statistics.median(broker_cpu[name]), 2),
                "all_seconds": [round(t, 3) for t in times[name]],
            }
            for name in readers
        },
        "fixed_cost": {
            **{
                name: {
                    "seconds": round(med[name], 3),
                    "all_seconds": [round(t, 3) for t in times[name]],
                }
                for name in fixed
            },
            "batch_beyond_spark_s": round(
                med["headwater batch, 1 record"] - med["spark range(1)"], 3
            ),
            "stream_beyond_spark_s": round(
                med["headwater availableNow, 1 record"]
                - med["rate-micro-batch availableNow, 1 row"],
                3,
            ),
            "stream_beyond_python_source_s": round(
                med["headwater availableNow, 1 record"] - med["python source availableNow, 1 row"],
                3,
            ),
            "first_query_of_session": cold,
        },
        "stream_runner_imports_s": runner_imports,
    }
    results["load_average_1m"] = round(os.getloadavg()[0], 2)
    results["without_hypothesis"] = args.without_hypothesis
    print(
        f"{n:,} records x {args.value_bytes} B ({args.codec}) in {parts} partitions, "
        f"Spark {args.master}, median of {args.rounds} rounds"
    )
    print(
        f"{'reader':<22}{'seconds':>9}{'records/s':>12}{'x confluent':>13}{'x batch':>9}"
        f"{'broker CPU s':>14}"
    )
    for name, r in results["readers"].items():
        print(
            f"{name:<22}{r['seconds']:>9.3f}{r['records_per_s']:>12,}{r['x_confluent']:>13.2f}"
            f"{r['x_spark_batch']:>9.2f}{r['broker_cpu_s']:>14.2f}"
        )
    print("fixed cost of a query (seconds, median):")
    for name in fixed:
        print(f"  {name:<40}{med[name]:>7.3f}")
    fc = results["fixed_cost"]
    print(f"  headwater batch beyond Spark's own:      {fc['batch_beyond_spark_s']:>7.3f}")
    print(f"  headwater availableNow beyond Spark's own:{fc['stream_beyond_spark_s']:>6.3f}")
    print(
        "  headwater availableNow beyond a one-row Python source:"
        f"{fc['stream_beyond_python_source_s']:>6.3f}"
    )
    print(f"  first queries of the session (1 record): {cold}")
    print(f"stream planning per micro-batch, outside Spark: {planning_ms:.2f} ms")
    print("imports of the stream-reader process Spark starts per query (s, median of 5):")
    for name, seconds in runner_imports.items():
        print(f"  {name:<56}{seconds:>7.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
