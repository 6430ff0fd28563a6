"""What every client needs from the cluster: brokers, topic metadata, connections.

The producer, the consumer and the admin client each own one
``ClusterClient``. It bootstraps from ``bootstrap.servers``, keeps one
connection per broker (reconnecting with exponential back-off), caches
Metadata, and answers ListOffsets, which both the consumer (positions)
and the CLI (``topics describe``) need.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Final

from headwater.addresses import split_host_port
from headwater.client.connection import BrokerConnection
from headwater.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from headwater.client.types import (
    BrokerMetadata,
    PartitionMetadata,
    TopicMetadata,
    TopicPartition,
)
from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_types import ZERO_UUID
from headwater.security.client_security import ClientSecurity

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
LEADER_NOT_AVAILABLE: Final = 5


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` or a list of ``host:port`` strings."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = [split_host_port(item, 9092) for item in items if item.strip()]
    if not out:
        raise ValueError("bootstrap.servers is empty")
    return out


class ClusterClient:
    """Connections and metadata for one client; lives on one event loop."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "headwater",
        request_timeout_ms: int = 30_000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1_000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        # The error code of each topic the last metadata answer left out, e.g.
        # TOPIC_AUTHORIZATION_FAILED: "not authorized" must not read as "does not exist".
        self.topic_errors: dict[str, int] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Task[BrokerConnection]] = {}
        self._failures: dict[int, int] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._closed = False

    # -- connections -------------------------------------------------------------

    def ready_connection(self, node_id: int) -> BrokerConnection | None:
        """The open connection to ``node_id``, if there is one (no I/O)."""
        conn = self._connections.get(node_id)
        return conn if conn is not None and not conn.closed else None

    def backoff_s(self, node_id: int) -> float:
        """How long to wait before the next attempt at ``node_id`` (exponential, jittered)."""
        failures = self._failures.get(node_id, 0)
        if failures == 0:
            return 0.0
        ms = min(self.reconnect_backoff_ms * 2 ** (failures - 1), self.reconnect_backoff_max_ms)
        return float(ms * random.uniform(0.8, 1.2) / 1000)

    async def connection(self, node_id: int) -> BrokerConnection:
        """An open connection to ``node_id``; concurrent callers share one attempt."""
        conn = self.ready_connection(node_id)
        if conn is not None:
            return conn
        if self._closed:
            raise KafkaConnectionError("client is closed")
        task = self._connecting.get(node_id)
        if task is None:
            task = asyncio.ensure_future(self._connect(node_id))
            self._connecting[node_id] = task
            task.add_done_callback(lambda _t: self._connecting.pop(node_id, None))
        return await asyncio.shield(task)

    async def _connect(self, node_id: int) -> BrokerConnection:
        broker = self.brokers.get(node_id)
        if broker is None:
            raise KafkaConnectionError(f"unknown broker node {node_id}")
        delay = self.backoff_s(node_id)
        if delay:
            await asyncio.sleep(delay)
        try:
            conn = await BrokerConnection.open(
                broker.host,
                broker.port,
                client_id=self.client_id,
                node_id=node_id,
                request_timeout_ms=self.request_timeout_ms,
                security=self.security,
            )
        except KafkaError:
            self._failures[node_id] = self._failures.get(node_id, 0) + 1
            raise
        self._failures.pop(node_id, None)
        self._connections[node_id] = conn
        return conn

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker: a known one if possible, else a bootstrap server."""
        for node_id in list(self._connections):
            conn = self.ready_connection(node_id)
            if conn is not None:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        for node_id in list(self.brokers):
            with contextlib.suppress(KafkaError):
                return await self.connection(node_id)
        errors: list[str] = []
        for host, port in self.bootstrap:
            try:
                self._bootstrap_conn = await BrokerConnection.open(
                    host,
                    port,
                    client_id=self.client_id,
                    request_timeout_ms=self.request_timeout_ms,
                    security=self.security,
                )
                return self._bootstrap_conn
            except KafkaError as exc:
                errors.append(exc.message)
        raise KafkaConnectionError("no broker reachable: " + "; ".join(errors))

    async def close(self) -> None:
        self._closed = True
        for task in list(self._connecting.values()):
            task.cancel()
        for conn in list(self._connections.values()):
            conn.close()
        if self._bootstrap_conn is not None:
            self._bootstrap_conn.close()
        self._connections.clear()

    # -- metadata ----------------------------------------------------------------

    async def request_any(self, api_key: int, data: dict[str, Any]) -> Any:
        """A cold-API request to any broker, retried once on a fresh connection."""
        for attempt in range(2):
            conn = await self.any_connection()
            try:
                return await conn.request(api_key, data)
            except KafkaConnectionError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, *, allow_auto_create: bool = False
    ) -> dict[str, TopicMetadata]:
        """Metadata for ``topics`` (None: every topic); updates the caches.

        Topics the broker does not know are left out of the result (and
        dropped from the cache); other per-topic errors are logged.
        """
        names = None if topics is None else sorted(set(topics))
        data: dict[str, Any] = {
            "topics": None
            if names is None
            else [{"name": n, "topic_id": ZERO_UUID} for n in names],
            "allow_auto_topic_creation": allow_auto_create,
            "include_topic_authorized_operations": False,
            "include_cluster_authorized_operations": False,
        }
        resp = await self.request_any(ApiKey.METADATA, data)
        self.brokers = {
            int(b.node_id): BrokerMetadata(int(b.node_id), b.host, int(b.port), b.rack)
            for b in resp.brokers
        }
        self.cluster_id = getattr(resp, "cluster_id", None)
        self.controller_id = int(getattr(resp, "controller_id", -1))
        result: dict[str, TopicMetadata] = {}
        if names is None:
            self.topics = {}
        for t in resp.topics:
            code = int(t.error_code)
            name = t.name or ""
            if code and code != LEADER_NOT_AVAILABLE:
                self.topic_errors[name] = code
            else:
                self.topic_errors.pop(name, None)
            if code == UNKNOWN_TOPIC_OR_PARTITION:
                self.topics.pop(name, None)
                continue
            if code and code != LEADER_NOT_AVAILABLE:
                log.info("metadata for topic %s: error %d", name, code)
                continue
            partitions = {
                int(p.partition_index): PartitionMetadata(
                    int(p.partition_index),
                    int(p.leader_id),
                    int(getattr(p, "leader_epoch", -1)),
                    tuple(int(r) for r in p.replica_nodes),
                    tuple(int(r) for r in p.isr_nodes),
                    int(p.error_code),
                )
                for p in t.partitions
            }
            topic_id = getattr(t, "topic_id", None) or ZERO_UUID
            meta = TopicMetadata(name, topic_id, partitions, bool(getattr(t, "is_internal", False)))
            self.topics[name] = meta
            result[name] = meta
        return result

    async def topic(
        self, name: str, *, allow_auto_create: bool = False, timeout_s: float = 10.0
    ) -> TopicMetadata | None:
        """Metadata for one topic, waiting while its partitions have no leader yet."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            found = (await self.refresh_metadata([name], allow_auto_create=allow_auto_create)).get(
                name
            )
            if found is None and not allow_auto_create:
                return None
            if (
                found is not None
                and found.partitions
                and all(p.leader >= 0 for p in found.partitions.values())
            ):
                return found
            if loop.time() >= deadline:
                if found is None:
                    return None
                raise KafkaTimeoutError(f"topic {name} has partitions without a leader")
            await asyncio.sleep(0.05)

    def leader(self, tp: TopicPartition) -> int | None:
        meta = self.topics.get(tp.topic)
        if meta is None:
            return None
        p = meta.partitions.get(tp.partition)
        return p.leader if p is not None and p.leader >= 0 else None

    def topic_id(self, topic: str) -> uuid.UUID:
        meta = self.topics.get(topic)
        return meta.topic_id if meta is not None else ZERO_UUID

    # -- offsets -----------------------------------------------------------------

    async def list_offsets(
        self,
        tps: Iterable[TopicPartition],
        timestamp: int,
        *,
        isolation_level: int = 0,
        unreachable: int | None = None,
    ) -> dict[TopicPartition, int]:
        """Offsets for ``timestamp`` (-2 earliest, -1 latest, else the first at or after).

        A timestamp past the last record maps to -1, as in Kafka. A leader that
        cannot be reached (a broker just died; ZooKeeper names it leader until its
        session expires) is asked again after a metadata refresh; if it is still
        the leader, its partitions get ``unreachable`` when given, else the
        connection error is raised.
        """
        wanted = list(dict.fromkeys(tps))
        missing = {tp.topic for tp in wanted if self.leader(tp) is None}
        if missing:
            await self.refresh_metadata(self.topics.keys() | missing)
        merged: dict[TopicPartition, int] = {}
        failed = await self._list_offsets_by_leader(wanted, timestamp, isolation_level, merged)
        if failed:
            await self.refresh_metadata(self.topics.keys())
            failed = await self._list_offsets_by_leader(failed, timestamp, isolation_level, merged)
        for tp in failed:
            if unreachable is None:
                raise KafkaConnectionError(
                    f"leader {self.leader(tp)} of {tp.topic}-{tp.partition} is unreachable"
                )
            merged[tp] = unreachable
        return {tp: merged[tp] for tp in wanted}

    async def _list_offsets_by_leader(
        self,
        tps: list[TopicPartition],
        timestamp: int,
        isolation_level: int,
        into: dict[TopicPartition, int],
    ) -> list[TopicPartition]:
        """Ask each leader for its partitions; the partitions whose leader was unreachable."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            leader = self.leader(tp)
            if leader is None:
                raise KafkaError(UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic}-{tp.partition}")
            by_leader.setdefault(leader, []).append(tp)
        results = await asyncio.gather(
            *(
                self._list_offsets_at(node, group, timestamp, isolation_level)
                for node, group in by_leader.items()
            ),
            return_exceptions=True,
        )
        failed: list[TopicPartition] = []
        for group, result in zip(by_leader.values(), results, strict=True):
            if isinstance(result, KafkaConnectionError):
                failed.extend(group)
            elif isinstance(result, BaseException):
                raise result
            else:
                into.update(result)
        return failed

    async def _list_offsets_at(
        self, node_id: int, tps: list[TopicPartition], timestamp: int, isolation_level: int
    ) -> dict[TopicPartition, int]:
        topics: dict[str, list[dict[str, int]]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "current_leader_epoch": -1,
                    "timestamp": timestamp,
                }
            )
        data = {
            "replica_id": -1,
            "isolation_level": isolation_level,
            "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
        }
        conn = await self.connection(node_id)
        resp = await conn.request(ApiKey.LIST_OFFSETS, data)
        out: dict[TopicPartition, int] = {}
        for t in resp.topics:
            for p in t.partitions:
                code = int(p.error_code)
                tp = TopicPartition(t.name, int(p.partition_index))
                if code:
                    raise KafkaError(code, f"ListOffsets for {tp.topic}-{tp.partition}")
                out[tp] = int(p.offset)
        return out
