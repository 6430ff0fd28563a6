"""A follower's replica fetcher: copies one leader's partitions through one fetch session.

Kafka's ``ReplicaFetcherThread`` on asyncio, built on Headwater's own client:
the same ``FetchSessionHandler`` that consumers use keeps one KIP-227
incremental session with the leader, so a follower of thousands of idle
partitions sends and receives a few dozen bytes per round trip. The leader
sees ``replica_id >= 0`` and makes the session *privileged* in its cache.

Per partition the fetcher sends its log end as the fetch offset, the leader
epoch it believes in, and the epoch of its last record (``last_fetched_epoch``,
Fetch v12); the leader answers records to append as they are (offsets and
epochs kept), its high watermark, or, when the logs diverged after a leader
change, the point to truncate to (Kafka's truncation on fetch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from headwater.client.connection import BrokerConnection
from headwater.client.errors import KafkaConnectionError, KafkaError
from headwater.client.session_handler import FetchSessionHandler
from headwater.cluster.inter_broker import InterBrokerConnector
from headwater.cluster.partition import PartitionReplica
from headwater.cluster.replication_quota import ReplicationThrottles
from headwater.log.errors import KafkaApiError
from headwater.log.log import Log, LogEvent, LogListener
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_types import ZERO_UUID, PartitionData, PartitionFetch
from headwater.records.batch import LOG_OVERHEAD

log = logging.getLogger(__name__)

#: A new leader answers these until it has applied the state ZooKeeper just
#: gave both of us (the watches fire together): retry soon, a few times, rather
#: than after replica.fetch.backoff.ms, which added up to a second to failover.
LEADER_CATCHING_UP = (ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch)
CATCH_UP_RETRY_S = 0.05
CATCH_UP_RETRIES = 10
#: Fetch v12: the last version that names topics (followers here fetch by name)
#: and the first with last_fetched_epoch / diverging epochs.
FOLLOWER_FETCH_VERSION = 12

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """Kafka's ``replica.fetch.*`` settings."""

    max_bytes: int = 1_048_576  # replica.fetch.max.bytes (per partition)
    response_max_bytes: int = 10_485_760  # replica.fetch.response.max.bytes
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    sessions: bool = True  # headwater.replica.fetch.sessions.enable


def complete_batches(data: bytes | memoryview) -> memoryview:
    """The prefix of ``data`` made of whole record batches.

    A leader may cut its last batch at the response size limit (Kafka does);
    a follower appends only whole batches and fetches the rest next time.
    """
    view = memoryview(data)
    pos = 0
    end = len(data)
    while pos + LOG_OVERHEAD <= end:
        length = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        if length <= 0 or pos + LOG_OVERHEAD + length > end:
            break
        pos += LOG_OVERHEAD + length
    return view[:pos]


