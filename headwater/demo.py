"""The demo pipeline: page views through Headwater into a Spark streaming job.

Library code; the ``headwater demo`` command around it is ``headwater.cli.demo``.

The whole pipeline in one command, as a user would build it:

1. a broker (the embedded one on ``./headwater-data``, port 9092, or any
   broker given with ``--bootstrap``);
2. a generator producing realistic page views (popular pages, returning
   users, a little lateness) as JSON keyed by user into ``page-views``;
3. a Spark Structured Streaming job (``--master``, ``local[*]`` by default)
   reading that topic through the ``headwater`` source and counting views
   and distinct users per page in event-time windows with a watermark;
   final windows go to parquet (exactly once, through the file sink's
   checkpoint) and running counts to the ``page-view-counts`` topic
   (through the ``headwater`` sink with ``exactlyOnce``: each micro-batch's
   counts are one set of Kafka transactions, committed with the batch, so a
   ``read_committed`` reader sees each update once even across a crash);
4. a status line every few seconds with throughput and the latest results,
   until ``--duration`` runs out or Ctrl-C, then a clean stop of every part.

The broker runs as a subprocess in its own session, exactly as ``headwater
serve`` runs: Ctrl-C then reaches only this process, which stops the
queries before the broker they read from.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headwater.protocol.error_codes import ErrorCode

log = logging.getLogger("headwater.demo")

EVENTS_TOPIC = "page-views"
COUNTS_TOPIC = "page-view-counts"

# -- the event stream ----------------------------------------------------------

PAGES = (
    ["/", "/search", "/cart", "/checkout", "/login", "/account", "/help"]
    + [f"/products/{i}" for i in range(1, 41)]
    + [f"/blog/{slug}" for slug in ("launch", "fetch-sessions", "zero-copy", "retention")]
)
REFERRERS = ["direct", "google", "newsletter", "twitter", "partner"]
DEVICES = ["desktop", "mobile", "tablet"]
COUNTRIES = ["DE", "FR", "GB", "IN", "JP", "US", "BR", "NL"]


@dataclass
class PageViewGenerator:
    """Page views that look like traffic: Zipf-popular pages and users, some late.

    Deterministic for a given seed, so tests can pin what it makes. About 2%
    of events arrive a few seconds late (inside the watermark) and 0.2% very
    late (dropped by it), as real mobile clients do.
    """

    seed: int = 0
    users: int = 5000
    rng: random.Random = field(init=False)
    _page_weights: list[float] = field(init=False)
    _user_weights: list[float] = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._page_weights = list(
            itertools.accumulate(1 / (rank + 1) ** 1.1 for rank in range(len(PAGES)))
        )
        self._user_weights = list(
            itertools.accumulate(1 / (rank + 1) ** 0.8 for rank in range(self.users))
        )

    def event(self, now_ms: int) -> tuple[bytes, bytes, int]:
        """(key, JSON value, event time in ms) of one page view happening at ``now_ms``."""
        rng = self.rng
        # Cumulative weights: choices() then bisects instead of summing per call.
        user_rank = rng.choices(range(self.users), cum_weights=self._user_weights)[0]
        user = f"u{user_rank:05d}"
        lateness = 0
        roll = rng.random()
        if roll < 0.002:
            lateness = rng.randint(30_000, 60_000)
        elif roll < 0.02:
            lateness = rng.randint(500, 3_000)
        ts = now_ms - lateness
        value = {
            "user": user,
            "page": rng.choices(PAGES, cum_weights=self._page_weights)[0],
            "referrer": rng.choice(REFERRERS),
            "device": rng.choice(DEVICES),
            "country": rng.choice(COUNTRIES),
            "ts": ts,
        }
        return user.encode(), json.dumps(value, separators=(",", ":")).encode(), ts


class EventProducer:
    """A background thread producing ``rate`` events per second, paced in 20 ticks."""

    def __init__(self, bootstrap: str, rate: int, seed: int = 0) -> None:
        from headwater.client.producer import Producer

        self.rate = rate
        self.generator = PageViewGenerator(seed)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "headwater-demo",
                "compression.type": "lz4",
                "linger.ms": "20",
                "acks": "1",
            }
        )
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-events", daemon=True)

    def start(self) -> EventProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        tick = 0.05
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                due = int((time.monotonic() - started) * self.rate)
                now_ms = int(time.time() * 1000)
                for _ in range(due - self.sent):
                    key, value, ts = self.generator.event(now_ms)
                    self.producer.send(EVENTS_TOPIC, value, key=key, timestamp_ms=ts)
                    self.sent += 1
                self._stop.wait(tick)
            self.producer.flush()
        except BaseException as e:  # reported by the status loop
            self.error = e

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        with contextlib.suppress(Exception):
            self.producer.close()


# -- the embedded broker -------------------------------------------------------


class EmbeddedBroker:
    """``headwater serve`` as a child process; stopped with SIGTERM (its clean path)."""

    def __init__(self, data_dir: Path, listen: str = "127.0.0.1:9092") -> None:
        self.data_dir = data_dir
        self.listen = listen
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        cmd = [sys.executable, "-m", "headwater.cli", "serve", "--listen", self.listen]
        cmd += ["--data-dir", str(self.data_dir)]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # Ctrl-C is ours to handle, in order
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        ready = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if line.startswith("listening on "):
                    ready.set()

        threading.Thread(target=pump, name="demo-broker-log", daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self.lines[-20:])
                raise RuntimeError(
                    f"the embedded broker did not start on {self.listen} "
                    f"(is another broker using the port? then pass --bootstrap {self.listen}):\n"
                    f"{tail}"
                )
        return self

    def stop(self, timeout: float = 30.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the Spark job -------------------------------------------------------------


@dataclass(frozen=True)
class DemoSettings:
    bootstrap: str
    master: str
    output: Path
    partitions: int = 12
    window_s: int = 10
    lateness_s: int = 5
    trigger_s: float = 2.0
    max_offsets_per_trigger: int = 200_000


def _package_zip(workdir: Path) -> str:
    """The ``headwater`` package as a zip for ``addPyFile`` (remote executors import it)."""
    package = Path(__file__).resolve().parent
    base = workdir / "headwater-pyfiles"
    return shutil.make_archive(str(base), "zip", root_dir=package.parent, base_dir=package.name)


_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def build_spark(master: str, workdir: Path) -> Any:
    """A SparkSession on ``master`` with the ``headwater`` source registered.

    Spark's own logging is cut to errors from the JVM's first line (a
    log4j2 file handed to the driver), so the demo's status lines stay
    readable.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    from pyspark.sql import SparkSession

    import headwater.spark

    log4j = workdir / "log4j2.properties"
    log4j.write_text(_QUIET_LOG4J)
    local_cores = os.cpu_count() or 2
    spark = (
        SparkSession.builder.master(master)
        .appName("headwater-demo")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
        .config("spark.sql.shuffle.partitions", str(local_cores if "local" in master else 8))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if not master.startswith("local"):
        spark.sparkContext.addPyFile(_package_zip(workdir))
    headwater.spark.register(spark)
    return spark


def ensure_topics(bootstrap: str, partitions: int) -> None:
    from headwater.client.admin import AdminClient
    from headwater.client.errors import KafkaError

    admin = AdminClient(bootstrap, client_id="headwater-demo")
    try:
        for name, count in ((EVENTS_TOPIC, partitions), (COUNTS_TOPIC, 4)):
            try:
                admin.create_topics([(name, count, {})])
            except KafkaError as e:
                if e.code != ErrorCode.topic_already_exists:
                    raise
    finally:
        admin.close()


class LiveCounts:
    """The running counts of the open windows, as the topic query last updated them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[Any, str], Any] = {}

    def update(self, rows: list[Any]) -> None:
        with self._lock:
            for r in rows:
                self._rows[(r.window_start, r.page)] = r
            # Keep the newest few windows only.
            keep = sorted({w for w, _ in self._rows})[-3:]
            self._rows = {k: v for k, v in self._rows.items() if k[0] in keep}

    def summary(self, top: int = 5) -> str | None:
        with self._lock:
            if not self._rows:
                return None
            newest = max(w for w, _ in self._rows)
            rows = sorted(
                (r for (w, _), r in self._rows.items() if w == newest),
                key=lambda r: (-r.views, r.page),
            )[:top]
        pages = ", ".join(f"{r.page} {r.views:,} ({r.users:,} users)" for r in rows)
        return f"window {newest:%H:%M:%S} UTC: {pages}"


def start_queries(spark: Any, s: DemoSettings, live: LiveCounts) -> list[Any]:
    """The windowed aggregation, written to parquet (final) and to a topic (running)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    event_schema = StructType(
        [
            StructField(name, StringType())
            for name in ("user", "page", "referrer", "device", "country")
        ]
        + [StructField("ts", LongType())]
    )
    events = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", s.bootstrap)
        .option("subscribe", EVENTS_TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(s.max_offsets_per_trigger))
        # A fresh ./headwater-data under an old --output checkpoint is a demo
        # restart, not an incident: warn and go on.
        .option("failOnDataLoss", "false")
        .load()
        .select(F.from_json(F.col("value").cast("string"), event_schema).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    counts = (
        events.withWatermark("event_time", f"{s.lateness_s} seconds")
        .groupBy(F.window("event_time", f"{s.window_s} seconds"), "page")
        .agg(F.count("*").alias("views"), F.approx_count_distinct("user").alias("users"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "page",
            "views",
            "users",
        )
    )
    trigger = f"{s.trigger_s} seconds"
    to_parquet = (
        counts.writeStream.queryName("page_view_counts_parquet")
        .format("parquet")
        .outputMode("append")
        .option("path", str(s.output / "page_view_counts"))
        .option("checkpointLocation", str(s.output / "checkpoints" / "parquet"))
        .trigger(processingTime=trigger)
        .start()
    )

    def publish(batch: Any, batch_id: int) -> None:
        # Python sinks take appends only, so running (update-mode) counts go
        # through foreachBatch and the batch sink. exactlyOnce makes the write
        # transactional: Spark's local properties give the sink this query's
        # id and batch id, so a replayed batch whose transactions committed is
        # skipped. The same rows feed the status display.
        batch.persist()
        try:
            (
                batch.select(
                    F.col("page").alias("key"),
                    F.to_json(F.struct(*batch.columns)).alias("value"),
                )
                .write.format("headwater")
                .mode("append")
                .option("kafka.bootstrap.servers", s.bootstrap)
                .option("topic", COUNTS_TOPIC)
                .option("exactlyOnce", "true")
                .save()
            )
            live.update(batch.collect())
        finally:
            batch.unpersist()

    to_topic = (
        counts.writeStream.queryName("page_view_counts_topic")
        .outputMode("update")
        .foreachBatch(publish)
        .option("checkpointLocation", str(s.output / "checkpoints" / "topic"))
        .trigger(processingTime=trigger)
        .start()
    )
    return [to_parquet, to_topic]


# -- status --------------------------------------------------------------------


def progress_line(name: str, progress: dict[str, Any] | None) -> str:
    if not progress:
        return f"{name}: starting"
    return (
        f"{name}: batch {progress.get('batchId', '-')}, "
        f"{progress.get('numInputRows', 0):,} rows, "
        f"{progress.get('processedRowsPerSecond', 0.0):,.0f} rows/s"
    )


def parquet_rows(spark: Any, output: Path) -> int:
    """Rows of final windows committed to parquet so far (read through the sink's log)."""
    path = output / "page_view_counts"
    if not (path / "_spark_metadata").exists():
        return 0
    return int(spark.read.parquet(str(path)).count())


def committed_records(bootstrap: str, topic: str = COUNTS_TOPIC, timeout_s: float = 15.0) -> int:
    """Records of ``topic`` a ``read_committed`` reader sees (aborted ones and markers skipped)."""
    from headwater.client.consumer import Consumer
    from headwater.client.types import TopicPartition

    with Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        client_id="headwater-demo",
    ) as consumer:
        partitions = consumer.partitions_for(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return 0
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)  # last stable offsets
        count = 0
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(
            consumer.position(tp) < end for tp, end in ends.items()
        ):
            count += len(consumer.poll(0.5))
        return count


#: How long the queries may take, once the generator stops, to process what it wrote.
DRAIN_TIMEOUT_S = 60.0


def drain_queries(queries: list[Any], timeout: float = DRAIN_TIMEOUT_S) -> bool:
    """Let every query process what the generator wrote before it stopped: True if all did.

    A short run on a busy machine may stop after a batch or two, before the
    watermark has passed any window, and leave no final window in parquet.
    ``processAllAvailable`` runs the batches still due, and the no-data batch
    after the last one emits every window the watermark has passed. It has no
    timeout of its own, so each call runs in a thread that is abandoned after
    ``timeout`` (stopping the query afterwards ends the call)."""

    def process(query: Any) -> None:
        with contextlib.suppress(Exception):
            query.processAllAvailable()

    threads = [
        threading.Thread(target=process, args=(q,), name=f"demo-drain-{q.name}", daemon=True)
        for q in queries
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)


def stop_between_batches(query: Any, timeout: float = 30.0) -> None:
    """Stop ``query`` while no batch runs: interrupting one mid-way is safe but noisy."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(Exception):
        while (
            query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline
        ):
            time.sleep(0.05)
    with contextlib.suppress(Exception):
        query.stop()


def _check_queries(queries: list[Any]) -> None:
    for q in queries:
        exc = q.exception()
        if exc is not None:
            raise RuntimeError(f"query {q.name} failed: {exc}")


class StopRequest:
    """Ctrl-C as a request: the first one stops the demo between batches.

    pyspark's own SIGINT handler cancels every running Spark job at once,
    which fails the queries mid-batch with a wall of errors; this one only
    sets a flag that the status loop checks. A second Ctrl-C interrupts for
    real, for the impatient.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            "\nstopping: the queries finish what was produced (Ctrl-C again to abort)...",
            flush=True,
        )


@contextlib.contextmanager
def phase(text: str) -> Iterator[None]:
    """Slow work (Spark takes ~30 s to start or stop) with a ticking status line on a
    terminal, and one line with its duration either way."""
    from tqdm import tqdm

    started = time.monotonic()
    bar = tqdm(desc=text, bar_format="{desc}... {elapsed}", disable=None, file=sys.stderr)
    done = threading.Event()

    def tick() -> None:
        while not done.wait(0.5):
            bar.refresh()

    ticker = threading.Thread(target=tick, name="demo-phase", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        bar.close()
        print(f"{text}: {time.monotonic() - started:.0f} s", flush=True)


def run_demo(
    s: DemoSettings, events_per_second: int, duration: float, status_every: float = 5.0
) -> int:
    """Run the generator and the queries until ``duration`` (0: until Ctrl-C)."""
    s.output.mkdir(parents=True, exist_ok=True)
    ensure_topics(s.bootstrap, s.partitions)
    with tempfile.TemporaryDirectory(prefix="headwater-demo-") as workdir:
        with phase(f"starting Spark ({s.master})"):
            spark = build_spark(s.master, Path(workdir))
        live = LiveCounts()
        queries: list[Any] = []
        producer: EventProducer | None = None
        final_rows = 0
        clean = False
        with StopRequest() as stop:
            try:
                producer = EventProducer(s.bootstrap, events_per_second).start()
                queries = start_queries(spark, s, live)
                print(
                    f"demo running: {events_per_second:,} page views/s into '{EVENTS_TOPIC}' "
                    f"on {s.bootstrap}, Spark on {s.master}; parquet in {s.output}; "
                    + ("Ctrl-C to stop" if not duration else f"stopping after {duration:g} s"),
                    flush=True,
                )
                started = time.monotonic()
                next_status = started + status_every
                while not stop.requested and (
                    not duration or time.monotonic() - started < duration
                ):
                    time.sleep(0.2)
                    _check_queries(queries)
                    if producer.error is not None:
                        raise RuntimeError(f"event producer failed: {producer.error}")
                    if time.monotonic() >= next_status:
                        next_status += status_every
                        print(
                            _status(time.monotonic() - started, producer, queries, live), flush=True
                        )
                clean = True
            finally:
                if producer is not None:
                    producer.stop()
                if clean:
                    with phase("processing what was produced"):
                        if not drain_queries(queries):
                            print(
                                f"the queries had not caught up after {DRAIN_TIMEOUT_S:g} s; "
                                "stopping anyway"
                            )
                with phase("stopping the queries and Spark"):
                    for q in queries:
                        stop_between_batches(q)
                    with contextlib.suppress(Exception):
                        final_rows = parquet_rows(spark, s.output)
                    spark.stop()
    sent = producer.sent if producer is not None else 0
    topic_rows = "?"
    with contextlib.suppress(Exception):
        topic_rows = f"{committed_records(s.bootstrap):,}"
    print(
        f"stopped: {sent:,} page views produced; {final_rows:,} window counts in "
        f"{s.output / 'page_view_counts'} (parquet), {topic_rows} committed running-count "
        f"updates in topic '{COUNTS_TOPIC}' (read_committed)",
        flush=True,
    )
    return 0


def _status(elapsed: float, producer: EventProducer, queries: list[Any], live: LiveCounts) -> str:
    parts = [f"[{elapsed:5.0f}s] produced {producer.sent:,}"]
    parts += [progress_line(q.name, q.lastProgress) for q in queries]
    line = " | ".join(parts)
    summary = live.summary()
    return f"{line}\n  live {summary}" if summary else line
