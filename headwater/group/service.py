"""The group coordinator on the broker's event loop.

Everything else in `headwater.group` is sans-I/O; this thin adapter is where
time and waiting happen. `handle` turns a delayed answer (a `Pending`) into an
awaited future; a background task calls each coordinator's `tick` when the
next timer is due (at least every `max_tick_interval_s`) so session expiry
and join-phase timeouts fire; `load_partition` replays an offsets partition
in steps, yielding to the loop, so a big partition does not stall the broker
(its groups get COORDINATOR_LOAD_IN_PROGRESS meanwhile); and a coordinator's
replication waits become tasks awaiting the broker's `wait_replicated`.

Wiring (the broker's `_build_group_apis`)::

    service = GroupService.create(partition_exists, num_partitions=n, node_id=...,
                                  host=..., port=..., coordinator_of=..., wait_replicated=...)
    await service.load_partition(p, offsets_log)   # became leader of partition p
    service.unload_partition(p)                    # no longer its leader
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.coordinator.replication import Replicated, replicated_at_once
from headwater.coordinator.state_log import StateLog
from headwater.group.apis import SUPPORTED_VERSIONS, CoordinatorOf, GroupApis, Response
from headwater.group.consumer_group_coordinator import ConsumerGroupConfig
from headwater.group.coordinator import GroupConfig, GroupCoordinator, random_member_id
from headwater.group.offsets import PartitionExists
from headwater.group.shards import CoordinatorShards
from headwater.group.topics_image import TopicsImage

log = logging.getLogger(__name__)

# (offsets partition, next offset after a write) -> error code once the write is
# on every in-sync replica (0), or why it will not be (NOT_LEADER_OR_FOLLOWER,
# NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT...).
WaitReplicated = Callable[[int, int], Awaitable[int]]

# Records applied per step of a load before yielding to the event loop: a step
# takes a few milliseconds (bench/bench_group_load.py), so requests keep flowing.
_LOAD_STEP = 500


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupService:
    """Serves the group APIs: `await service.handle(request, ...)` gives the response dict."""

    def __init__(
        self,
        apis: GroupApis,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
        wall_clock: Callable[[], int] = wall_clock_ms,
        max_tick_interval_s: float = 0.1,
        partition_exists: PartitionExists | None = None,
        config: GroupConfig | None = None,
        wait_replicated: WaitReplicated | None = None,
        member_id_factory: Callable[[str], str] = random_member_id,
        consumer_config: ConsumerGroupConfig | None = None,
        topics: TopicsImage | None = None,
    ) -> None:
        """`partition_exists` and `config` build the coordinators of loaded partitions;
        without `wait_replicated` every write counts as replicated at once.
        `consumer_config` and `topics` are the KIP-848 groups' settings and view."""
        self.apis = apis
        self.shards = apis.shards
        self._clock_ms = clock_ms
        self._wall_clock = wall_clock
        self._max_tick_interval_s = max_tick_interval_s
        self._partition_exists = partition_exists
        self._config = config
        self._wait_replicated = wait_replicated
        self._member_id_factory = member_id_factory
        self._consumer_config = consumer_config
        self._topics = topics
        self._ticker: asyncio.Task[None] | None = None
        self._waits: set[asyncio.Future[int]] = set()

    @classmethod
    def create(
        cls,
        partition_exists: PartitionExists,
        *,
        num_partitions: int,
        node_id: int,
        host: str,
        port: int,
        coordinator_of: CoordinatorOf | None = None,
        wait_replicated: WaitReplicated | None = None,
        config: GroupConfig | None = None,
        clock_ms: Callable[[], int] = monotonic_ms,
        wall_clock: Callable[[], int] = wall_clock_ms,
        max_tick_interval_s: float = 0.1,
        member_id_factory: Callable[[str], str] = random_member_id,
        consumer_config: ConsumerGroupConfig | None = None,
        topics: TopicsImage | None = None,
    ) -> GroupService:
        """A service over `num_partitions` offsets partitions, none loaded yet.

        `coordinator_of(partition)` names the partition's leader for
        FindCoordinator (None: COORDINATOR_NOT_AVAILABLE); by default this
        broker (`node_id`, `host`, `port`) leads every partition.
        """
        apis = GroupApis(
            CoordinatorShards(num_partitions),
            node_id=node_id,
            host=host,
            port=port,
            coordinator_of=coordinator_of,
        )
        return cls(
            apis,
            clock_ms=clock_ms,
            wall_clock=wall_clock,
            max_tick_interval_s=max_tick_interval_s,
            partition_exists=partition_exists,
            config=config,
            wait_replicated=wait_replicated,
            member_id_factory=member_id_factory,
            consumer_config=consumer_config,
            topics=topics,
        )

    @classmethod
    def open(
        cls,
        log: StateLog,
        partition_exists: PartitionExists,
        *,
        node_id: int,
        host: str,
        port: int,
        config: GroupConfig | None = None,
    ) -> GroupService:
        """One offsets partition holding every group, replayed now (the old layout)."""
        service = cls.create(
            partition_exists, num_partitions=1, node_id=node_id, host=host, port=port, config=config
        )
        service.load_partition_now(0, log)
        return service

    @staticmethod
    def handles(api_key: int) -> bool:
        return api_key in SUPPORTED_VERSIONS

    async def start(self) -> None:
        if self._ticker is None:
            self._ticker = asyncio.create_task(self._tick_forever(), name="group-coordinator-tick")

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        for wait in list(self._waits):
            wait.cancel()

    # ------------------------------------------------------------ leadership

    async def load_partition(self, partition: int, offsets_log: StateLog) -> None:
        """Become the coordinator of the partition's groups: replay it, then serve them.

        Its groups get COORDINATOR_LOAD_IN_PROGRESS until the replay ends. A
        partition already loaded or loading is left alone; an `unload_partition`
        during the replay abandons it. Other partitions' groups are untouched.
        """
        token = self.shards.begin_load(partition)
        if token is None:
            return
        try:
            coordinator = self._new_coordinator(partition, offsets_log)
            entries = offsets_log.replay()
            while self.shards.still_loading(token):
                step = list(itertools.islice(entries, _LOAD_STEP))
                if not step:
                    break
                coordinator.load(step, self._clock_ms())
                await asyncio.sleep(0)
        except BaseException:
            if self.shards.still_loading(token):
                self.shards.unload(partition)
            raise
        coordinator.finish_load(self._clock_ms())
        self.shards.finish_load(token, coordinator)

    def load_partition_now(self, partition: int, offsets_log: StateLog) -> None:
        """`load_partition` in one go, for start-up before any request is served."""
        token = self.shards.begin_load(partition)
        if token is None:
            return
        try:
            coordinator = self._new_coordinator(partition, offsets_log)
            coordinator.load(offsets_log.replay(), self._clock_ms())
            coordinator.finish_load(self._clock_ms())
        except BaseException:
            self.shards.unload(partition)
            raise
        self.shards.finish_load(token, coordinator)

    def unload_partition(self, partition: int) -> None:
        """Stop coordinating the partition's groups: they leave memory, and waiting
        JoinGroup/SyncGroup requests get NOT_COORDINATOR."""
        self.shards.unload(partition)

    def _new_coordinator(self, partition: int, offsets_log: StateLog) -> GroupCoordinator:
        if self._partition_exists is None:
            raise RuntimeError("this GroupService was built without partition_exists: use create()")
        return GroupCoordinator(
            offsets_log,
            self._partition_exists,
            now_ms=self._clock_ms(),
            config=self._config,
            member_id_factory=self._member_id_factory,
            replicated=self._replicated_hook(partition),
            replay=False,
            consumer_config=self._consumer_config,
            topics=self._topics,
        )

    def topics_changed(self) -> None:
        """Topics were created, deleted or grew: consumer groups re-evaluate their
        subscriptions (regexes included) and recompute their targets."""
        for coordinator in self.shards.coordinators():
            try:
                coordinator.consumer_groups.topics_changed()
            except Exception:  # one shard's failure must not stop the others
                log.exception("consumer group topic change failed")

    def _replicated_hook(self, partition: int) -> Replicated:
        wait_replicated = self._wait_replicated
        if wait_replicated is None:
            return replicated_at_once

        def replicated(offset: int) -> Pending[ErrorCode]:
            pending: Pending[ErrorCode] = Pending()
            try:
                task = asyncio.ensure_future(wait_replicated(partition, offset))
            except Exception:  # the coordinator is mid-operation: answer, do not raise
                log.exception("wait_replicated failed")
                pending.complete(ErrorCode.unknown_server_error)
                return pending
            self._waits.add(task)
            task.add_done_callback(lambda done: self._replication_done(done, pending))
            return pending

        return replicated

    def _replication_done(self, task: asyncio.Future[int], pending: Pending[ErrorCode]) -> None:
        self._waits.discard(task)
        if task.cancelled():
            error = ErrorCode.request_timed_out
        elif task.exception() is not None:
            log.error("wait_replicated failed", exc_info=task.exception())
            error = ErrorCode.unknown_server_error
        else:
            try:
                error = ErrorCode(task.result())
            except ValueError:
                log.error("wait_replicated returned unknown error code %r", task.result())
                error = ErrorCode.unknown_server_error
        try:
            pending.complete(error)
        except Exception:  # one group's bad callback must not break the others
            log.exception("answering after a replication wait failed")

    async def handle(
        self,
        request: object,
        *,
        client_id: str = "",
        client_host: str = "",
        waited: Callable[[float], None] | None = None,
    ) -> Response:
        """Answer a group API request, waiting as long as the protocol makes it wait.

        ``waited`` is told how many seconds the answer waited (a JoinGroup for
        the rebalance, a commit for its replication): Kafka's RemoteTimeMs.
        """
        pending = self.apis.handle(
            request,
            now_ms=self._clock_ms(),
            timestamp_ms=self._wall_clock(),
            client_id=client_id,
            client_host=client_host,
        )
        if pending.done:
            return pending.result()
        if waited is None:
            return await _awaitable(pending)
        started = time.perf_counter()
        try:
            return await _awaitable(pending)
        finally:
            waited(time.perf_counter() - started)

    async def _tick_forever(self) -> None:
        while True:
            now = self._clock_ms()
            for coordinator in self.shards.coordinators():
                try:
                    coordinator.tick(now)
                except Exception:  # one bad timer must not stop every group's timers
                    log.exception("group coordinator tick failed")
            deadline = self.shards.next_deadline_ms()
            delay = self._max_tick_interval_s
            if deadline is not None:
                delay = min(delay, max(deadline - now, 1) / 1000)
            await asyncio.sleep(delay)


def _awaitable(pending: Pending[Response]) -> asyncio.Future[Response]:
    """A future completed with the pending's value (unless its waiter gave up)."""
    future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

    def resolve(value: Response) -> None:
        if not future.done():  # cancelled when the client's connection went away
            future.set_result(value)

    pending.on_done(resolve)
    return future
