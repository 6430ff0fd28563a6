"""Fetch: the broker side of the chapter's pull mechanism.

decode -> fetch-session context (KIP-227) -> planner (KIP-74 limits,
isolation) -> long-poll in the purgatory if fewer than ``min_bytes`` are
ready -> re-read at completion -> encode with ``FileSlice`` parts that the
connection sends by ``sendfile``.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Generator

from headwater.broker.config import BrokerConfig
from headwater.broker.connection import RequestContext
from headwater.broker.cooperative import BackgroundSteps, sliced
from headwater.broker.metrics import BrokerMetrics
from headwater.cluster.replica_manager import ReplicaManager
from headwater.fetch.contexts import FetchContext, new_fetch_context
from headwater.fetch.params import FetchParams
from headwater.fetch.planner import FetchResult, read_partitions_steps
from headwater.fetch.purgatory import FetchPurgatory, SessionPartitionWatcher
from headwater.fetch.session_cache import FetchSessionCache
from headwater.gc_policy import COLLECTOR
from headwater.log.log_directory import LogDirectory
from headwater.protocol.fetch_codec import (
    EncodedBody,
    decode_fetch_request,
    decode_fetch_request_steps,
    encode_fetch_response,
    encode_fetch_response_steps,
)
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchRequestData,
    FetchResponseData,
    PartitionFetch,
)
from headwater.protocol.file_slice import FileSlice
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from headwater.security.quotas import QuotaKey
from headwater.steps import drain

#: Each record slice in a response keeps its segment file open until sent. A
#: response carrying data from tens of thousands of partitions would hold as
#: many files open (and two such responses exhausted the fd limit in the
#: fetch-session benchmark); past this many slices, data is copied instead.
MAX_OPEN_SLICES_PER_RESPONSE = 2048

#: Requests at least this large are decoded in time slices (about 10,000
#: partitions); smaller ones at once, as before.
LARGE_REQUEST_BYTES = 256 * 1024
RESOLVE_STEP = 4096


#: Partitions of a response walked between two yields of ``bound_open_files_steps``.
BOUND_STEP = 2048


def bound_open_files(response: FetchResponseData, limit: int) -> int:
    """Copy record slices past the first ``limit`` into memory; returns how many."""
    copied, _ = drain(bound_open_files_steps(response, limit))
    return copied


def bound_open_files_steps(
    response: FetchResponseData, limit: int, sent_per_topic: dict[str, int] | None = None
) -> Generator[None, None, tuple[int, int]]:
    """:func:`bound_open_files` in steps, also summing the record bytes sent:
    (slices copied, bytes), and per topic into ``sent_per_topic`` if given.
    One pass, in slices, over a 100,000-partition answer."""
    pinned = copied = sent = 0
    for n, part in enumerate(response.partitions, 1):
        size = part.records_size
        if size:
            sent += size
            if sent_per_topic is not None:
                sent_per_topic[part.topic] = sent_per_topic.get(part.topic, 0) + size
        if isinstance(part.records, FileSlice):
            pinned += 1
            if pinned > limit:
                part.records = part.records.read()
                copied += 1
                yield None  # a read from disk: a step of its own
                continue
        if n % BOUND_STEP == 0:
            yield None
    return copied, sent


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class FetchApi:
    def __init__(
        self,
        config: BrokerConfig,
        logs: LogDirectory,
        sessions: FetchSessionCache,
        purgatory: FetchPurgatory,
        metrics: BrokerMetrics,
        replication: ReplicaManager,
    ) -> None:
        self.config = config
        self.logs = logs
        self.sessions = sessions
        self.purgatory = purgatory
        self.metrics = metrics
        self.replication = replication
        #: Closed sessions' partitions are unwatched here, in slices.
        self.background = BackgroundSteps()
        self.watcher = SessionPartitionWatcher(logs.existing_log, background=self.background)

    def _topic_id_of(self, topic: str) -> uuid.UUID:
        info = self.logs.topics().get(topic)
        return info.topic_id if info is not None else ZERO_UUID

    def _resolve_names(self, req: FetchRequestData) -> None:
        """v13+ addresses topics by id: fill in names; unknown ids keep ''."""
        drain(self._resolve_names_steps(req))

    def _resolve_names_steps(self, req: FetchRequestData) -> Generator[None, None, None]:
        if not req.uses_topic_ids:
            return
        names: dict[object, str] = {}
        for n, p in enumerate(req.partitions, 1):
            if n % RESOLVE_STEP == 0:
                yield None
            name = names.get(p.topic_id)
            if name is None:
                info = self.logs.topic_by_id(p.topic_id)
                name = names[p.topic_id] = info.name if info is not None else ""
            p.topic = name
        for i, f in enumerate(req.forgotten):
            info = self.logs.topic_by_id(f.topic_id)
            if info is not None:
                req.forgotten[i] = f._replace(topic=info.name)

    def handle(self, ctx: RequestContext, frame: memoryview, offset: int) -> Awaitable[EncodedBody]:
        version = ctx.header.api_version
        if len(frame) - offset >= LARGE_REQUEST_BYTES:
            return self._handle_large(ctx, bytes(frame), offset, version)
        return self._start(ctx, decode_fetch_request(frame, offset, version), len(frame))

    async def _handle_large(
        self, ctx: RequestContext, frame: bytes, offset: int, version: int
    ) -> EncodedBody:
        """Decode in time slices (the frame is a copy: its buffer may be reused meanwhile).

        A request this large holds one object per partition from decoding to
        encoding: no full collection may walk them in between (gc_policy).
        """
        with COLLECTOR.heavy():
            req = await sliced(decode_fetch_request_steps(frame, offset, version))
            await sliced(self._resolve_names_steps(req))
            return await self._start(ctx, req, len(frame), names_resolved=True)

    def _start(
        self,
        ctx: RequestContext,
        req: FetchRequestData,
        frame_size: int,
        *,
        names_resolved: bool = False,
    ) -> Awaitable[EncodedBody]:
        self.metrics.fetch_request_bytes.inc(frame_size + 4)
        if not names_resolved:
            self._resolve_names(req)
        role: _FetcherRole
        if req.replica_id >= 0:
            role = _FollowerRole(req.replica_id, self.replication, self.metrics)
            ctx.request_quota_exempt = True
        else:
            role = _ConsumerRole(ctx, self.replication, self.metrics, req)
            ctx.request_quota_exempt = False
            # Consumer byte-rate quota: at most one quota window per response (Kafka).
            limit = ctx.quota_window_bytes(QuotaKey.CONSUMER_BYTE_RATE)
            if limit is not None and (req.max_bytes <= 0 or req.max_bytes > limit):
                req.max_bytes = limit
        params = FetchParams.of(req, self.config.fetch_max_bytes)
        return self._fetch(
            req,
            params,
            role,
            role.authorization(ctx),
            str(ctx.principal),
            ctx.client_host.rsplit(":", 1)[0],
            ctx,
        )

    def serve_follower(self, req: FetchRequestData) -> Awaitable[EncodedBody]:
        """A follower's fetch without a connection (no ACLs, no quota): how unit
        tests drive the leader side of replication."""
        role = _FollowerRole(req.replica_id, self.replication, self.metrics)
        return self._fetch(req, FetchParams.of(req, self.config.fetch_max_bytes), role)

    async def _read(
        self,
        params: FetchParams,
        role: _FetcherRole,
        partitions: list[PartitionFetch],
        authorized: Callable[[str], bool] | None = None,
    ) -> FetchResult:
        """Read in time slices: 100,000 partitions must not stall other clients."""
        result = await sliced(
            read_partitions_steps(
                partitions,
                self.logs.existing_log,
                max_bytes=params.max_bytes,
                isolation=params.isolation,
                topic_id_of=self._topic_id_of,
                aborted_list=params.wants_aborted_transactions,
                serving=role.serving,
                authorized=authorized,
                redirect=role.redirect,
                follower_read=role.follower_read,
            )
        )
        self.metrics.fetch_partitions_read.inc(len(partitions))
        role.after_read(partitions, result)
        return result

    async def _fetch(
        self,
        req: FetchRequestData,
        params: FetchParams,
        role: _FetcherRole,
        authorized: Callable[[str], bool] | None = None,
        owner: str = "",
        client: str = "",
        request: RequestContext | None = None,
    ) -> EncodedBody:
        now = _now_ms()
        # Sessions belong to the principal that created them (beyond KIP-227);
        # the client address counts against its per-address slot limit.
        ctx: FetchContext = new_fetch_context(
            self.sessions, req, now, self.watcher, client=client, owner=owner
        )
        if ctx.error_code:
            return self._encode(
                FetchResponseData(error_code=ctx.error_code, session_id=0), params.version
            )
        throttled = role.throttled_now()
        if throttled:
            empty = ctx.update_and_generate_response([], now)
            empty.throttle_time_ms = throttled
            return self._encode(empty, params.version)
        # A full fetch that creates a session adds and watches its partitions
        # before reading them, in slices (a no-op for other contexts).
        await sliced(ctx.prepare_steps(now))
        to_read = await sliced(ctx.partitions_to_read_steps())
        result = await self._read(params, role, to_read, authorized)
        if not self._ready(params, req, result, ctx):
            waiting = time.perf_counter()
            deadline = now + params.max_wait_ms
            async with self.purgatory.watch(ctx, to_read, self.logs.existing_log) as waiter:
                while not self._ready(params, req, result, ctx) and not ctx.completion_error():
                    remaining = deadline - _now_ms()
                    if remaining <= 0 or not await waiter.wait(remaining / 1000):
                        break
                    # Re-read at completion (the chapter's DelayedFetch.onComplete):
                    # more data may have arrived since the wake-up. A partition made
                    # pending meanwhile (a follower outside the ISR is asked where
                    # it is) is read here, not at the start.
                    to_read = await sliced(ctx.partitions_to_read_steps())
                    result = await self._read(params, role, to_read, authorized)
            if request is not None:
                request.remote_seconds += time.perf_counter() - waiting
        response = await sliced(ctx.respond_steps(result.partitions, _now_ms()))
        per_topic: dict[str, int] | None = None if params.is_follower else {}
        _, sent = await sliced(
            bound_open_files_steps(response, MAX_OPEN_SLICES_PER_RESPONSE, per_topic)
        )
        self.metrics.bytes_out.inc(sent)
        role.sent(response, sent, per_topic or {})
        return await self._encode_sliced(response, params.version)

    @staticmethod
    def _ready(
        params: FetchParams, req: FetchRequestData, result: FetchResult, ctx: FetchContext
    ) -> bool:
        if params.max_wait_ms <= 0 or result.has_error or result.redirected:
            return True
        if result.bytes_read >= max(1, params.min_bytes):
            return True
        # A sessionless or full fetch that names no partitions has nothing to wait for;
        # an incremental one waits on its session (its partitions are cached).
        return ctx.session is None and not req.partitions

    def _encode(self, response: FetchResponseData, version: int) -> EncodedBody:
        body = encode_fetch_response(response, version)
        self.metrics.fetch_response_bytes.inc(body.size + 4)
        return body

    async def _encode_sliced(self, response: FetchResponseData, version: int) -> EncodedBody:
        body = await sliced(encode_fetch_response_steps(response, version))
        self.metrics.fetch_response_bytes.inc(body.size + 4)
        return body


#: The first Fetch version with client metadata (KIP-392's ``rack_id``): from it on a
#: consumer may read from followers, as Kafka's ``fetchOnlyLeader`` allows.
FOLLOWER_FETCH_VERSION = 11


class _ConsumerRole:
    """A consumer's fetch: READ on each topic, the byte-rate quota. Before Fetch v11
    only a partition's leader serves it; from v11 any replica does (KIP-392), up to
    the high watermark it knows, and a leader with a replica selector may send a
    consumer with a rack to an in-sync replica in that rack."""

    def __init__(
        self,
        ctx: RequestContext,
        replication: ReplicaManager,
        metrics: BrokerMetrics,
        req: FetchRequestData,
    ) -> None:
        self._ctx = ctx
        self._metrics = metrics
        self.serving: Callable[[str, int], int] = replication.serving_error
        self.redirect: Callable[[str, int, int], int] | None = None
        self.follower_read: Callable[[str, int], bool] | None = None
        if req.version >= FOLLOWER_FETCH_VERSION:
            self.serving = replication.consumer_serving_error
            self.follower_read = replication.serves_as_follower
            if req.rack_id and replication.config.replica_selector is not None:
                self.redirect = functools.partial(
                    replication.preferred_read_replica, client_rack=req.rack_id
                )

    def authorization(self, ctx: RequestContext) -> Callable[[str], bool] | None:
        """None with ACLs off, so the planner's per-partition loop pays nothing."""
        if not ctx.security.authorizer.enabled:
            return None
        return ctx.topic_check(AclOperation.READ)

    def throttled_now(self) -> int:
        """A client already over its quota gets an empty, throttled answer at once."""
        ctx = self._ctx
        throttled = ctx.throttled_now(QuotaKey.CONSUMER_BYTE_RATE)
        return max(throttled, ctx.request_throttle_ms()) if throttled else 0

    def after_read(self, read: list[PartitionFetch], result: FetchResult) -> None:
        pass

    def sent(self, response: FetchResponseData, sent: int, per_topic: dict[str, int]) -> None:
        for topic, size in per_topic.items():
            self._metrics.topics.fetched(topic, size)
        ctx = self._ctx
        response.throttle_time_ms = max(
            ctx.throttle(QuotaKey.CONSUMER_BYTE_RATE, sent), ctx.request_throttle_ms()
        )


