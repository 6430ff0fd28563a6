"""A follower's replica fetcher: copies one leader's partitions through one fetch session.

Kafka's ``ReplicaFetcherThread`` on asyncio, as a thin loop: ask the
:class:`~headwater.cluster.follower_fetch_state.FollowerFetchState` for a
request, send it through a :class:`~headwater.cluster.leader_endpoint.LeaderEndpoint`,
feed the response back, apply the decisions to the logs
(:func:`~headwater.cluster.follower_decisions.apply_decision`). Everything
that decides (sessions, offsets, epochs, divergence, out of range, backoff,
throttles) is in the state, which unit tests drive without a socket; this
module owns only the task, the waiting and the log listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from headwater.client.errors import KafkaConnectionError, KafkaError
from headwater.cluster.follower_decisions import AppendRecords, apply_decision
from headwater.cluster.follower_fetch_state import (
    FOLLOWER_FETCH_VERSION,
    FetcherConfig,
    FollowerFetchState,
    Idle,
    PartitionKey,
)
from headwater.cluster.inter_broker import InterBrokerConnector
from headwater.cluster.leader_endpoint import LeaderEndpoint, RemoteLeaderEndpoint
from headwater.cluster.partition import PartitionReplica
from headwater.cluster.replication_quota import ReplicationThrottles
from headwater.log.errors import KafkaApiError
from headwater.log.log import Log, LogEvent, LogListener

__all__ = ["FetcherConfig", "ReplicaFetcher"]

log = logging.getLogger(__name__)


class _TellsFetchState:
    """One followed log's listener: tells the fetch state that its log changed. A
    slotted object, not a closure: a closure per followed log cost about 290 bytes at
    50,000 partitions (issue 33), this about 50."""

    __slots__ = ("_key", "_state")

    def __init__(self, state: FollowerFetchState, key: PartitionKey) -> None:
        self._state = state
        self._key = key

    def __call__(self, _log: Log, _event: LogEvent) -> None:
        self._state.log_changed(self._key)


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
        endpoint: LeaderEndpoint | None = None,
    ) -> None:
        self.local_id = local_id
        self.leader_id = leader_id
        self.config = config
        self.on_progress = on_progress
        self.name = name or f"replica-fetcher-{leader_id}"
        self.state = FollowerFetchState(local_id, leader_id, config, throttles=throttles)
        self.endpoint: LeaderEndpoint = endpoint or RemoteLeaderEndpoint(connector, leader_id)
        self._listeners: dict[PartitionKey, LogListener] = {}
        self._task: asyncio.Task[None] | None = None
        #: Set when partitions come or go, to end an idle wait.
        self._changed = asyncio.Event()

    @property
    def partitions(self) -> dict[PartitionKey, PartitionReplica]:
        return self.state.partitions

    @property
    def fetches(self) -> int:
        return self.state.fetches

    # -- membership --------------------------------------------------------------

    def add(self, replica: PartitionReplica) -> None:
        key = replica.key
        self.remove(key)
        self.state.add(replica)
        self._changed.set()
        changed = _TellsFetchState(self.state, key)
        self._listeners[key] = changed
        replica.log.add_listener(changed)

    def remove(self, key: PartitionKey) -> None:
        replica = self.state.remove(key)
        listener = self._listeners.pop(key, None)
        if replica is not None and listener is not None:
            with contextlib.suppress(ValueError):
                replica.log.remove_listener(listener)
        self._changed.set()

    def __len__(self) -> int:
        return len(self.state)

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
        self.endpoint.close("replica fetcher stopped")

    async def _run(self) -> None:
        backoff = self.config.backoff_ms / 1000
        while True:
            try:
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except (KafkaConnectionError, KafkaError, OSError, TimeoutError) as exc:
                log.info("%s: %s; retrying in %d ms", self.name, exc, self.config.backoff_ms)
                self.state.on_error(exc)
                self.endpoint.close("fetch failed")
                await asyncio.sleep(backoff)
            except Exception:
                log.exception("%s failed; retrying", self.name)
                self.state.on_error()
                await asyncio.sleep(backoff)

    # -- one round trip ----------------------------------------------------------

    async def _fetch_once(self) -> None:
        state = self.state
        # Connect (and learn the Fetch version) only when a request may be due.
        version = (
            await self.endpoint.fetch_version() if state.needs_leader else FOLLOWER_FETCH_VERSION
        )
        request = state.next_request(time.monotonic(), version)
        if isinstance(request, Idle):
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(request.wait_s):
                    await self._changed.wait()
            return
        response = await self.endpoint.fetch(request)
        outcome = state.on_response(response, time.monotonic())
        if outcome.pause_s:
            await asyncio.sleep(outcome.pause_s)
            return
        now_ms = int(time.time() * 1000)
        for decision in outcome.decisions:
            replica = decision.replica
            try:
                apply_decision(decision, now_ms, who=self.name)
            except KafkaApiError as exc:
                log.warning(
                    "%s: cannot apply %s-%d from leader %d: %s",
                    self.name,
                    replica.topic,
                    replica.partition,
                    self.leader_id,
                    exc,
                )
                state.on_apply_error(replica, time.monotonic())
                continue
            if isinstance(decision, AppendRecords) and self.on_progress is not None:
                self.on_progress(replica)
