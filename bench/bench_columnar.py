"""The columnar fast path side by side with confluent-kafka (librdkafka), same data, one run.

One Headwater broker process (``headwater serve``) on a fresh data dir.
For every record size (``--sizes``) and codec (``--codecs``) a topic of
``--partitions`` partitions is filled by confluent-kafka's producer, then
read start to end by:

* **confluent poll**: one ``confluent_kafka.Consumer`` (one librdkafka
  thread), ``consume(10000)``, touching every message's value;
* **headwater poll**: ``Consumer.poll`` (a ``ConsumerRecord`` per record),
  touching every value;
* **headwater poll_arrow**: ``Consumer.poll_arrow`` (one Arrow table per poll);
* **spark batch (warm)**: ``spark.read.format("headwater")`` into ``noop``
  on ``--master`` (default ``local[2]``), the second of two runs;
* **spark stream**: ``readStream`` with ``trigger(availableNow=True)`` into ``noop``.

Writers, into fresh topics of the same shape:

* **confluent produce**: ``confluent_kafka.Producer`` (linger 5 ms, 1 MB batches),
  ``produce`` per record then ``flush`` (this also fills the read topic);
* **headwater send_arrow**: ``Producer.send_arrow`` per partition, 64k-row columns;
* **spark sink (warm)**: ``spark.range`` rows -> ``write.format("headwater")``.

Cold start: a fresh Python process decodes one batch, once with numba's
cache emptied (JIT compile) and once with it warm; and the first Spark batch
read of a fresh session against the second.

Records per configuration: ``--records``, capped at ``--max-mb`` of values.
Prints a table and writes bench/results/columnar.json.
Run: ``.venv/bin/python bench/bench_columnar.py [--records N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from brokers import Headwater, ScratchDir, machine_info

ARROW_ROWS = 65_536


def topic_name(kind: str, size: int, codec: str) -> str:
    return f"{kind}-{size}-{codec}"


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from headwater.client.admin import AdminClient

    with AdminClient(bootstrap) as admin:
        admin.create_topics([(name, partitions, {})])


def confluent_produce(
    bootstrap: str, topic: str, n: int, size: int, codec: str, parts: int
) -> float:
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
    producer.flush(120)
    return time.perf_counter() - started


def headwater_send_arrow(
    bootstrap: str, topic: str, n: int, size: int, codec: str, parts: int
) -> float:
    import pyarrow as pa

    from headwater.client.producer import Producer

    per_part = n // parts
    chunk = min(ARROW_ROWS, per_part)
    values = pa.array([b"v" * size] * chunk, pa.binary())
    keys = pa.array([b"%d" % i for i in range(chunk)], pa.binary())
    with Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 512 * 1024,
            "compression.type": codec,
            "acks": "1",
        }
    ) as producer:
        started = time.perf_counter()
        futures = []
        for p in range(parts):
            left = per_part
            while left > 0:
                take = min(chunk, left)
                futures += producer.send_arrow(topic, p, values[:take], keys[:take])
                left -= take
        producer.flush(120)
        for f in futures:
            f.result()
        return time.perf_counter() - started


def confluent_read(bootstrap: str, topic: str, n: int, parts: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.time_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    count = 0
    size = 0
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


def headwater_read(bootstrap: str, topic: str, n: int, parts: int, arrow: bool) -> float:
    from headwater.client.consumer import Consumer
    from headwater.client.types import TopicPartition

    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        tps = [TopicPartition(topic, p) for p in range(parts)]
        started = time.perf_counter()
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        count = 0
        size = 0
        while count < n:
            if arrow:
                count += consumer.poll_arrow(1.0).num_rows
            else:
                for rec in consumer.poll(1.0):
                    size += len(rec.value or b"")
                    count += 1
        return time.perf_counter() - started


class SparkRunner:
    def __init__(self, master: str) -> None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        import headwater.spark

        self.spark = (
            SparkSession.builder.master(master)
            .appName("bench-columnar")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        headwater.spark.register(self.spark)

    def batch_read(self, bootstrap: str, topic: str) -> float:
        started = time.perf_counter()
        (
            self.spark.read.format("headwater")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )
        return time.perf_counter() - started

    def stream_read(self, bootstrap: str, topic: str, n: int) -> float:
        with tempfile.TemporaryDirectory(prefix="bench-columnar-") as tmp:
            started = time.perf_counter()
            query = (
                self.spark.readStream.format("headwater")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .load()
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

    def sink(self, bootstrap: str, topic: str, n: int, size: int, codec: str) -> float:
        df = self.spark.range(n, numPartitions=2).selectExpr(
            "CAST(CAST(id AS STRING) AS BINARY) AS key",
            f"CAST(repeat('v', {size}) AS BINARY) AS value",
        )
        started = time.perf_counter()
        (
            df.write.format("headwater")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.compression.type", codec)
            .option("topic", topic)
            .mode("append")
            .save()
        )
        return time.perf_counter() - started

    def stop(self) -> None:
        self.spark.stop()


COLD_SNIPPET = """
import time
t = time.perf_counter()
from headwater.records.record import RecordBatchBuilder
from headwater.records.columnar import decode_columns
b = RecordBatchBuilder(3)
b.append(1, b"k", b"v" * 100)
decode_columns(b.build(), include_headers=True)
print(time.perf_counter() - t)
"""


def cold_start() -> dict[str, float]:
    """Seconds for a fresh process to import and decode one batch, JIT vs cached."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench-numba-") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for label in ("jit_compile", "cached"):
            result = subprocess.run(
                [sys.executable, "-c", COLD_SNIPPET], env=env, capture_output=True, text=True
            )
            out[label] = round(float(result.stdout.strip().splitlines()[-1]), 3)
    return out


