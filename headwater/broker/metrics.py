"""Broker metrics, exported in Prometheus format on ``--metrics-listen``.

Each broker owns its own ``CollectorRegistry`` so several brokers can live
in one process (the tests do this) without clashing on metric names. Where
Kafka has a metric, it keeps Kafka's name as the Prometheus JMX exporter
spells it (``kafka.network:type=RequestMetrics,name=TotalTimeMs`` becomes
``kafka_network_requestmetrics_totaltimems``), so dashboards written for
Kafka find them; Kafka's ``...PerSec`` meters are counters here (take
``rate()``). Consumer-group lag is ``kafka_consumergroup_lag``, the name
kafka-exporter dashboards use.

The hot path only adds to plain Python numbers (no locks, no label lookups
per request); the collectors turn them into metric families at scrape time.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from headwater.broker.cooperative import sliced
from headwater.cluster.replica_manager import ReplicaManager
from headwater.fetch.session_cache import FetchSessionCache
from headwater.log.log_directory import LogDirStatus

# The *_created series double every counter for no use here.
disable_created_metrics()  # type: ignore[no-untyped-call]

log = logging.getLogger(__name__)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # process_*, python_info and python_gc_*: one process, one broker per
        # process in production; the collectors read /proc and gc at scrape time.
        for default in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(default)
        self.requests = Counter(
            "headwater_requests", "Requests handled, by API", ["api"], registry=r
        )
        self.bytes_in = Counter("headwater_bytes_in", "Record bytes appended", registry=r)
        self.bytes_out = Counter(
            "headwater_bytes_out", "Record bytes sent in fetch responses", registry=r
        )
        self.fetch_request_bytes = Counter(
            "headwater_fetch_request_bytes", "Bytes of fetch requests received", registry=r
        )
        self.fetch_response_bytes = Counter(
            "headwater_fetch_response_bytes", "Bytes of fetch responses sent", registry=r
        )
        self.fetch_partitions_read = Counter(
            "headwater_fetch_partitions_read",
            "Partitions the broker read to answer fetches (O(changed) with sessions)",
            registry=r,
        )
        self.request_times = RequestTimes()
        r.register(self.request_times)
        self.topics = TopicTraffic()
        r.register(self.topics)
        self.event_loop = EventLoopLag()
        r.register(self.event_loop)
        self._http: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def bind_broker_info(self, broker_id: int, rack: str | None) -> None:
        """``headwater_broker_info{broker_id,rack} 1``: Kafka has no metric saying a
        broker's rack, yet dashboards want to group brokers by zone (KIP-36/392);
        join on ``broker_id``. No rack: ``rack=""``."""
        info = Gauge(
            "headwater_broker_info",
            "This broker's id and broker.rack (always 1)",
            ["broker_id", "rack"],
            registry=self.registry,
        )
        info.labels(str(broker_id), rack or "").set(1)

    def bind_session_cache(self, cache: FetchSessionCache) -> None:
        """Export the cache's own counters at scrape time (no double bookkeeping)."""
        self.registry.register(_SessionCacheCollector(cache))

    def bind_replica_manager(self, replicas: ReplicaManager) -> None:
        """Kafka's ReplicaManager gauges: leaders, under-replicated partitions, ISR churn."""
        self.registry.register(_ReplicaManagerCollector(replicas))

    def bind_partition_states(self, states: Callable[[], Iterable[PartitionHealth]]) -> None:
        """UnderReplicated / UnderMinIsr / AtMinIsr / Offline counts from ``states`` at scrape."""
        self.registry.register(_PartitionStateCollector(states))

    def bind_controller(
        self, is_controller: Callable[[], bool], offline: Callable[[], int]
    ) -> None:
        """ActiveControllerCount and OfflinePartitionsCount (see :func:`controller_collector`)."""
        self.registry.register(controller_collector(is_controller, offline))

    def bind_consumer_lag(
        self, loop: asyncio.AbstractEventLoop, committed: CommittedOffsets, end_offset: EndOffset
    ) -> None:
        """``kafka_consumergroup_lag``, computed on the event loop in slices at scrape time."""
        self.registry.register(ConsumerLagCollector(loop, committed, end_offset))

    def bind_log_dirs(self, statuses: Callable[[], Iterable[LogDirStatus]]) -> None:
        """Per log directory: full (below its free-space floor or out of room), usable bytes."""
        self.registry.register(_LogDirCollector(statuses))

    def bind_corrupt_batches(self, ranges: Callable[[], Iterable[tuple[str, int, int]]]) -> None:
        """Per partition: how many batches the scrubber found corrupt (and still held)."""
        self.registry.register(_CorruptCollector(ranges))

    def bind_log_dir_offline(self, statuses: Callable[[], Iterable[LogDirStatus]]) -> None:
        """Per log directory: 1 when an I/O error took it offline (KIP-112)."""
        self.registry.register(_LogDirOfflineCollector(statuses))

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` over HTTP in a daemon thread; returns the bound port."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._http, self._thread = server, thread
        return int(server.server_address[1])

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


class _LogDirCollector(Collector):
    def __init__(self, statuses: Callable[[], Iterable[LogDirStatus]]) -> None:
        self._statuses = statuses

    def collect(self) -> Iterator[Metric]:
        rows = list(self._statuses())
        full = GaugeMetricFamily(
            "headwater_log_dir_full",
            "1 when the log directory is below log.dir.free.space.min.bytes (Produce refused)",
            labels=["log_dir"],
        )
        usable = GaugeMetricFamily(
            "headwater_log_dir_usable_bytes", "Free bytes on the log directory", labels=["log_dir"]
        )
        for row in rows:
            full.add_metric([row.path], 1 if row.full else 0)
            usable.add_metric([row.path], row.usable_bytes)
        yield full
        yield usable


class _CorruptCollector(Collector):
    def __init__(self, ranges: Callable[[], Iterable[tuple[str, int, int]]]) -> None:
        self._ranges = ranges

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "headwater_log_corrupt_batches",
            "Batches of closed segments whose CRC-32C the scrubber found wrong "
            "(readers get CORRUPT_MESSAGE)",
            labels=["topic", "partition"],
        )
        for topic, partition, count in self._ranges():
            family.add_metric([topic, str(partition)], count)
        yield family


class _LogDirOfflineCollector(Collector):
    def __init__(self, statuses: Callable[[], Iterable[LogDirStatus]]) -> None:
        self._statuses = statuses

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "headwater_log_dir_offline",
            "1 when an I/O error took the log directory offline (KIP-112)",
            labels=["log_dir"],
        )
        for row in self._statuses():
            family.add_metric([row.path], 1 if row.offline is not None else 0)
        yield family


class _SessionCacheCollector(Collector):
    """KIP-227's three metrics plus full/incremental counts, read from the cache."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        c = self._cache
        prefix = "kafka_server_fetchsessioncache_"
        yield GaugeMetricFamily(
            prefix + "numincrementalfetchsessions",
            "NumIncrementalFetchSessions: incremental fetch sessions in the cache",
            value=c.num_incremental_fetch_sessions,
        )
        yield GaugeMetricFamily(
            prefix + "numincrementalfetchpartitionscached",
            "NumIncrementalFetchPartitionsCached: partitions held by all sessions",
            value=c.num_incremental_fetch_partitions_cached,
        )
        yield CounterMetricFamily(
            prefix + "incrementalfetchsessionevictions",
            "IncrementalFetchSessionEvictionsPerSec as a counter (take rate()); "
            "a client closing its own session does not count",
            value=c.evictions_total,
        )
        yield GaugeMetricFamily(
            "headwater_fetch_sessions_followers",
            "Incremental fetch sessions of replica fetchers (privileged in the cache)",
            value=c.num_follower_sessions,
        )
        kinds = CounterMetricFamily(
            "headwater_fetch_requests",
            "Fetch requests: full (sessionless or session-creating) vs incremental",
            labels=["kind"],
        )
        kinds.add_metric(["full"], c.full_fetches_total)
        kinds.add_metric(["incremental"], c.incremental_fetches_total)
        kinds.add_metric(["session_error"], c.session_errors_total)
        yield kinds


class _ReplicaManagerCollector(Collector):
    """LeaderCount, PartitionCount and the ISR shrink/expand counters."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas

    def collect(self) -> Iterator[Metric]:
        r = self._replicas
        # Scraped on the HTTP server's thread while the event loop changes the
        # map: copy it in one step (atomic under the GIL) before walking it.
        replicas = tuple(r.replicas.values())
        leaders = [p for p in replicas if p.is_leader]
        prefix = "kafka_server_replicamanager_"
        yield GaugeMetricFamily(prefix + "leadercount", "LeaderCount", value=len(leaders))
        yield GaugeMetricFamily(
            prefix + "partitioncount", "PartitionCount (replicas here)", value=len(replicas)
        )
        yield CounterMetricFamily(prefix + "isrshrinks", "IsrShrinksPerSec", value=r.isr_shrinks)
        yield CounterMetricFamily(prefix + "isrexpands", "IsrExpandsPerSec", value=r.isr_expands)


# -- request metrics (kafka.network:type=RequestMetrics) ------------------------------

#: Bucket bounds in milliseconds, as Kafka's names are in ms: from a cached
#: Metadata answer to a long-polling Fetch (max.wait.ms is 500 by default).
REQUEST_BUCKETS_MS: tuple[float, ...] = (
    0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)  # fmt: skip

#: Kafka's RequestMetrics histograms, in the order :meth:`RequestTimes.observe` takes them.
REQUEST_TIME_NAMES = (
    ("requestqueuetimems", "RequestQueueTimeMs: from the request's arrival to its handling"),
    ("localtimems", "LocalTimeMs: handling on this broker, waits for others excluded"),
    ("remotetimems", "RemoteTimeMs: waiting for data or replicas (fetch/produce purgatory)"),
    ("responsequeuetimems", "ResponseQueueTimeMs: answered, waiting behind earlier responses"),
    ("responsesendtimems", "ResponseSendTimeMs: writing the response to the socket"),
    ("totaltimems", "TotalTimeMs: from the request's arrival to its response sent"),
)


def kafka_request_name(api_name: str) -> str:
    """``LIST_OFFSETS`` -> ``ListOffsets``: the ``request`` label Kafka's metrics carry."""
    return "".join(part.capitalize() for part in api_name.split("_"))


_NB = len(REQUEST_BUCKETS_MS) + 1  # buckets per histogram, the last one +Inf


class _RequestStats:
    """Counts and time histograms of one request name, as plain numbers.

    The six histograms' buckets share one flat list (histogram i at
    ``i * _NB``): one request's bookkeeping is six bisects and twelve adds.
    """

    __slots__ = ("counts", "sums", "versions")

    def __init__(self) -> None:
        self.counts = [0] * (_NB * len(REQUEST_TIME_NAMES))
        self.sums = [0.0] * len(REQUEST_TIME_NAMES)
        self.versions: dict[int, int] = {}


class RequestTimes(Collector):
    """Kafka's RequestMetrics: RequestsPerSec by version, and the time histograms.

    Recorded on the event loop by the connection once a response is sent,
    exported at scrape time from the HTTP server's thread (reads of ints
    and lists, safe under the GIL; a scrape may see one request half-counted).
    """

    def __init__(self) -> None:
        self._stats: dict[str, _RequestStats] = {}

    def observe(self, request: str, version: int, times_ms: tuple[float, ...]) -> None:
        """One request's queue, local, remote, response-queue, send and total times (ms)."""
        stats = self._stats.get(request)
        if stats is None:
            stats = self._stats[request] = _RequestStats()
        versions = stats.versions
        versions[version] = versions.get(version, 0) + 1
        queue, local, remote, response_queue, send, total = times_ms
        # Unrolled: this runs once per request on the event loop (~2 us).
        at, b, c, sums = bisect.bisect_left, REQUEST_BUCKETS_MS, stats.counts, stats.sums
        c[at(b, queue)] += 1
        c[_NB + at(b, local)] += 1
        c[2 * _NB + at(b, remote)] += 1
        c[3 * _NB + at(b, response_queue)] += 1
        c[4 * _NB + at(b, send)] += 1
        c[5 * _NB + at(b, total)] += 1
        sums[0] += queue
        sums[1] += local
        sums[2] += remote
        sums[3] += response_queue
        sums[4] += send
        sums[5] += total

    def collect(self) -> Iterator[Metric]:
        prefix = "kafka_network_requestmetrics_"
        snapshot = tuple(self._stats.items())
        rate = CounterMetricFamily(
            prefix + "requestspersec",
            "RequestsPerSec as a counter (take rate()): requests answered, by request and version",
            labels=["request", "version"],
        )
        for request, stats in snapshot:
            for version, count in tuple(stats.versions.items()):
                rate.add_metric([request, str(version)], count)
        yield rate
        bounds = [str(float(b)) for b in REQUEST_BUCKETS_MS] + ["+Inf"]
        for i, (name, doc) in enumerate(REQUEST_TIME_NAMES):
            family = HistogramMetricFamily(prefix + name, doc, labels=["request"])
            for request, stats in snapshot:
                cumulative, running = [], 0
                counts = stats.counts[i * _NB : (i + 1) * _NB]
                for le, n in zip(bounds, counts, strict=True):
                    running += n
                    cumulative.append((le, running))
                family.add_metric([request], cumulative, stats.sums[i])
            yield family


# -- per-topic traffic (kafka.server:type=BrokerTopicMetrics) -------------------------


class TopicTraffic(Collector):
    """BytesInPerSec, BytesOutPerSec, MessagesInPerSec per topic, and broker-wide totals.

    Kafka's per-topic meters count clients' traffic only; what followers
    fetch is ReplicationBytesOutPerSec, as in Kafka.
    """

    def __init__(self) -> None:
        #: topic -> [bytes in, messages in, bytes out]
        self._topics: dict[str, list[int]] = {}
        self.replication_bytes_out = 0
        #: Topics that exist; series of deleted topics are dropped at scrape.
        self.existing: Callable[[], Iterable[str]] | None = None

    def _row(self, topic: str) -> list[int]:
        row = self._topics.get(topic)
        if row is None:
            row = self._topics[topic] = [0, 0, 0]
        return row

    def produced(self, topic: str, size: int, messages: int) -> None:
        row = self._row(topic)
        row[0] += size
        row[1] += messages

    def fetched(self, topic: str, size: int) -> None:
        self._row(topic)[2] += size

    def collect(self) -> Iterator[Metric]:
        prefix = "kafka_server_brokertopicmetrics_"
        rows = tuple(self._topics.items())
        if self.existing is not None:
            alive = set(self.existing())
            for topic, _ in rows:
                if topic not in alive:
                    self._topics.pop(topic, None)
            rows = tuple((t, r) for t, r in rows if t in alive)
        docs = (
            ("bytesinpersec", "BytesInPerSec as a counter: record bytes produced by clients"),
            ("messagesinpersec", "MessagesInPerSec as a counter: records produced by clients"),
            ("bytesoutpersec", "BytesOutPerSec as a counter: record bytes fetched by consumers"),
        )
        for i, (name, doc) in enumerate(docs):
            per_topic = CounterMetricFamily(prefix + name, doc, labels=["topic"])
            for topic, row in rows:
                per_topic.add_metric([topic], row[i])
            yield per_topic
        yield CounterMetricFamily(
            prefix + "replicationbytesoutpersec",
            "ReplicationBytesOutPerSec as a counter: record bytes fetched by followers",
            value=self.replication_bytes_out,
        )


# -- event-loop lag ------------------------------------------------------------------

#: Lag buckets in seconds (this one is not a Kafka metric: Prometheus units).
LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class EventLoopLag(Collector):
    """How late the event loop runs a timer: every client waits at least that long.

    A task sleeps ``interval`` seconds over and over; how much later than
    asked it wakes up is the lag. ``headwater_event_loop_lag_max_seconds`` is
    the worst since the previous scrape, so a short stall between scrapes
    still shows.
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self._buckets = [0] * (len(LAG_BUCKETS_S) + 1)
        self._sum = 0.0
        self._max = 0.0

    def record(self, lag: float) -> None:
        self._buckets[bisect.bisect_left(LAG_BUCKETS_S, lag)] += 1
        self._sum += lag
        if lag > self._max:
            self._max = lag

    async def monitor(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.record(max(0.0, time.perf_counter() - started - self.interval))

    def collect(self) -> Iterator[Metric]:
        worst, self._max = self._max, 0.0
        yield GaugeMetricFamily(
            "headwater_event_loop_lag_max_seconds",
            "The longest the event loop was late for a timer since the previous scrape",
            value=worst,
        )
        cumulative, running = [], 0
        for le, n in zip([*map(str, LAG_BUCKETS_S), "+Inf"], list(self._buckets), strict=True):
            running += n
            cumulative.append((le, running))
        yield HistogramMetricFamily(
            "headwater_event_loop_lag_seconds",
            "How late the event loop ran a timer, sampled every 100 ms",
            buckets=cumulative,
            sum_value=self._sum,
        )


# -- partition states ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """What the partition-state gauges need to know of partitions led here (``count`` alike)."""

    isr: int
    replicas: int
    min_isr: int
    count: int = 1


class _PartitionStateCollector(Collector):
    """Kafka's ReplicaManager partition-state gauges, for partitions led by this broker.

    A single broker leads every partition with one replica, so
    UnderReplicated is 0 and AtMinIsr counts partitions whose
    ``min.insync.replicas`` is 1, exactly as a one-broker Kafka reports.
    """

    def __init__(self, states: Callable[[], Iterable[PartitionHealth]]) -> None:
        self._states = states

    def collect(self) -> Iterator[Metric]:
        under = under_min = at_min = 0
        for p in self._states():
            under += p.count * (p.isr < p.replicas)
            under_min += p.count * (p.isr < p.min_isr)
            at_min += p.count * (p.isr == p.min_isr)
        prefix = "kafka_server_replicamanager_"
        yield GaugeMetricFamily(
            prefix + "underreplicatedpartitions",
            "UnderReplicatedPartitions: led here with an ISR smaller than the replica set",
            value=under,
        )
        yield GaugeMetricFamily(
            prefix + "underminisrpartitioncount",
            "UnderMinIsrPartitionCount: led here with fewer in sync than min.insync.replicas",
            value=under_min,
        )
        yield GaugeMetricFamily(
            prefix + "atminisrpartitioncount",
            "AtMinIsrPartitionCount: led here with exactly min.insync.replicas in sync",
            value=at_min,
        )


def controller_collector(
    is_controller: Callable[[], bool], offline: Callable[[], int]
) -> Collector:
    """The controller's OfflinePartitionsCount and ActiveControllerCount.

    As in Kafka, only the active controller reports them (others say 0), so
    ``sum()`` over the cluster is the cluster's figure.
    """

    class _Controller(Collector):
        def collect(self) -> Iterator[Metric]:
            active = is_controller()
            prefix = "kafka_controller_kafkacontroller_"
            yield GaugeMetricFamily(
                prefix + "activecontrollercount",
                "ActiveControllerCount: 1 on the active controller",
                value=int(active),
            )
            yield GaugeMetricFamily(
                prefix + "offlinepartitionscount",
                "OfflinePartitionsCount: partitions without a live leader (controller only)",
                value=offline() if active else 0,
            )

    return _Controller()


# -- consumer-group lag -----------------------------------------------------------------

#: group -> ((topic, partition), committed offset) pairs, read on the event loop.
CommittedOffsets = Callable[[], Iterator[tuple[str, str, int, int]]]
#: The log end a consumer can reach (the high watermark), None when not here.
EndOffset = Callable[[str, int], "int | None"]

#: The most lag series one scrape exports (a bound on the scrape's time and size).
MAX_LAG_SERIES = 100_000
#: Partitions looked at per step before the event loop gets a turn.
LAG_STEP = 500
#: How long a scrape waits for the event loop's answer.
LAG_TIMEOUT_S = 10.0


class ConsumerLagCollector(Collector):
    """``kafka_consumergroup_lag{consumergroup,topic,partition}`` and the committed offsets.

    Computed when scraped, not kept up to date: the group coordinator's
    committed offsets against each partition's high watermark. The walk runs
    on the event loop (no races with the coordinator), in slices of
    :data:`LAG_STEP` partitions so that many groups cannot stall clients,
    and stops at :data:`MAX_LAG_SERIES`. Groups are exported by the broker
    that coordinates them, for partitions that have a replica here.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        committed: CommittedOffsets,
        end_offset: EndOffset,
        *,
        max_series: int = MAX_LAG_SERIES,
    ) -> None:
        self._loop = loop
        self._committed = committed
        self._end_offset = end_offset
        self._max_series = max_series
        self.truncated = 0

    def _walk(self, out: list[tuple[str, str, int, int, int]]) -> Generator[None, None, None]:
        """Fill ``out`` with (group, topic, partition, committed, lag), a step per slice."""
        for n, (group, topic, partition, offset) in enumerate(self._committed(), 1):
            if len(out) >= self._max_series:
                self.truncated += 1
                return
            end = self._end_offset(topic, partition)
            if end is not None and offset >= 0:
                out.append((group, topic, partition, offset, max(0, end - offset)))
            if n % LAG_STEP == 0:
                yield None

    async def _compute(self) -> list[tuple[str, str, int, int, int]]:
        out: list[tuple[str, str, int, int, int]] = []
        await sliced(self._walk(out))
        return out

    def collect(self) -> Iterator[Metric]:
        rows: list[tuple[str, str, int, int, int]] = []
        if self._loop.is_running():
            try:
                future = asyncio.run_coroutine_threadsafe(self._compute(), self._loop)
            except RuntimeError:  # the loop closed meanwhile: the broker is stopping
                future = None
            if future is not None:
                try:
                    rows = future.result(LAG_TIMEOUT_S)
                except (concurrent.futures.TimeoutError, RuntimeError):
                    future.cancel()
                    log.warning("consumer lag not computed within %.0f s", LAG_TIMEOUT_S)
        labels = ["consumergroup", "topic", "partition"]
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "Lag of a group on a partition: high watermark minus committed offset",
            labels=labels,
        )
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "The group's committed offset on the partition",
            labels=labels,
        )
        for group, topic, partition, offset, behind in rows:
            key = [group, topic, str(partition)]
            lag.add_metric(key, behind)
            current.add_metric(key, offset)
        yield lag
        yield current
        yield CounterMetricFamily(
            "headwater_consumergroup_lag_truncated_scrapes",
            f"Scrapes that stopped at {MAX_LAG_SERIES} lag series",
            value=self.truncated,
        )
