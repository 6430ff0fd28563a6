"""Everything the console asks the cluster, through Headwater's client only.

One ``ClusterClient`` (and, on first use, one producer) lives on a private
event-loop thread, as the blocking ``AdminClient`` does: the web server's
loop awaits each call with ``wrap_future``, so a slow or dead broker delays
one page's data, never the serving of other pages, static files or the
login. Metadata is cached for a couple of seconds (every page and every
live fragment needs it) and log-dir sizes a little longer; every call has
a deadline, so an unreachable cluster is an answer (a banner) in bounded
time rather than a hung page.

Errors come back as three kinds a page can show: ``Unreachable`` (no
broker answers: the banner that keeps retrying), ``Denied`` (an
authorization error, naming the ACL the console's principal lacks) and
plain ``KafkaError`` / ``ValueError`` (a refused request, said as is).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from headwater.client.admin import AsyncAdminClient, TransactionListing
from headwater.client.cluster import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ClusterClient
from headwater.client.consumer import AsyncConsumer
from headwater.client.coordinator import CoordinatorClient, CoordinatorType
from headwater.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from headwater.client.loop_thread import EventLoopThread
from headwater.client.partition_admin import (
    ElectionType,
    OngoingReassignment,
    PartitionResult,
    ProducerState,
    abort_transaction,
    describe_producers,
    elect_leaders,
    list_partition_reassignments,
)
from headwater.client.producer import AsyncProducer
from headwater.client.types import (
    BrokerMetadata,
    ConsumerRecord,
    RecordMetadata,
    TopicMetadata,
    TopicPartition,
)
from headwater.console.assignments import decode_assignment
from headwater.console.metrics import BrokerSeries, parse_sample
from headwater.console.offsets import ResetRow, Strategy, plan_reset
from headwater.protocol.apis import ApiKey
from headwater.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from headwater.security.client_security import ClientSecurity
from headwater.security.scram import ScramMechanisms, normalize_password

log = logging.getLogger(__name__)
T = TypeVar("T")

METADATA_TTL_S: Final = 2.0
LOG_DIRS_TTL_S: Final = 10.0
GROUPS_TTL_S: Final = 3.0
#: Kafka's authorization error codes: topic, group, cluster, transactional id.
AUTHORIZATION_CODES: Final = frozenset({29, 30, 31, 53})
TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4
#: At most this many records are read to answer one browse (filters scan, never hoard).
MAX_SCAN_RECORDS: Final = 5000
MAX_BROWSE_RESULTS: Final = 500
ACTIVE_GROUP_STATES: Final = ("PreparingRebalance", "CompletingRebalance", "Stable")
#: UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
#: FENCED/UNKNOWN_LEADER_EPOCH: a leadership in motion, worth asking again.
_LEADERSHIP_CODES: Final = frozenset({3, 5, 6, 74, 75})


class Unreachable(Exception):
    """No broker of the cluster answered in time."""


class Denied(Exception):
    """The cluster refused for lack of an ACL; the message names the ACL."""


@dataclass(frozen=True, slots=True)
class Needs:
    """The ACL an operation needs (what a Denied message names)."""

    operation: str
    resource_type: str
    name: str
    alternative: str = ""  # another ACL that would do as well, e.g. "CREATE on Topic:t"

    def text(self, principal: str) -> str:
        also = f" (or {self.alternative})" if self.alternative else ""
        return (
            f"denied: {principal} needs an ALLOW {self.operation} ACL on "
            f"{self.resource_type}:{self.name}{also}"
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One Metadata answer, with the brokers ever seen (so a dead one shows as down)."""

    at: float
    cluster_id: str | None
    controller_id: int
    live: Mapping[int, BrokerMetadata]
    known: Mapping[int, BrokerMetadata]
    topics: Mapping[str, TopicMetadata]

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    def health(self) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """(under-replicated, offline) partitions."""
        under: list[TopicPartition] = []
        offline: list[TopicPartition] = []
        for name, meta in self.topics.items():
            for index, p in meta.partitions.items():
                if p.leader < 0:
                    offline.append(TopicPartition(name, index))
                elif len(p.isr) < len(p.replicas):
                    under.append(TopicPartition(name, index))
        return sorted(under), sorted(offline)

    def leaders(self) -> dict[int, int]:
        """broker id -> partitions it leads."""
        out: dict[int, int] = dict.fromkeys(self.known, 0)
        for meta in self.topics.values():
            for p in meta.partitions.values():
                if p.leader >= 0:
                    out[p.leader] = out.get(p.leader, 0) + 1
        return out


@dataclass(frozen=True, slots=True)
class LogDirs:
    """DescribeLogDirs of every live broker: sizes per replica and per directory."""

    at: float
    sizes: Mapping[tuple[int, str, int], int]  # (broker, topic, partition) -> bytes
    dirs: Mapping[int, Mapping[str, tuple[int, int, int]]]  # broker -> dir -> (used, total, free)
    errors: Mapping[int, str]

    def partition_size(self, topic: str, partition: int, broker: int) -> int | None:
        return self.sizes.get((broker, topic, partition))


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class GroupPartition:
    tp: TopicPartition
    committed: int | None
    log_end: int | None
    owner: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None or self.log_end < 0:
            return None
        return max(self.log_end - self.committed, 0)


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberView, ...]
    partitions: tuple[GroupPartition, ...]
    coordinator: int

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_GROUP_STATES or bool(self.members)


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class Browse:
    """What a browse found: the records shown and how much was read to find them."""

    records: tuple[ConsumerRecord, ...]
    scanned: int
    complete: bool  # False when the scan budget or time ran out first