def warm_kernels() -> None:
    """Load the compiled kernels once: their first call is the cold start, measured apart."""
    from headwater.records.columnar import warm_up

    warm_up()


def rate(n: int, seconds: float) -> dict[str, float]:
    return {"seconds": round(seconds, 3), "records_per_s": round(n / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--max-mb", type=int, default=200, help="cap on values per config")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--codecs", default="none,lz4")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "columnar.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    codecs = args.codecs.split(",")
    parts = args.partitions

    results: dict[str, Any] = {
        "machine": machine_info(),
        "partitions": parts,
        "master": args.master,
        "cold_start_s": cold_start(),
        "configs": [],
    }
    print("fresh process, import + first decode:", results["cold_start_s"])
    warm_kernels()
    with ScratchDir("bench-columnar-data-") as data, Headwater(data) as broker:
        bootstrap = broker.bootstrap
        spark = None if args.no_spark else SparkRunner(args.master)
        try:
            if spark is not None:
                warmup = topic_name("warmup", 0, "none")
                create_topic(bootstrap, warmup, parts)
                confluent_produce(bootstrap, warmup, 1000, 10, "none", parts)
                first = spark.batch_read(bootstrap, warmup)
                second = spark.batch_read(bootstrap, warmup)
                results["spark_first_batch_read_s"] = {
                    "cold": round(first, 3),
                    "warm": round(second, 3),
                }
                print("spark 1000-row read, fresh session vs warm:", first, second)
            for size in sizes:
                for codec in codecs:
                    n = min(args.records, args.max_mb * 1_000_000 // size)
                    n -= n % parts
                    row: dict[str, Any] = {"value_bytes": size, "codec": codec, "records": n}
                    src = topic_name("src", size, codec)
                    create_topic(bootstrap, src, parts)
                    row["confluent_produce"] = rate(
                        n, confluent_produce(bootstrap, src, n, size, codec, parts)
                    )
                    arrow_topic = topic_name("arrow", size, codec)
                    create_topic(bootstrap, arrow_topic, parts)
                    row["headwater_send_arrow"] = rate(
                        n, headwater_send_arrow(bootstrap, arrow_topic, n, size, codec, parts)
                    )
                    row["confluent_poll"] = rate(n, confluent_read(bootstrap, src, n, parts))
                    row["headwater_poll"] = rate(
                        n, headwater_read(bootstrap, src, n, parts, arrow=False)
                    )
                    row["headwater_poll_arrow"] = rate(
                        n, headwater_read(bootstrap, src, n, parts, arrow=True)
                    )
                    if spark is not None:
                        spark.batch_read(bootstrap, src)  # warm-up
                        row["spark_batch_warm"] = rate(n, spark.batch_read(bootstrap, src))
                        row["spark_stream"] = rate(n, spark.stream_read(bootstrap, src, n))
                        sink_topic = topic_name("sink", size, codec)
                        create_topic(bootstrap, sink_topic, parts)
                        spark.sink(bootstrap, sink_topic, min(n, 10_000), size, codec)
                        row["spark_sink_warm"] = rate(
                            n, spark.sink(bootstrap, sink_topic, n, size, codec)
                        )
                    base_read = row["confluent_poll"]["records_per_s"]
                    base_write = row["confluent_produce"]["records_per_s"]
                    for key, figures in row.items():
                        if isinstance(figures, dict):
                            base = (
                                base_write
                                if "produce" in key or "sink" in key or ("send" in key)
                                else base_read
                            )
                            figures["x_confluent"] = round(figures["records_per_s"] / base, 2)
                    results["configs"].append(row)
                    print_row(row)
        finally:
            if spark is not None:
                spark.stop()
    results["load_average_1m"] = round(os.getloadavg()[0], 2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


def print_row(row: dict[str, Any]) -> None:
    print(f"\n{row['records']:,} records x {row['value_bytes']} B, {row['codec']}")
    print(f"  {'':<24}{'records/s':>12}{'x confluent':>13}")
    for key, figures in row.items():
        if isinstance(figures, dict):
            print(f"  {key:<24}{figures['records_per_s']:>12,}{figures['x_confluent']:>13.2f}")


if __name__ == "__main__":
    main()
