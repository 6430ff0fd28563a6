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
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from headwater.fetch.session import FetchSession
from headwater.log.log import Log, LogEvent
from headwater.protocol.fetch_types import PartitionFetch, TopicIdPartition


class _Context(Protocol):
    def add_change_listener(self, listener: Callable[[], None]) -> bool: ...
    def remove_change_listener(self, listener: Callable[[], None]) -> None: ...
    def has_news(self) -> bool: ...


class FetchWaiter:
    """Woken by a change; ``wait`` reports whether it was woken or timed out."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def wake(self, *_: Any) -> None:
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                await self._event.wait()
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
        if on_session and ctx.has_news():
            # A change landed after the read chose its partitions but before
            # this watch began (a read in time slices lets appends in between):
            # it woke nobody, so wake now rather than at max_wait_ms. For a
            # follower that change is the leader's append it waits for.
            waiter.wake()
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


#: What a follower's session is woken by (it reads to the log end).
_FOLLOWER_WAKES = LogEvent.APPENDED | LogEvent.LOG_START_MOVED | LogEvent.TRUNCATED
#: What is news to a consumer's session (it reads to the high watermark).
_CONSUMER_NEWS = LogEvent.HIGH_WATERMARK_MOVED | LogEvent.LOG_START_MOVED | LogEvent.TRUNCATED

#: Sessions of at least this many partitions are released in the background.
RELEASE_IN_BACKGROUND = 2_000
#: Partitions unwatched per step of a background release.
RELEASE_STEP = 1_000


class _LogWatch:
    """The sessions watching one partition's log: one session, or a set of them.

    One such object per watched log, whatever the number of sessions, and no
    closure per (partition, session): at 1,000 sessions of 1,000 partitions
    that per-pair cost was most of a session's memory.
    """

    __slots__ = ("partition", "sessions", "topic")

    def __init__(self, topic: str, partition: int, session: FetchSession) -> None:
        self.topic = topic
        self.partition = partition
        self.sessions: FetchSession | set[FetchSession] = session


class SessionPartitionWatcher:
    """Connects fetch sessions to partition logs (the cache's ``PartitionWatcher``).

    A session learns which of its partitions changed from the logs' change
    notifications, so an incremental fetch reads only what changed. Every
    watched log gets the same listener (this watcher's ``_log_changed``),
    which finds the log's sessions in one dict.
    """

    def __init__(
        self,
        lookup: Callable[[str, int], Log | None],
        background: Callable[[Generator[None, None, None]], None] | None = None,
    ) -> None:
        """``background`` runs step generators later, in slices (the broker's event
        loop); without it a closed session is released at once."""
        self._lookup = lookup
        self._watches: dict[Log, _LogWatch] = {}
        self._listener = self._log_changed  # one bound method for every log
        self.background = background

    def watch(self, key: TopicIdPartition, session: FetchSession) -> None:
        log = self._lookup(key.topic, key.partition) if key.topic else None
        if log is None:
            return
        w = self._watches.get(log)
        if w is None:
            self._watches[log] = _LogWatch(key.topic, key.partition, session)
            log.add_listener(self._listener)
        elif isinstance(w.sessions, set):
            w.sessions.add(session)
        elif w.sessions is not session:
            w.sessions = {w.sessions, session}

    def unwatch(self, key: TopicIdPartition, session: FetchSession) -> None:
        log = self._lookup(key.topic, key.partition) if key.topic else None
        w = None if log is None else self._watches.get(log)
        if w is None or log is None:
            return
        if isinstance(w.sessions, set):
            w.sessions.discard(session)
            if len(w.sessions) == 1:
                w.sessions = next(iter(w.sessions))
            return
        if w.sessions is session:
            del self._watches[log]
            log.remove_listener(self._listener)

    def release(self, session: FetchSession, keys: Iterator[TopicIdPartition]) -> None:
        """Unwatch a closed session's partitions: a large session in the background,
        ``RELEASE_STEP`` partitions per step (190 ms at once for 100,000, measured)."""
        if self.background is None or session.size < RELEASE_IN_BACKGROUND:
            for key in keys:
                self.unwatch(key, session)
            return
        self.background(self._release_steps(session, keys))

    def _release_steps(
        self, session: FetchSession, keys: Iterator[TopicIdPartition]
    ) -> Generator[None, None, None]:
        unwatch = self.unwatch
        for n, key in enumerate(keys, 1):
            unwatch(key, session)
            if n % RELEASE_STEP == 0:
                yield None

    def watching(self, topic: str, partition: int) -> int:
        """How many sessions watch this partition's log (for tests and metrics)."""
        log = self._lookup(topic, partition)
        w = None if log is None else self._watches.get(log)
        if w is None:
            return 0
        return len(w.sessions) if isinstance(w.sessions, set) else 1

    def nudge_followers(self, topic: str, partition: int) -> None:
        """Make the partition pending in the replica fetchers' sessions that hold it
        (not consumers'): their next fetch reads it and tells the leader where
        each follower is, though its log did not change (ISR expansion)."""
        log = self._lookup(topic, partition)
        w = None if log is None else self._watches.get(log)
        if w is None:
            return
        sessions = w.sessions if isinstance(w.sessions, set) else (w.sessions,)
        for session in tuple(sessions):
            if session.privileged:
                session.log_changed(w.topic, w.partition)

    def _log_changed(self, log: Log, event: LogEvent) -> None:
        """Sessions learn what their fetcher can see: a consumer (reading to the high
        watermark) nothing from an append the ISR does not have yet; a follower
        (reading to the log end) is woken by appends, and a high watermark move
        alone is news for its next answer without waking it."""
        w = self._watches.get(log)
        if w is None:
            return
        for session in tuple(w.sessions) if isinstance(w.sessions, set) else (w.sessions,):
            if session.privileged:
                if event & _FOLLOWER_WAKES:
                    session.log_changed(w.topic, w.partition)
                else:
                    session.log_changed(w.topic, w.partition, wake=False)
            elif event & _CONSUMER_NEWS:
                session.log_changed(w.topic, w.partition)
