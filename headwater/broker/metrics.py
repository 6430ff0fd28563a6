"""Broker metrics, exported in Prometheus format on ``--metrics-listen``.

Each broker owns its own ``CollectorRegistry`` so several brokers can live
in one process (the tests do this) without clashing on metric names. The
KIP-227 metrics keep the KIP's names (NumIncrementalFetchSessions, ...),
in Prometheus' snake case under the ``kafka_server_fetchsessioncache``
prefix that Kafka's JMX exporter would produce.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


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
        self.fetch_requests = Counter(
            "headwater_fetch_requests",
            "Fetch requests by kind: full (sessionless or session-creating) or incremental",
            ["kind"],
            registry=r,
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
        self.num_sessions = Gauge(
            "kafka_server_fetchsessioncache_numincrementalfetchsessions",
            "NumIncrementalFetchSessions: incremental fetch sessions in the cache",
            registry=r,
        )
        self.num_partitions_cached = Gauge(
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "NumIncrementalFetchPartitionsCached: partitions held by all fetch sessions",
            registry=r,
        )
        self.session_evictions = Counter(
            "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
            "IncrementalFetchSessionEvictionsPerSec as a counter: take rate() of it",
            registry=r,
        )
        self._http: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def bind_session_gauges(
        self, sessions: Callable[[], float], partitions: Callable[[], float]
    ) -> None:
        self.num_sessions.set_function(sessions)
        self.num_partitions_cached.set_function(partitions)

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