@dataclass(frozen=True, slots=True)
class AclRow:
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


@dataclass(frozen=True, slots=True)
class ReassignmentView:
    tp: TopicPartition
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    target_bytes: int | None  # the leader's size: what each adding replica must copy
    moved_bytes: int | None  # what the adding replicas hold so far (the least of them)

    @property
    def percent(self) -> float | None:
        if self.target_bytes is None or self.moved_bytes is None:
            return None
        if self.target_bytes <= 0:
            return 100.0
        return min(100.0, 100.0 * self.moved_bytes / self.target_bytes)


@dataclass
class _Cached:
    snapshot: Snapshot | None = None
    log_dirs: LogDirs | None = None
    groups: tuple[float, list[GroupListing]] | None = None
    metrics_endpoints: tuple[float, dict[int, str | None]] | None = None


@dataclass
class LagHistory:
    """Total lag of each group over the last minutes, sampled as pages poll it."""

    points: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    keep_s: float = 15 * 60

    def add(self, group: str, at: float, lag: int) -> None:
        series = self.points.setdefault(group, [])
        if series and at - series[-1][0] < 1.0:
            series[-1] = (at, lag)
        else:
            series.append((at, lag))
        while series and at - series[0][0] > self.keep_s:
            series.pop(0)

    def series(self, group: str) -> list[tuple[float, int]]:
        return list(self.points.get(group, ()))


def _raise(code: int, what: str, needs: Needs | None = None, principal: str = "") -> None:
    if not code:
        return
    if code in AUTHORIZATION_CODES and needs is not None:
        raise Denied(needs.text(principal))
    raise KafkaError(code, what)


