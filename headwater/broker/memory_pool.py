"""A broker-wide budget for request bytes (Kafka's ``queued.max.request.bytes``, KIP-72).

Each connection reserves a request's declared size when its length prefix
arrives and gives it back once the request has been handled. When the
budget is spent, connections stop reading (their peers see TCP back-pressure)
instead of the broker allocating more: many clients each sending a large
produce, or declaring large frames they never finish, cannot exhaust memory.

A reservation is accounting, not an allocation: the frame's buffer still
grows only as bytes arrive. A single reservation may exceed what is left
(never more than the whole pool, which the config ensures is at least
``socket.request.max.bytes``) only when nothing else is reserved, so one
large request can always make progress and two half-read ones cannot
deadlock each other.
"""

from __future__ import annotations

import asyncio


class MemoryPool:
    """Reserve and release byte counts against a fixed capacity; ``capacity < 0`` is unbounded."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.reserved = 0
        self._freed: asyncio.Event | None = None

    @property
    def unbounded(self) -> bool:
        return self.capacity < 0

    @property
    def available(self) -> int:
        return -1 if self.unbounded else self.capacity - self.reserved

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes if they fit (or nothing else is reserved); False otherwise."""
        if self.unbounded or self.reserved + size <= self.capacity or self.reserved == 0:
            self.reserved += size
            return True
        return False

    def release(self, size: int) -> None:
        if size <= 0:
            return
        self.reserved -= size
        if self.reserved < 0:
            raise AssertionError(f"memory pool released more than reserved ({self.reserved})")
        if self._freed is not None:
            self._freed.set()
            self._freed = None

    async def reserve(self, size: int) -> None:
        """Reserve ``size`` bytes, waiting for releases while the pool is spent."""
        while not self.try_reserve(size):
            if self._freed is None:
                self._freed = asyncio.Event()
            await self._freed.wait()
