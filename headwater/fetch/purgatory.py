"""The fetch purgatory: where a fetch with fewer than ``min_bytes`` waits.

Kafka parks a ``DelayedFetch`` keyed by every partition it reads and checks
it after each append. Headwater does the same for sessionless and full
fetches (a listener on each partition's log), but an incremental fetch
waits on its *session's* change signal instead: the session already hears
about every change to its partitions, so a parked fetch on a 100,000
partition session costs one waiter, not 100,000 listeners.

This is the only part of ``headwater.fetch`` that touches asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from headwater.fetch.session import FetchSession
from headwater.fetch.types import PartitionFetch, TopicIdPartition
from headwater.log.log import Log


class _Context(Protocol):
    def add_change_listener(self, listener: Callable[[], None]) -> bool: ...
    def remove_change_listener(self, listener: Callable[[], None]) -> None: ...


class FetchWaiter:
    """Woken by a change; ``wait`` reports whether it was woken or timed out."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def wake(self, *_: Any) -> None:
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._event.wait(), timeout_s)
        except TimeoutError:
            return False
        self._event.clear()
        return True


class FetchPurgatory:
    """Parks fetches until their data grows or their time runs out."""

    @asynccontextmanager
    async def watch(
        self,
        ctx: _Context,
        partitions: Sequence[PartitionFetch],
        lookup: Callable[[str, int], Log | None],
    ) -> AsyncIterator[FetchWaiter]:
        waiter = FetchWaiter()
        logs: list[Log] = []
        on_session = ctx.add_change_listener(waiter.wake)
        if not on_session:
            for p in partitions:
                log = lookup(p.topic, p.partition) if p.topic else None
                if log is not None:
                    log.add_listener(waiter.wake)
                    logs.append(log)
        try:
            yield waiter
        finally:
            for log in logs:
                log.remove_listener(waiter.wake)
            if on_session:
                ctx.remove_change_listener(waiter.wake)


class SessionPartitionWatcher:
    """Connects fetch sessions to partition logs (the cache's ``PartitionWatcher``).

    A session learns which of its partitions changed from the logs' change
    notifications, so an incremental fetch reads only what changed.
    """

    def __init__(self, lookup: Callable[[str, int], Log | None]) -> None:
        self._lookup = lookup
        self._listeners: dict[tuple[TopicIdPartition, int], tuple[Log, Callable[[Log], None]]] = {}

    def watch(self, key: TopicIdPartition, session: FetchSession) -> None:
        log = self._lookup(key.topic, key.partition) if key.topic else None
        if log is None:
            return
        session_id = int(session.id)

        def changed(_log: Log) -> None:
            session.partition_changed(key)

        log.add_listener(changed)
        old = self._listeners.pop((key, session_id), None)
        if old is not None:
            old[0].remove_listener(old[1])
        self._listeners[(key, session_id)] = (log, changed)

    def unwatch(self, key: TopicIdPartition, session: FetchSession) -> None:
        entry = self._listeners.pop((key, int(session.id)), None)
        if entry is not None:
            entry[0].remove_listener(entry[1])
