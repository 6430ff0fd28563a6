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
import logging
import time
from collections.abc import Awaitable, Generator
from typing import Any, TypeVar

from headwater.gc_policy import COLLECTOR
from headwater.steps import drain

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Well under the 50 ms any other client may be made to wait. A request that
#: arrives while a long operation runs waits for about three slices: asyncio
#: runs the operation's next slice before the woken connection, in FIFO order
#: (measured: 10 ms slices gave 30-40 ms waits, 5 ms slices 15-20 ms). A loop
#: turn costs ~30 us, so 5 ms slices lose under 1% of the operation's speed.
SLICE_SECONDS = 0.005

Steps = Generator["Awaitable[Any] | None", Any, T]


class _Turn:
    """The slice budget of the event loop's current turn, shared by first slices.

    The first slice of each operation runs synchronously (a small request
    then needs no task and no await), so phases that follow each other
    (decode, read, answer, encode) would each start a fresh slice within one
    turn of the loop: measured, a 100,000-partition fetch chained five into
    50 ms. All first slices of one turn draw on one budget instead; the turn
    ends when the loop runs the callback scheduled at its first slice.
    """

    loop: asyncio.AbstractEventLoop | None = None
    deadline = 0.0

    @classmethod
    def first_slice_deadline(cls, slice_seconds: float) -> float:
        now = time.perf_counter()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return now + slice_seconds  # no loop: nothing to share a turn with
        if cls.loop is not loop:
            cls.loop = loop
            cls.deadline = now + slice_seconds
            loop.call_soon(cls._end)
        return cls.deadline

    @classmethod
    def _end(cls) -> None:
        cls.loop = None


def run_cooperatively(steps: Steps[T], slice_seconds: float = SLICE_SECONDS) -> T | Awaitable[T]:
    """The generator's return value, or an awaitable of it when it needs more than one slice."""
    deadline = _Turn.first_slice_deadline(slice_seconds)
    done, value, waiting = _run_slice(steps, slice_seconds, None, deadline)
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
    steps: Steps[T], slice_seconds: float, sent: Any, deadline: float | None = None
) -> tuple[bool, T | None, Awaitable[Any] | None]:
    """Run steps until the slice ends or one yields an awaitable: (done, value, awaitable).

    At least one step runs, whatever the deadline, so every operation progresses.
    """
    if deadline is None:
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


class BackgroundSteps:
    """Runs step generators later, in slices, as tasks of the running loop.

    For work no client waits for (letting a closed 100,000-partition session
    go, say) that would still stall every client if done at once. Without a
    running loop the steps run at once; a task cancelled at shutdown runs
    what is left of its steps at once, so the work is never half done.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, steps: Generator[None, None, None]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            drain(steps)
            return
        task = loop.create_task(self._run(steps))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _run(steps: Generator[None, None, None]) -> None:
        try:
            await sliced(steps)
        except Exception:
            log.exception("background work failed")
        finally:
            drain(steps)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def wait(self) -> None:
        """Until every started piece of work is done."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
