"""Run long request handling in slices so one client never stalls the event loop.

A handler written as a generator yields at natural checkpoints (after each
partition, say). :func:`run_cooperatively` drives it synchronously while it
stays within a time slice, so small requests are answered exactly as before,
with no task or await. When a slice runs out, the rest becomes a coroutine
that gives the event loop a turn between slices, and every other
connection's requests are served in between.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Generator
from typing import TypeVar

T = TypeVar("T")

#: Well under the 50 ms any other client may be made to wait.
SLICE_SECONDS = 0.010

Steps = Generator[None, None, T]


def run_cooperatively(steps: Steps[T], slice_seconds: float = SLICE_SECONDS) -> T | Awaitable[T]:
    """The generator's return value, or an awaitable of it when it needs more than one slice."""
    done, value = _run_slice(steps, slice_seconds)
    if done:
        return value  # type: ignore[return-value]

    async def rest() -> T:
        while True:
            await asyncio.sleep(0)
            finished, result = _run_slice(steps, slice_seconds)
            if finished:
                return result  # type: ignore[return-value]

    return rest()


def _run_slice(steps: Steps[T], slice_seconds: float) -> tuple[bool, T | None]:
    deadline = time.perf_counter() + slice_seconds
    try:
        while True:
            next(steps)
            if time.perf_counter() >= deadline:
                return False, None
    except StopIteration as stop:
        return True, stop.value