class ReplicaFetcher:
    """Fetches the partitions this broker follows on ``leader_id``."""

    def __init__(
        self,
        local_id: int,
        leader_id: int,
        connector: InterBrokerConnector,
        config: FetcherConfig,
        *,
        on_progress: Callable[[PartitionReplica], None] | None = None,
        name: str = "",
        throttles: ReplicationThrottles | None = None,
    ) -> None:
        self.local_id = local_id
        self.leader_id = leader_id
        self.connector = connector
        self.config = config
        self.on_progress = on_progress
        self.throttles = throttles
        self.name = name or f"replica-fetcher-{leader_id}"
        self.partitions: dict[PartitionKey, PartitionReplica] = {}
        self._delayed: dict[PartitionKey, float] = {}
        #: Quick retries spent per partition on a leader still catching up.
        self._quick_retries: dict[PartitionKey, int] = {}
        #: The last PartitionFetch built per partition, dropped when its log changes:
        #: an idle partition costs no rebuilding, and the session handler sees
        #: the same object (nothing to resend) without comparing fields.
        self._requests: dict[PartitionKey, PartitionFetch] = {}
        self._listeners: dict[PartitionKey, LogListener] = {}
        self._session = FetchSessionHandler(leader_id, enabled=config.sessions)
        self._conn: BrokerConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self.fetches = 0

    # -- membership --------------------------------------------------------------

    def add(self, replica: PartitionReplica) -> None:
        key = replica.key
        self.remove(key)
        self.partitions[key] = replica
        self._changed.set()

        def changed(_log: Log, _event: LogEvent) -> None:
            self._requests.pop(key, None)

        self._listeners[key] = changed
        replica.log.add_listener(changed)

    def remove(self, key: PartitionKey) -> None:
        replica = self.partitions.pop(key, None)
        self._delayed.pop(key, None)
        self._quick_retries.pop(key, None)
        self._requests.pop(key, None)
        listener = self._listeners.pop(key, None)
        if replica is not None and listener is not None:
            with contextlib.suppress(ValueError):
                replica.log.remove_listener(listener)
        self._changed.set()

    def __len__(self) -> int:
        return len(self.partitions)

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._conn is not None:
            self._conn.close("replica fetcher stopped")
            self._conn = None

    async def _run(self) -> None:
        while True:
            try:
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except (KafkaConnectionError, KafkaError, OSError, TimeoutError) as exc:
                log.info("%s: %s; retrying in %d ms", self.name, exc, self.config.backoff_ms)
                self._session.handle_error(exc)
                if self._conn is not None:
                    self._conn.close("fetch failed")
                    self._conn = None
                await asyncio.sleep(self.config.backoff_ms / 1000)
            except Exception:
                log.exception("%s failed; retrying", self.name)
                self._session.handle_error()
                await asyncio.sleep(self.config.backoff_ms / 1000)

    async def _connection(self) -> BrokerConnection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        self._conn = await self.connector.open(self.leader_id, "replica")
        return self._conn

    # -- one round trip ----------------------------------------------------------

    def _wanted(self, now: float) -> list[PartitionFetch]:
        wanted: list[PartitionFetch] = []
        delayed = self._delayed
        requests = self._requests
        throttles = self.throttles
        # KIP-73: over the follower budget, throttled replicas that are not in
        # the ISR sit out (until the backoff) and the rest fetch on.
        over_budget = (
            throttles is not None
            and throttles.follower.enabled
            and throttles.follower.exceeded(now * 1000)
        )
        for key, replica in self.partitions.items():
            if delayed:
                until = delayed.get(key)
                if until is not None:
                    if until > now:
                        continue
                    del delayed[key]
            if (
                over_budget
                and throttles is not None
                and self.local_id not in replica.isr
                and throttles.follower_throttled(*key)
            ):
                self._delay(key)
                continue
            request = requests.get(key)
            if request is None or request.current_leader_epoch != replica.leader_epoch:
                plog = replica.log
                request = requests[key] = PartitionFetch(
                    topic_id=ZERO_UUID,
                    topic=replica.topic,
                    partition=replica.partition,
                    fetch_offset=plog.log_end_offset,
                    log_start_offset=plog.log_start_offset,
                    partition_max_bytes=self.config.max_bytes,
                    current_leader_epoch=replica.leader_epoch,
                    last_fetched_epoch=plog.latest_epoch,
                )
            wanted.append(request)
        return wanted

    async def _fetch_once(self) -> None:
        wanted = self._wanted(time.monotonic())
        if not wanted and not self._session.session_partitions:
            self._changed.clear()
            wait = self._until_next_retry() if self._delayed else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)
            return
        conn = await self._connection()
        version = conn.version(1, FOLLOWER_FETCH_VERSION)
        max_wait_ms = self.config.max_wait_ms
        if self._quick_retries and self._delayed:
            # Do not long-poll past a quick retry that is due.
            max_wait_ms = min(max_wait_ms, max(10, int(self._until_next_retry() * 1000)))
        req = self._session.build(
            wanted,
            version=version,
            max_wait_ms=max_wait_ms,
            min_bytes=self.config.min_bytes,
            max_bytes=self.config.response_max_bytes,
        )
        req.replica_id = self.local_id
        # Records as views into the response frame: the follower writes the
        # leader's bytes as they came, with no copy on the way.
        response = await conn.fetch(req, record_views=True)
        self.fetches += 1
        if not self._session.handle_response(response):
            if response.error_code:
                await asyncio.sleep(self.config.backoff_ms / 1000)
            return
        throttles = self.throttles
        for data in response.partitions:
            replica = self.partitions.get((data.topic, data.partition))
            if replica is None or replica.leader != self.leader_id:
                continue
            if (
                throttles is not None
                and throttles.follower.enabled
                and throttles.follower_throttled(data.topic, data.partition)
            ):
                throttles.follower.record(data.records_size, time.monotonic() * 1000)
            try:
                self._apply(replica, data)
            except KafkaApiError as exc:
                log.warning(
                    "%s: cannot apply %s-%d from leader %d: %s",
                    self.name,
                    data.topic,
                    data.partition,
                    self.leader_id,
                    exc,
                )
                self._delay(replica.key)

    def _delay(self, key: PartitionKey, error: int = 0) -> None:
        backoff = self.config.backoff_ms / 1000
        if error in LEADER_CATCHING_UP:
            spent = self._quick_retries.get(key, 0)
            if spent < CATCH_UP_RETRIES:
                self._quick_retries[key] = spent + 1
                backoff = min(backoff, CATCH_UP_RETRY_S)
        self._delayed[key] = time.monotonic() + backoff

    def _until_next_retry(self) -> float:
        return max(0.0, min(self._delayed.values()) - time.monotonic())

    def _apply(self, replica: PartitionReplica, data: PartitionData) -> None:
        plog = replica.log
        if data.error_code == ErrorCode.offset_out_of_range:
            self._out_of_range(replica, data)
            return
        if data.error_code:
            # NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH...: ZooKeeper
            # will tell us who leads now; until then, do not hammer this one.
            log.debug("%s: %s-%d error %d", self.name, data.topic, data.partition, data.error_code)
            self._delay(replica.key, data.error_code)
            return
        self._quick_retries.pop(replica.key, None)
        if data.diverging_epoch >= 0:
            self._truncate_on_divergence(replica, data.diverging_epoch, data.diverging_end_offset)
            return
        records = data.records
        if isinstance(records, (bytes, memoryview)) and records:
            whole = complete_batches(records)
            if len(whole):
                plog.append_as_follower(whole, int(time.time() * 1000))
        if data.high_watermark >= 0:
            plog.update_high_watermark(min(data.high_watermark, plog.log_end_offset))
        # After the high watermark, as Kafka's fetcher does: the log start may not
        # pass it, and the leader sends a new log start only once.
        if data.log_start_offset > plog.log_start_offset:
            with contextlib.suppress(KafkaApiError):
                plog.delete_records(min(data.log_start_offset, plog.log_end_offset))
        if self.on_progress is not None:
            self.on_progress(replica)

    def _truncate_on_divergence(self, replica: PartitionReplica, epoch: int, end: int) -> None:
        """Cut our log back to where it agrees with the leader's (KIP-595/KIP-320).

        The leader names the largest epoch both may share and where it ends
        on the leader; our copy of that epoch may end earlier, so we keep
        the smaller of the two ends.
        """
        plog = replica.log
        ours_epoch, ours_end = plog.end_offset_for_epoch(epoch)
        target = end if ours_epoch != epoch or ours_end < 0 else min(end, ours_end)
        target = max(min(target, plog.log_end_offset), 0)
        log.info(
            "%s: %s-%d diverged from leader %d at epoch %d; truncating %d -> %d",
            self.name,
            replica.topic,
            replica.partition,
            self.leader_id,
            epoch,
            plog.log_end_offset,
            target,
        )
        plog.truncate_to(target)
        # A truncation at our log end changes only the epoch history (an epoch
        # we led without writing is dropped): no log listener fires, so the
        # cached request would name that epoch again, get the same divergence
        # answer and loop forever, never fetching (seen in the fault campaign).
        self._requests.pop(replica.key, None)

    def _out_of_range(self, replica: PartitionReplica, data: PartitionData) -> None:
        """Our fetch offset is outside the leader's log.

        Below the leader's log start (retention moved on): start over there.
        Above its end (we hold records it never had and no epoch told us
        where to cut): truncate to its high watermark, which it surely has.
        """
        plog = replica.log
        offset = plog.log_end_offset
        if data.log_start_offset >= 0 and offset < data.log_start_offset:
            log.info(
                "%s: %s-%d fell behind the leader's log start %d; starting over there",
                self.name,
                replica.topic,
                replica.partition,
                data.log_start_offset,
            )
            plog.truncate_fully_and_start_at(data.log_start_offset)
        elif data.high_watermark >= 0 and offset > data.high_watermark:
            log.info(
                "%s: %s-%d is ahead of the leader; truncating %d -> %d",
                self.name,
                replica.topic,
                replica.partition,
                offset,
                data.high_watermark,
            )
            plog.truncate_to(data.high_watermark)
        else:
            self._delay(replica.key)
