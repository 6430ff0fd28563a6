"""The group coordinator on the broker's event loop.

Everything else in `headwater.group` is sans-I/O; this thin adapter is where
time and waiting happen. `handle` turns a delayed JoinGroup/SyncGroup answer
(a `Pending`) into an awaited future, and a background task calls
`GroupCoordinator.tick` when the next timer is due (at least every
`max_tick_interval_s`) so session expiry and join-phase timeouts fire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from headwater.group.apis import SUPPORTED_VERSIONS, GroupApis, Response
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.group.offsets import PartitionExists
from headwater.group.pending import Pending
from headwater.group.storage import OffsetsLog

log = logging.getLogger(__name__)


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
    ) -> None:
        self.apis = apis
        self.coordinator = apis.coordinator
        self._clock_ms = clock_ms
        self._wall_clock = wall_clock
        self._max_tick_interval_s = max_tick_interval_s
        self._ticker: asyncio.Task[None] | None = None

    @classmethod
    def open(
        cls,
        log: OffsetsLog,
        partition_exists: PartitionExists,
        *,
        node_id: int,
        host: str,
        port: int,
        config: GroupConfig | None = None,
    ) -> GroupService:
        """Replay the offsets log into a new coordinator and wrap it."""
        coordinator = GroupCoordinator(log, partition_exists, now_ms=monotonic_ms(), config=config)
        return cls(GroupApis(coordinator, node_id=node_id, host=host, port=port))

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

    async def handle(
        self, request: object, *, client_id: str = "", client_host: str = ""
    ) -> Response:
        """Answer a group API request, waiting as long as the protocol makes it wait."""
        pending = self.apis.handle(
            request,
            now_ms=self._clock_ms(),
            timestamp_ms=self._wall_clock(),
            client_id=client_id,
            client_host=client_host,
        )
        if pending.done:
            return pending.result()
        return await _awaitable(pending)

    async def _tick_forever(self) -> None:
        while True:
            now = self._clock_ms()
            try:
                self.coordinator.tick(now)
            except Exception:  # one bad timer must not stop every group's timers
                log.exception("group coordinator tick failed")
            deadline = self.coordinator.next_deadline_ms()
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
