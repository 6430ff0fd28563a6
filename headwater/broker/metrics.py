"""Broker metrics, exported in Prometheus format on ``--metrics-listen``.

Each broker owns its own ``CollectorRegistry`` so several brokers can live
in one process (the tests do this) without clashing on metric names. The
KIP-227 metrics keep the KIP's names (NumIncrementalFetchSessions, ...),
in Prometheus' snake case under the ``kafka_server_fetchsessioncache``
prefix that Kafka's JMX exporter would produce.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from headwater.cluster.replica_manager import ReplicaManager
from headwater.fetch.session_cache import FetchSessionCache

# The *_created series double every counter for no use here.
disable_created_metrics()  # type: ignore[no-untyped-call]


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
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
        self._http: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def bind_session_cache(self, cache: FetchSessionCache) -> None:
        """Export the cache's own counters at scrape time (no double bookkeeping)."""
        self.registry.register(_SessionCacheCollector(cache))

    def bind_replica_manager(self, replicas: ReplicaManager) -> None:
        """Kafka's ReplicaManager gauges: leaders, under-replicated partitions, ISR churn."""
        self.registry.register(_ReplicaManagerCollector(replicas))

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
    """LeaderCount, UnderReplicatedPartitions and the ISR shrink/expand counters."""

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
        yield GaugeMetricFamily(
            prefix + "underreplicatedpartitions",
            "UnderReplicatedPartitions: led here with an ISR smaller than the replica set",
            value=sum(1 for p in leaders if len(p.isr) < len(p.replicas)),
        )
        yield CounterMetricFamily(prefix + "isrshrinks", "IsrShrinksPerSec", value=r.isr_shrinks)
        yield CounterMetricFamily(prefix + "isrexpands", "IsrExpandsPerSec", value=r.isr_expands)
