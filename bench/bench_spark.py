"""Headwater into Spark: a streaming query (noop sink) vs the raw client, same data.

One run starts a broker (``headwater serve`` as a child process) on a fresh
data directory, produces ``--records`` records of ``--value-bytes`` into a
topic of ``--partitions`` partitions, then reads them all twice:

* **client**: one ``headwater.client.Consumer`` assigned every partition,
  polling until each reaches its end offset (records decoded, nothing else);
* **spark**: ``spark.readStream.format("headwater")`` with
  ``trigger(availableNow=True)`` into the ``noop`` sink on ``--master``
  (``local[*]`` by default). Spark pulls every row through Arrow into the
  JVM, so this measures the source end to end. Figures are given both for
  the query's wall time (from ``start()``: planning, Python worker start-up
  and all batches) and for the sum of its micro-batches' execution time.

Prints a table and writes bench/results/spark.json.
Run: ``.venv/bin/python bench/bench_spark.py [--records N] [--partitions P]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path

TOPIC = "bench-spark"


def produce(bootstrap: str, records: int, partitions: int, value_bytes: int) -> float:
    from headwater.client.admin import AdminClient
    from headwater.client.producer import Producer

    admin = AdminClient(bootstrap)
    admin.create_topics([(TOPIC, partitions, {})])
    admin.close()
    value = b"v" * value_bytes
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": "20",
            "batch.size": "262144",
            "compression.type": "lz4",
            "acks": "1",
        }
    )
    started = time.perf_counter()
    for i in range(records):
        producer.send(TOPIC, value, key=b"%d" % i, partition=i % partitions)
    producer.flush()
    elapsed = time.perf_counter() - started
    producer.close()
    return elapsed


def read_with_client(bootstrap: str, partitions: int) -> tuple[int, int, float]:
    """(records, payload bytes, seconds) for reading the topic once, start to end."""
    from headwater.client.consumer import Consumer
    from headwater.client.types import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    ends = consumer.end_offsets(tps)
    started = time.perf_counter()
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    left = {tp.partition: ends[tp] for tp in tps if ends[tp] > 0}
    count = size = 0
    while left:
        for rec in consumer.poll(1.0):
            count += 1
            size += len(rec.value or b"") + len(rec.key or b"")
            if rec.offset + 1 >= left.get(rec.partition, 0):
                left.pop(rec.partition, None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return count, size, elapsed


def read_with_spark(
    bootstrap: str, master: str, max_offsets: int | None, runs: int
) -> list[dict[str, float]]:
    """One availableNow query per run over the whole topic, in one SparkSession.

    The first run pays for JVM warm-up and Python worker start-up; later
    runs show the steady state.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import headwater.spark

    spark = (
        SparkSession.builder.master(master)
        .appName("bench-spark")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    headwater.spark.register(spark)
    out = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
            reader = (
                spark.readStream.format("headwater")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
            )
            if max_offsets:
                reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
            started = time.perf_counter()
            query = (
                reader.load()
                .writeStream.format("noop")
                .option("checkpointLocation", tmp)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            wall = time.perf_counter() - started
            progress = [p for p in query.recentProgress if p["numInputRows"]]
        out.append(
            {
                "rows": sum(int(p["numInputRows"]) for p in progress),
                "wall_s": wall,
                "batches_s": sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000,
                "batches": len(progress),
            }
        )
    spark.stop()
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _figures(records: int, mb: float, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds),
        "mb_per_s": round(mb / seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--spark-runs", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "spark.json"))
    args = parser.parse_args()

    from headwater.demo import EmbeddedBroker

    with tempfile.TemporaryDirectory(prefix="bench-spark-data-") as data:
        broker = EmbeddedBroker(Path(data), listen=f"127.0.0.1:{free_port()}").start()
        try:
            produce_s = produce(broker.listen, args.records, args.partitions, args.value_bytes)
            count, payload, client_s = read_with_client(broker.listen, args.partitions)
            assert count == args.records, (count, args.records)
            runs = read_with_spark(
                broker.listen, args.master, args.max_offsets_per_trigger, args.spark_runs
            )
            assert all(r["rows"] == args.records for r in runs), runs
        finally:
            broker.stop()

    mb = payload / 1e6
    rows: list[tuple[str, dict[str, float]]] = [("headwater client", _figures(count, mb, client_s))]
    for i, run in enumerate(runs):
        label = "cold" if i == 0 else "warm"
        rows.append((f"spark noop, {label} (wall)", _figures(args.records, mb, run["wall_s"])))
        rows.append(
            (
                f"spark noop, {label} ({int(run['batches'])} batches)",
                _figures(args.records, mb, run["batches_s"]),
            )
        )
    results = {
        "records": args.records,
        "partitions": args.partitions,
        "value_bytes": args.value_bytes,
        "payload_mb": round(mb, 2),
        "master": args.master,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "produce": _figures(args.records, mb, produce_s),
        "readers": {name: figures for name, figures in rows},
    }
    print(
        f"{args.records:,} records x {args.value_bytes} B in {args.partitions} partitions "
        f"({mb:.1f} MB of keys+values), Spark {args.master} on {os.cpu_count()} CPUs"
    )
    print(f"{'reader':<34}{'seconds':>9}{'records/s':>12}{'MB/s':>8}")
    for name, r in rows:
        print(f"{name:<34}{r['seconds']:>9.2f}{r['records_per_s']:>12,}{r['mb_per_s']:>8.1f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
