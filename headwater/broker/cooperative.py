"""Run long request handling in slices so one client never stalls the event loop.

A handler written as a generator yields at natural checkpoints (after each
partition, say). :func:`run_cooperatively` drives it synchronously while it
stays within a time slice, so small requests are answered exactly as before,
with no task or await. When a slice runs out, the rest becomes a coroutine
that gives the event loop a turn between slices, and every other
connection's requests are served in between. A step may also yield an
awaitable (work handed to a thread, say); the driver awaits it and sends
its result back into the generator.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Generator
from typing import Any, TypeVar

from headwater.gc_policy import COLLECTOR

T = TypeVar("T")

#: Well under the 50 ms any other client may be made to wait.
SLICE_SECONDS = 0.010

Steps = Generator["Awaitable[Any] | None", Any, T]


def run_cooperatively(steps: Steps[T], slice_seconds: float = SLICE_SECONDS) -> T | Awaitable[T]:
    """The generator's return value, or an awaitable of it when it needs more than one slice."""
    done, value, waiting = _run_slice(steps, slice_seconds, None)
    if done:
        return value  # type: ignore[return-value]

    async def rest() -> T:
        # A request this long makes many transient objects: no full collection
        # walks them while it runs (see headwater.gc_policy).
        COLLECTOR.heavy_started()
        try:
            pending = waiting
            while True:
                sent = None
                if pending is not None:
                    sent = await pending
                else:
                    await asyncio.sleep(0)
                finished, result, pending = _run_slice(steps, slice_seconds, sent)
                if finished:
                    return result  # type: ignore[return-value]
        finally:
            COLLECTOR.heavy_done()

    return rest()


async def sliced(steps: Steps[T], slice_seconds: float = SLICE_SECONDS) -> T:
    """Await-able form of :func:`run_cooperatively` for code that is async already.

    Finishing within the first slice costs no turn of the event loop.
    """
    out = run_cooperatively(steps, slice_seconds)
    if inspect.isawaitable(out):
        return await out
    return out


def _run_slice(
    steps: Steps[T], slice_seconds: float, sent: Any
) -> tuple[bool, T | None, Awaitable[Any] | None]:
    """Run steps until the slice ends or one yields an awaitable: (done, value, awaitable)."""
    deadline = time.perf_counter() + slice_seconds
    try:
        while True:
            yielded = steps.send(sent)
            sent = None
            if yielded is not None:
                return False, None, yielded
            if time.perf_counter() >= deadline:
                return False, None, None
    except StopIteration as stop:
        return True, stop.value, None