class _FollowerRole:
    """A follower's fetch (replica id >= 0): CLUSTER_ACTION, no quota, reads to the
    log end; its fetch offsets move the leader's high watermark and ISR, and the
    KIP-73 leader throttle applies to replicas outside the ISR."""

    def __init__(self, replica_id: int, replication: ReplicaManager, metrics: BrokerMetrics):
        self._replica_id = replica_id
        self._replication = replication
        self._metrics = metrics
        self.serving: Callable[[str, int], int] = functools.partial(
            replication.follower_serving_error, replica_id
        )
        self.redirect: Callable[[str, int, int], int] | None = None
        self.follower_read: Callable[[str, int], bool] | None = None

    def authorization(self, ctx: RequestContext) -> Callable[[str], bool] | None:
        if not ctx.security.authorizer.enabled:
            return None
        allowed = ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        return lambda _topic: allowed

    def throttled_now(self) -> int:
        return 0

    def after_read(self, read: list[PartitionFetch], result: FetchResult) -> None:
        """What the follower has (each fetch offset) moves the high watermark and the
        ISR. An incremental fetch reads only what is pending, so this is O(changed).
        As in Kafka, a partition whose log diverged (or that erred) tells nothing
        about the follower yet."""
        self._leader_throttle(result)
        self._replication.on_follower_fetch(
            self._replica_id,
            [
                p
                for p, data in zip(read, result.partitions, strict=True)
                if not data.error_code and data.diverging_epoch < 0
            ],
        )

    def _leader_throttle(self, result: FetchResult) -> None:
        """KIP-73, leader side: over ``leader.replication.throttled.rate``, a throttled
        replica outside the ISR gets no records (and they count for nothing toward
        ``min_bytes``, so the fetch waits as if there were none)."""
        replication = self._replication
        throttles = replication.throttles
        if not throttles.leader.enabled or not throttles.leader.exceeded(time.monotonic() * 1000):
            return
        for data in result.partitions:
            size = data.records_size
            if not size or not throttles.leader_throttled(data.topic, data.partition):
                continue
            replica = replication.replicas.get((data.topic, data.partition))
            if replica is not None and self._replica_id in replica.isr:
                continue
            data.records = None
            result.bytes_read -= size

    def sent(self, response: FetchResponseData, sent: int, per_topic: dict[str, int]) -> None:
        """Replication bytes; those of throttled replicas use up the leader's budget.
        The high watermarks sent are what the follower may serve consumers (KIP-392)."""
        self._metrics.topics.replication_bytes_out += sent
        self._replication.on_follower_response(self._replica_id, response.partitions)
        throttles = self._replication.throttles
        if not throttles.leader.enabled:
            return
        throttled = sum(
            p.records_size
            for p in response.partitions
            if p.records_size and throttles.leader_throttled(p.topic, p.partition)
        )
        throttles.leader.record(throttled, time.monotonic() * 1000)


_FetcherRole = _ConsumerRole | _FollowerRole