class ClusterGateway:
    """The console's one connection to the cluster (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        security: ClientSecurity | None = None,
        *,
        request_timeout_s: float = 8.0,
        client_id: str = "headwater-console",
        metrics_endpoints: Mapping[int, str] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        #: broker id -> HOST:PORT of its /metrics, as configured; others are asked for
        #: through DescribeConfigs (headwater.metrics.listen) where the cluster reports it.
        self.static_metrics = {k: _metrics_url(v) for k, v in (metrics_endpoints or {}).items()}
        self.security = security
        self.request_timeout_s = request_timeout_s
        self.client_id = client_id
        self.principal = (
            f"User:{security.username}"
            if security is not None and security.username
            else "the console's principal"
        )
        self._thread = EventLoopThread("headwater-console-client")
        self._cluster: ClusterClient | None = None
        self._producer: AsyncProducer | None = None
        self._known: dict[int, BrokerMetadata] = {}
        self._cache = _Cached()
        self.lag_history = LagHistory()
        self.metrics: dict[int, BrokerSeries] = {}
        self._metadata_lock: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- plumbing ----------------------------------------------------------------

    async def call(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``fn()`` on the client's loop; from the web server's loop, await its result."""
        future = self._thread.submit(self._bounded(fn))
        return await asyncio.wrap_future(future)

    async def _bounded(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        try:
            async with asyncio.timeout(self.request_timeout_s * 2):
                return await fn()
        except (KafkaConnectionError, KafkaTimeoutError, TimeoutError, ConnectionError) as exc:
            raise Unreachable(f"cannot reach the cluster at {self.bootstrap}: {exc}") from None
        except OSError as exc:
            raise Unreachable(f"cannot reach the cluster at {self.bootstrap}: {exc}") from None
        except KafkaError as exc:
            if exc.code == 13:  # NETWORK_EXCEPTION: the connection dropped
                raise Unreachable(f"cannot reach the cluster at {self.bootstrap}: {exc}") from None
            raise

    def _client(self) -> ClusterClient:
        if self._cluster is None:
            self._cluster = ClusterClient(
                self.bootstrap,
                client_id=self.client_id,
                request_timeout_ms=int(self.request_timeout_s * 1000),
                reconnect_backoff_max_ms=2000,
                security=self.security,
            )
        return self._cluster

    async def _offsets_at(
        self, tps: Sequence[TopicPartition], timestamp: int, *, strict: bool = False
    ) -> dict[TopicPartition, int]:
        """ListOffsets that rides out a leadership in motion (a topic just created, a broker
        just died): NOT_LEADER_OR_FOLLOWER and friends refresh metadata and ask again; a
        partition still without an answer reads -1 unless ``strict``."""
        if not tps:
            return {}
        cluster = self._client()
        for attempt in range(4):
            try:
                return await cluster.list_offsets(tps, timestamp, unreachable=-1)
            except KafkaError as exc:
                if exc.code not in _LEADERSHIP_CODES:
                    raise
                if attempt == 3:
                    if strict:
                        raise
                    return dict.fromkeys(tps, -1)
                await asyncio.sleep(0.2 * (attempt + 1))
                await cluster.refresh_metadata(sorted({tp.topic for tp in tps}))
        return dict.fromkeys(tps, -1)  # pragma: no cover

    def _background(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` on the client's loop without waiting; its failure is only logged."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.debug("console background task failed: %s", t.exception())

        task.add_done_callback(done)

    def close(self) -> None:
        async def shut() -> None:
            if self._producer is not None:
                with contextlib.suppress(Exception):
                    await self._producer.close(5)
            if self._cluster is not None:
                with contextlib.suppress(Exception):
                    await self._cluster.close()

        with contextlib.suppress(Exception):
            self._thread.run(shut(), timeout=10)
        self._thread.stop()

    # -- metadata ------------------------------------------------------------------

    async def snapshot(self, *, fresh: bool = False) -> Snapshot:
        """Metadata of every topic, at most ``METADATA_TTL_S`` old (one Metadata request)."""
        return await self.call(lambda: self._snapshot(fresh))

    async def _snapshot(self, fresh: bool) -> Snapshot:
        if self._metadata_lock is None:
            self._metadata_lock = asyncio.Lock()
        async with self._metadata_lock:
            cached = self._cache.snapshot
            if not fresh and cached is not None and time.monotonic() - cached.at < METADATA_TTL_S:
                return cached
            cluster = self._client()
            topics = dict(sorted((await cluster.refresh_metadata(None)).items()))
            self._known.update(cluster.brokers)
            # A broker named as a replica but absent from Metadata is down, even if this
            # console never saw it up (it died before the console started).
            for meta in topics.values():
                for p in meta.partitions.values():
                    for replica in p.replicas:
                        if replica not in self._known:
                            self._known[replica] = BrokerMetadata(replica, "", 0)
            snap = Snapshot(
                at=time.monotonic(),
                cluster_id=cluster.cluster_id,
                controller_id=cluster.controller_id,
                live=dict(sorted(cluster.brokers.items())),
                known=dict(sorted(self._known.items())),
                topics=topics,
            )
            self._cache.snapshot = snap
            return snap

    def forget_metadata(self) -> None:
        self._cache.snapshot = None
        self._cache.log_dirs = None
        self._cache.groups = None

    # -- log dirs --------------------------------------------------------------------

    async def log_dirs(self) -> LogDirs:
        return await self.call(self._log_dirs)

    async def _log_dirs(self) -> LogDirs:
        cached = self._cache.log_dirs
        if cached is not None and time.monotonic() - cached.at < LOG_DIRS_TTL_S:
            return cached
        snap = await self._snapshot(False)
        cluster = self._client()
        sizes: dict[tuple[int, str, int], int] = {}
        dirs: dict[int, dict[str, tuple[int, int, int]]] = {}
        errors: dict[int, str] = {}

        async def at(node: int) -> None:
            try:
                async with asyncio.timeout(self.request_timeout_s):
                    conn = await cluster.connection(node)
                    resp = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
            except Exception as exc:  # one broker's silence must not blank the others
                errors[node] = str(exc) or type(exc).__name__
                return
            for result in resp.results:
                used = 0
                for t in result.topics:
                    for p in t.partitions:
                        size = int(p.partition_size)
                        sizes[(node, t.name, int(p.partition_index))] = size
                        used += size
                total = int(getattr(result, "total_bytes", -1))
                free = int(getattr(result, "usable_bytes", -1))
                dirs.setdefault(node, {})[result.log_dir] = (used, total, free)

        await asyncio.gather(*(at(node) for node in snap.live))
        out = LogDirs(time.monotonic(), sizes, dirs, errors)
        self._cache.log_dirs = out
        return out

    # -- topics ----------------------------------------------------------------------

    async def topic_configs(
        self, names: Sequence[str]
    ) -> dict[str, dict[str, tuple[str | None, int]]]:
        """Configs (value, source) of several topics in one DescribeConfigs request."""
        return await self.call(lambda: self._configs(names, TOPIC_RESOURCE))

    async def broker_configs(self, broker_id: int) -> dict[str, tuple[str | None, int]]:
        found = await self.call(lambda: self._configs([str(broker_id)], BROKER_RESOURCE))
        return found.get(str(broker_id), {})

    async def _configs(
        self, names: Sequence[str], resource_type: int
    ) -> dict[str, dict[str, tuple[str | None, int]]]:
        if not names:
            return {}
        resp = await self._client().request_any(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [
                    {"resource_type": resource_type, "resource_name": n, "configuration_keys": None}
                    for n in names
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        out: dict[str, dict[str, tuple[str | None, int]]] = {}
        for result in resp.results:
            code = int(result.error_code)
            if code:
                out[result.resource_name] = {}
                continue
            entries: dict[str, tuple[str | None, int]] = {}
            for entry in result.configs:
                source = getattr(entry, "config_source", None)
                if source is None:
                    source = 5 if entry.is_default else 1
                entries[entry.name] = (entry.value, int(source))
            out[result.resource_name] = entries
        return out

    async def offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, log end) per partition; -1, -1 where the leader cannot be reached."""

        async def run() -> dict[TopicPartition, tuple[int, int]]:
            await self._snapshot(False)
            if not tps:
                return {}
            starts, ends = await asyncio.gather(
                self._offsets_at(tps, EARLIEST_TIMESTAMP), self._offsets_at(tps, LATEST_TIMESTAMP)
            )
            return {tp: (starts.get(tp, -1), ends.get(tp, -1)) for tp in tps}

        return await self.call(run)

    async def create_topic(
        self, name: str, partitions: int, replication: int, configs: Mapping[str, str]
    ) -> None:
        async def run() -> None:
            admin = self._admin()
            try:
                await admin.create_topics([(name, partitions, dict(configs), replication)])
            except KafkaError as exc:
                _raise(
                    exc.code,
                    str(exc),
                    Needs("CREATE", "Cluster", CLUSTER_NAME, f"CREATE on Topic:{name}"),
                    self.principal,
                )
            self.forget_metadata()

        await self.call(run)

    async def delete_topic(self, name: str) -> None:
        async def run() -> None:
            try:
                await self._admin().delete_topics([name])
            except KafkaError as exc:
                _raise(exc.code, str(exc), Needs("DELETE", "Topic", name), self.principal)
            self.forget_metadata()

        await self.call(run)

    async def add_partitions(self, name: str, total: int) -> None:
        async def run() -> None:
            try:
                await self._admin().create_partitions(name, total)
            except KafkaError as exc:
                _raise(exc.code, str(exc), Needs("ALTER", "Topic", name), self.principal)
            self.forget_metadata()

        await self.call(run)

    async def alter_topic_configs(
        self, name: str, sets: Mapping[str, str], deletes: Iterable[str]
    ) -> None:
        """IncrementalAlterConfigs: SET each of ``sets``, DELETE each of ``deletes``."""

        async def run() -> None:
            configs = [{"name": k, "config_operation": 0, "value": v} for k, v in sets.items()]
            configs += [{"name": k, "config_operation": 1, "value": None} for k in deletes]
            resp = await self._client().request_any(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                {
                    "resources": [
                        {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configs": configs}
                    ],
                    "validate_only": False,
                },
            )
            for r in resp.responses:
                _raise(
                    int(r.error_code),
                    r.error_message or f"altering configs of {name!r}",
                    Needs("ALTER_CONFIGS", "Topic", name),
                    self.principal,
                )

        await self.call(run)

    def _admin(self) -> _SharedAdmin:
        return _SharedAdmin(self._client())

    # -- messages ----------------------------------------------------------------------

    async def browse(
        self,
        topic: str,
        partitions: Sequence[int],
        *,
        mode: str,
        value: int,
        limit: int,
        contains: str = "",
    ) -> Browse:
        """Read at most ``limit`` records (at most ``MAX_SCAN_RECORDS`` scanned), bounded in
        time and in memory: ``mode`` is ``latest`` (the last ``value`` of each partition,
        newest ``limit`` overall), ``offset`` (from ``value`` in each partition) or
        ``timestamp`` (from the first record at or after epoch ms ``value``)."""
        limit = max(1, min(limit, MAX_BROWSE_RESULTS))
        needle = contains.encode()

        async def run() -> Browse:
            snap = await self._snapshot(False)
            meta = snap.topics.get(topic)
            if meta is None:
                raise KafkaError(3, f"topic {topic!r} does not exist")
            wanted = [p for p in partitions if p in meta.partitions] or sorted(meta.partitions)
            tps = [TopicPartition(topic, p) for p in wanted]
            starts = await self._offsets_at(tps, EARLIEST_TIMESTAMP)
            ends = await self._offsets_at(tps, LATEST_TIMESTAMP)
            if mode == "timestamp":
                found = await self._offsets_at(tps, value)
                begin = {tp: found[tp] if found[tp] >= 0 else ends[tp] for tp in tps}
            elif mode == "offset":
                begin = {tp: min(max(value, starts[tp]), ends[tp]) for tp in tps}
            else:  # latest: the last N of each partition, merged below
                n = limit if not needle else MAX_SCAN_RECORDS // max(1, len(tps))
                begin = {tp: max(starts[tp], ends[tp] - n) for tp in tps}
            todo = {tp for tp in tps if starts[tp] >= 0 and begin[tp] < ends[tp]}
            if not todo:
                return Browse((), 0, True)
            consumer = AsyncConsumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "security": self.security,
                    "client.id": f"{self.client_id}-browse",
                    "fetch.max.bytes": 8 << 20,
                    "max.partition.fetch.bytes": 1 << 20,
                    "fetch.max.wait.ms": 200,
                    "isolation.level": "read_uncommitted",
                    "request.timeout.ms": int(self.request_timeout_s * 1000),
                }
            )
            found_records: list[ConsumerRecord] = []
            scanned = 0
            complete = True
            try:
                consumer.assign(sorted(todo))
                for tp in todo:
                    consumer.seek(tp, begin[tp])
                deadline = time.monotonic() + min(5.0, self.request_timeout_s)
                reached: set[TopicPartition] = set()
                while len(reached) < len(todo):
                    if time.monotonic() > deadline or scanned >= MAX_SCAN_RECORDS:
                        complete = False
                        break
                    if mode != "latest" and len(found_records) >= limit:
                        complete = False
                        break
                    for rec in await consumer.poll(0.5):
                        tp = TopicPartition(rec.topic, rec.partition)
                        if rec.offset >= ends[tp] - 1:
                            reached.add(tp)
                        if rec.offset >= ends[tp] or (tp in reached and rec.offset >= ends[tp]):
                            continue
                        scanned += 1
                        if needle and not _matches(rec, needle):
                            continue
                        found_records.append(rec)
                    for tp in todo - reached:
                        if await consumer.position(tp) >= ends[tp]:
                            reached.add(tp)
            finally:
                # Closing ends the consumer's fetch sessions (a request per broker): the page
                # need not wait for that, so it runs on in the background.
                self._background(consumer.close())
            if mode == "latest":
                found_records.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
                chosen = found_records[-limit:]
                chosen.reverse()  # newest first
            else:
                found_records.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
                chosen = found_records[:limit]
            return Browse(tuple(chosen), scanned, complete)

        return await self.call(run)

    async def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes]],
        partition: int | None,
    ) -> RecordMetadata:
        async def run() -> RecordMetadata:
            if self._producer is None:
                self._producer = AsyncProducer(
                    {
                        "bootstrap.servers": self.bootstrap,
                        "security": self.security,
                        "client.id": f"{self.client_id}-producer",
                        "acks": "all",
                        "linger.ms": 0,
                        "request.timeout.ms": int(self.request_timeout_s * 1000),
                        "max.block.ms": int(self.request_timeout_s * 1000),
                    }
                )
            try:
                return await self._producer.send_and_wait(
                    topic, value, key, list(headers), partition
                )
            except KafkaError as exc:
                _raise(exc.code, str(exc), Needs("WRITE", "Topic", topic), self.principal)
                raise

        return await self.call(run)

    # -- consumer groups -----------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        async def run() -> list[GroupListing]:
            cached = self._cache.groups
            if cached is not None and time.monotonic() - cached[0] < GROUPS_TTL_S:
                return cached[1]
            snap = await self._snapshot(False)
            cluster = self._client()
            found: dict[str, GroupListing] = {}

            async def at(node: int) -> None:
                try:
                    conn = await cluster.connection(node)
                    resp = await conn.request(ApiKey.LIST_GROUPS, {"states_filter": []})
                except (KafkaConnectionError, KafkaTimeoutError, OSError):
                    return
                _raise(
                    int(resp.error_code),
                    "ListGroups",
                    Needs("DESCRIBE", "Cluster", CLUSTER_NAME),
                    self.principal,
                )
                for g in resp.groups:
                    found[g.group_id] = GroupListing(
                        g.group_id, g.protocol_type or "", getattr(g, "group_state", "") or ""
                    )

            await asyncio.gather(*(at(node) for node in snap.live))
            out = sorted(found.values(), key=lambda g: g.group_id)
            self._cache.groups = (time.monotonic(), out)
            return out

        return await self.call(run)

    async def describe_group(self, group: str) -> GroupView:
        view: GroupView = await self.call(lambda: self._describe_group(group))
        self.lag_history.add(group, time.time(), view.total_lag)
        return view

    async def _coordinator(self, group: str) -> tuple[int, Any]:
        cluster = self._client()
        node = await CoordinatorClient(cluster).find(CoordinatorType.GROUP, group)
        return node, await cluster.connection(node)

    async def _describe_group(self, group: str) -> GroupView:
        needs = Needs("DESCRIBE", "Group", group)
        try:
            node, conn = await self._coordinator(group)
        except KafkaError as exc:
            _raise(exc.code, str(exc), needs, self.principal)
            raise
        described = await conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
        (g,) = described.groups
        _raise(int(g.error_code), f"DescribeGroups {group}", needs, self.principal)
        committed = await self._committed(conn, group)
        members = tuple(
            MemberView(
                member_id=m.member_id,
                client_id=m.client_id,
                host=m.client_host,
                instance_id=getattr(m, "group_instance_id", None),
                assignment=(
                    decode_assignment(bytes(m.member_assignment))
                    if g.protocol_type == "consumer"
                    else ()
                ),
            )
            for m in g.members
        )
        owners = {
            TopicPartition(t, p): m.member_id for m in members for t, ps in m.assignment for p in ps
        }
        tps = sorted(set(committed) | set(owners))
        ends = await self._offsets_at(tps, LATEST_TIMESTAMP)
        partitions = tuple(
            GroupPartition(tp, committed.get(tp), ends.get(tp), owners.get(tp)) for tp in tps
        )
        return GroupView(
            group_id=group,
            state=g.group_state,
            protocol_type=g.protocol_type,
            protocol=getattr(g, "protocol_data", "") or "",
            members=members,
            partitions=partitions,
            coordinator=node,
        )

    async def _committed(self, conn: Any, group: str) -> dict[TopicPartition, int]:
        fetched = await conn.request(
            ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None}, version=7
        )
        _raise(
            int(fetched.error_code), f"OffsetFetch {group}", Needs("DESCRIBE", "Group", group),
            self.principal,
        )  # fmt: skip
        return {
            TopicPartition(t.name, int(p.partition_index)): int(p.committed_offset)
            for t in fetched.topics
            for p in t.partitions
            if int(p.committed_offset) >= 0
        }

    async def groups_of_topic(self, topic: str, limit: int = 200) -> list[tuple[str, int]]:
        """(group, total lag on ``topic``) of the groups that committed offsets for it."""
        groups = await self.list_groups()

        async def run() -> list[tuple[str, int]]:
            out: list[tuple[str, int]] = []
            for listing in groups[:limit]:
                try:
                    _, conn = await self._coordinator(listing.group_id)
                    committed = await self._committed(conn, listing.group_id)
                except (KafkaError, Denied):
                    continue
                mine = {tp: o for tp, o in committed.items() if tp.topic == topic}
                if not mine:
                    continue
                ends = await self._offsets_at(sorted(mine), LATEST_TIMESTAMP)
                lag = sum(max(ends[tp] - o, 0) for tp, o in mine.items() if ends[tp] >= 0)
                out.append((listing.group_id, lag))
            return out

        return await self.call(run)

    async def plan_group_reset(
        self,
        group: str,
        strategy: Strategy,
        topic: str | None,
        value: int,
    ) -> list[ResetRow]:
        """The preview: refuses a group that still has members, as Kafka's tool does."""
        return await self.call(lambda: self._plan(group, strategy, topic, value))

    async def _plan(
        self, group: str, strategy: Strategy, topic: str | None, value: int
    ) -> list[ResetRow]:
        view = await self._describe_group(group)
        if view.active:
            raise ValueError(
                f"consumer group {group!r} is {view.state} with {len(view.members)} member(s): "
                "stop its consumers first; offsets of an active group cannot be reset"
            )
        committed = {p.tp: p.committed for p in view.partitions if p.committed is not None}
        if topic:
            snap = await self._snapshot(False)
            meta = snap.topics.get(topic)
            if meta is None:
                raise KafkaError(3, f"topic {topic!r} does not exist")
            tps = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        else:
            tps = sorted(committed)
        if not tps:
            raise ValueError(f"group {group!r} has no committed offsets: name a topic")
        starts = await self._offsets_at(tps, EARLIEST_TIMESTAMP, strict=True)
        ends = await self._offsets_at(tps, LATEST_TIMESTAMP, strict=True)
        found = await self._offsets_at(tps, value, strict=True) if strategy == "timestamp" else None
        if any(o < 0 for o in [*starts.values(), *ends.values()]):
            raise ValueError("a partition's leader cannot be reached now: preview again shortly")
        return plan_reset(strategy, tps, committed, starts, ends, value=value, found=found)

    async def execute_group_reset(self, group: str, rows: Sequence[ResetRow]) -> None:
        """Commit the previewed offsets as an admin (generation -1, no member)."""

        async def run() -> None:
            view = await self._describe_group(group)
            if view.active:
                raise ValueError(
                    f"consumer group {group!r} became {view.state}: stop its consumers first"
                )
            _, conn = await self._coordinator(group)
            topics: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                topics.setdefault(row.tp.topic, []).append(
                    {
                        "partition_index": row.tp.partition,
                        "committed_offset": row.new,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                )
            body = {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            resp = await conn.request(ApiKey.OFFSET_COMMIT, body, version=8)
            for t in resp.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    needs = (
                        Needs("READ", "Topic", t.name)
                        if code == 29
                        else Needs("READ", "Group", group)
                    )
                    _raise(code, f"committing {t.name}-{p.partition_index}", needs, self.principal)

        await self.call(run)

    async def delete_group(self, group: str) -> None:
        async def run() -> None:
            _, conn = await self._coordinator(group)
            resp = await conn.request(ApiKey.DELETE_GROUPS, {"groups_names": [group]})
            for r in resp.results:
                _raise(
                    int(r.error_code), f"deleting group {r.group_id!r}",
                    Needs("DELETE", "Group", group), self.principal,
                )  # fmt: skip
            self._cache.groups = None

        await self.call(run)

    # -- security -------------------------------------------------------------------

    async def _request(self, api_key: int, body: dict[str, Any]) -> Any:
        return await self._client().request_any(api_key, body)

    async def list_users(self) -> dict[str, dict[str, int]]:
        async def run() -> dict[str, dict[str, int]]:
            resp = await self._request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None})
            needs = Needs("DESCRIBE", "Cluster", CLUSTER_NAME)
            _raise(
                int(resp.error_code),
                resp.error_message or "DescribeUserScramCredentials",
                needs,
                self.principal,
            )
            out: dict[str, dict[str, int]] = {}
            for r in resp.results:
                if int(r.error_code):
                    continue
                for info in r.credential_infos:
                    mech = ScramMechanisms.by_kafka_type(int(info.mechanism))
                    name = mech.mechanism_name if mech else f"mechanism {info.mechanism}"
                    out.setdefault(r.user, {})[name] = int(info.iterations)
            return dict(sorted(out.items()))

        return await self.call(run)

    async def upsert_user(self, user: str, password: str, mechanism: str, iterations: int) -> None:
        mech = ScramMechanisms.by_name(mechanism)
        if mech is None:
            raise ValueError(f"unknown mechanism {mechanism!r}")

        async def run() -> None:
            salt = secrets.token_bytes(32)
            salted = mech.hi(normalize_password(password), salt, iterations)
            body = {
                "deletions": [],
                "upsertions": [
                    {
                        "name": user,
                        "mechanism": mech.kafka_type,
                        "iterations": iterations,
                        "salt": salt,
                        "salted_password": salted,
                    }
                ],
            }
            resp = await self._request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
            for r in resp.results:
                _raise(
                    int(r.error_code),
                    r.error_message or f"user {user}",
                    Needs("ALTER", "Cluster", CLUSTER_NAME),
                    self.principal,
                )

        await self.call(run)

    async def delete_user(self, user: str) -> None:
        users = await self.list_users()

        async def run() -> None:
            mechs = [ScramMechanisms.by_name(m) for m in users.get(user, {})]
            if not mechs:
                raise ValueError(f"user {user!r} has no SCRAM credentials")
            body = {
                "deletions": [{"name": user, "mechanism": m.kafka_type} for m in mechs if m],
                "upsertions": [],
            }
            resp = await self._request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
            for r in resp.results:
                _raise(
                    int(r.error_code),
                    r.error_message or f"user {user}",
                    Needs("ALTER", "Cluster", CLUSTER_NAME),
                    self.principal,
                )

        await self.call(run)

    async def list_acls(self) -> list[AclRow]:
        async def run() -> list[AclRow]:
            body = {
                "resource_type_filter": int(ResourceType.ANY),
                "resource_name_filter": None,
                "pattern_type_filter": int(PatternType.ANY),
                "principal_filter": None,
                "host_filter": None,
                "operation": int(AclOperation.ANY),
                "permission_type": int(AclPermissionType.ANY),
            }
            resp = await self._request(ApiKey.DESCRIBE_ACLS, body)
            _raise(
                int(resp.error_code),
                resp.error_message or "DescribeAcls",
                Needs("DESCRIBE", "Cluster", CLUSTER_NAME),
                self.principal,
            )
            rows = [
                AclRow(
                    ResourceType(res.resource_type).name,
                    res.resource_name,
                    PatternType(res.pattern_type).name,
                    a.principal,
                    a.host,
                    AclOperation(a.operation).name,
                    AclPermissionType(a.permission_type).name,
                )
                for res in resp.resources
                for a in res.acls
            ]
            return sorted(
                rows, key=lambda r: (r.resource_type, r.resource_name, r.principal, r.operation)
            )

        return await self.call(run)

    async def create_acl(self, row: AclRow) -> None:
        async def run() -> None:
            creation = {
                "resource_type": int(ResourceType[row.resource_type]),
                "resource_name": row.resource_name,
                "resource_pattern_type": int(PatternType[row.pattern_type]),
                "principal": row.principal,
                "host": row.host,
                "operation": int(AclOperation[row.operation]),
                "permission_type": int(AclPermissionType[row.permission]),
            }
            resp = await self._request(ApiKey.CREATE_ACLS, {"creations": [creation]})
            for r in resp.results:
                _raise(
                    int(r.error_code),
                    r.error_message or "CreateAcls",
                    Needs("ALTER", "Cluster", CLUSTER_NAME),
                    self.principal,
                )

        await self.call(run)

    async def delete_acl(self, row: AclRow) -> int:
        async def run() -> int:
            f = {
                "resource_type_filter": int(ResourceType[row.resource_type]),
                "resource_name_filter": row.resource_name,
                "pattern_type_filter": int(PatternType[row.pattern_type]),
                "principal_filter": row.principal,
                "host_filter": row.host,
                "operation": int(AclOperation[row.operation]),
                "permission_type": int(AclPermissionType[row.permission]),
            }
            resp = await self._request(ApiKey.DELETE_ACLS, {"filters": [f]})
            removed = 0
            for r in resp.filter_results:
                _raise(
                    int(r.error_code),
                    r.error_message or "DeleteAcls",
                    Needs("ALTER", "Cluster", CLUSTER_NAME),
                    self.principal,
                )
                removed += len(r.matching_acls)
            return removed

        return await self.call(run)

    # -- operations --------------------------------------------------------------------

    async def reassignments(self) -> list[ReassignmentView]:
        async def run() -> list[ReassignmentView]:
            try:
                ongoing: dict[
                    TopicPartition, OngoingReassignment
                ] = await list_partition_reassignments(self._client())
            except KafkaError as exc:
                _raise(
                    exc.code, str(exc), Needs("DESCRIBE", "Cluster", CLUSTER_NAME), self.principal
                )
                raise
            if not ongoing:
                return []
            self._cache.log_dirs = None  # progress wants fresh sizes
            dirs = await self._log_dirs()
            snap = await self._snapshot(True)
            out: list[ReassignmentView] = []
            for tp, r in ongoing.items():
                meta = snap.topics.get(tp.topic)
                leader = (
                    meta.partitions[tp.partition].leader
                    if meta and tp.partition in meta.partitions
                    else -1
                )
                target = (
                    dirs.partition_size(tp.topic, tp.partition, leader) if leader >= 0 else None
                )
                moved_each = [dirs.partition_size(tp.topic, tp.partition, b) for b in r.adding]
                moved = min((m or 0 for m in moved_each), default=target)
                out.append(ReassignmentView(tp, r.replicas, r.adding, r.removing, target, moved))
            return out

        return await self.call(run)

    async def elect_preferred(self) -> dict[TopicPartition, PartitionResult]:
        async def run() -> dict[TopicPartition, PartitionResult]:
            try:
                result = await elect_leaders(self._client(), ElectionType.PREFERRED, None)
            except KafkaError as exc:
                _raise(exc.code, str(exc), Needs("ALTER", "Cluster", CLUSTER_NAME), self.principal)
                raise
            self.forget_metadata()
            return result

        return await self.call(run)

    async def transactions(self) -> list[TransactionListing]:
        async def run() -> list[TransactionListing]:
            try:
                return await self._admin().list_transactions()
            except KafkaError as exc:
                _raise(
                    exc.code, str(exc), Needs("DESCRIBE", "TransactionalId", "*"), self.principal
                )
                raise

        return await self.call(run)

    async def find_hanging(
        self, topic: str | None, max_timeout_ms: int
    ) -> list[tuple[TopicPartition, ProducerState]]:
        """Kafka's ``kafka-transactions find-hanging``: open transactions on the partitions'
        leaders older than ``max_timeout_ms`` that no coordinator still runs."""

        async def run() -> list[tuple[TopicPartition, ProducerState]]:
            snap = await self._snapshot(False)
            tps = [
                TopicPartition(name, p)
                for name, meta in snap.topics.items()
                if topic in (None, "", name) and not name.startswith("__")
                for p in sorted(meta.partitions)
            ]
            if not tps:
                return []
            now_ms = int(time.time() * 1000)
            described = await describe_producers(self._client(), tps)
            candidates = [
                (tp, s)
                for tp, result in described.items()
                if not result.error_code
                for s in result.producers
                if s.current_txn_start_offset >= 0 and now_ms - s.last_timestamp > max_timeout_ms
            ]
            if not candidates:
                return []
            admin = self._admin()
            listings = await admin.list_transactions(
                (), sorted({s.producer_id for _, s in candidates})
            )
            running: set[tuple[int, TopicPartition]] = set()
            for listing in listings:
                if listing.state != "Ongoing":
                    continue
                d = await admin.describe_transaction(listing.transactional_id)
                running.update((d.producer_id, TopicPartition(t, p)) for t, p in d.partitions)
            return [(tp, s) for tp, s in candidates if (s.producer_id, tp) not in running]

        return await self.call(run)

    async def abort_hanging(self, tp: TopicPartition, start_offset: int) -> ProducerState:
        async def run() -> ProducerState:
            cluster = self._client()
            (described,) = (await describe_producers(cluster, [tp])).values()
            if described.error_code:
                raise KafkaError(described.error_code, described.message)
            matching = [
                s for s in described.producers if s.current_txn_start_offset == start_offset
            ]
            if not matching:
                raise ValueError(
                    f"no open transaction starts at offset {start_offset} of "
                    f"{tp.topic}-{tp.partition}"
                )
            result = await abort_transaction(cluster, tp, matching[0])
            if not result.ok:
                _raise(
                    result.error_code,
                    result.message,
                    Needs("WRITE", "Topic", tp.topic),
                    self.principal,
                )
            return matching[0]

        return await self.call(run)

    # -- metrics -----------------------------------------------------------------------

    async def metrics_endpoints(self) -> dict[int, str | None]:
        """broker id -> its Prometheus endpoint (from ``headwater.metrics.listen``), cached."""
        cached = self._cache.metrics_endpoints
        if cached is not None and time.monotonic() - cached[0] < 60:
            return cached[1]
        snap = await self.snapshot()
        out: dict[int, str | None] = {}
        for broker_id, broker in snap.live.items():
            if broker_id in self.static_metrics:
                out[broker_id] = self.static_metrics[broker_id]
                continue
            try:
                configs = await self.broker_configs(broker_id)
            except (KafkaError, Denied, Unreachable):
                configs = {}
            value = (configs.get("headwater.metrics.listen") or (None, 0))[0]
            if value:
                host, _, port = value.rpartition(":")
                if host in ("", "0.0.0.0", "::", "[::]"):
                    host = broker.host
                out[broker_id] = f"http://{host}:{port}/metrics"
            else:
                out[broker_id] = None
        self._cache.metrics_endpoints = (time.monotonic(), out)
        return out

    async def scrape_metrics(self) -> dict[int, BrokerSeries]:
        """One scrape of every broker's /metrics, added to each broker's history."""
        endpoints = await self.metrics_endpoints()

        def fetch(url: str) -> str:
            with urllib.request.urlopen(url, timeout=3) as response:
                return str(response.read().decode())

        # One timestamp per round: the brokers' points share the charts' x values.
        at = time.time()

        async def one(broker_id: int, url: str | None) -> None:
            series = self.metrics.setdefault(broker_id, BrokerSeries(url))
            series.endpoint = url
            if url is None:
                series.error = "no headwater.metrics.listen on this broker"
                return
            try:
                text = await asyncio.to_thread(fetch, url)
                series.add(parse_sample(text, at))
            except Exception as exc:  # a dead broker's endpoint: the chart says so
                series.error = f"{url}: {exc}"

        await asyncio.gather(*(one(b, u) for b, u in endpoints.items()))
        return self.metrics


class _SharedAdmin(AsyncAdminClient):
    """``AsyncAdminClient`` over the console's own ``ClusterClient`` (one set of connections)."""

    def __init__(self, cluster: ClusterClient) -> None:
        self.request_timeout_ms = cluster.request_timeout_ms
        self._cluster = cluster

    async def close(self) -> None:  # the gateway owns the connections
        return None


def _metrics_url(value: str) -> str:
    """``HOST:PORT`` (or a full URL) of a broker's Prometheus endpoint as a URL."""
    if value.startswith(("http://", "https://")):
        return value
    return f"http://{value}/metrics"


def _matches(rec: ConsumerRecord, needle: bytes) -> bool:
    return (rec.key is not None and needle in rec.key) or (
        rec.value is not None and needle in rec.value
    )
