"""Long handlers run in slices and give the event loop a turn in between."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Generator
from pathlib import Path

from headwater.broker.cooperative import run_cooperatively
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.log import Log
from headwater.log.segment_files import precreate_segment_files
from headwater.records.record import build_batch


def steps(n: int, each_s: float) -> Generator[None, None, int]:
    for _ in range(n):
        time.sleep(each_s)
        yield
    return n


def test_a_quick_handler_answers_synchronously() -> None:
    assert run_cooperatively(steps(3, 0.0)) == 3


def test_a_long_handler_lets_other_tasks_run_between_slices() -> None:
    async def scenario() -> tuple[int, int]:
        # Each step outlasts the slice: every step is its own slice.
        result = run_cooperatively(steps(10, 0.002), slice_seconds=0.001)
        assert inspect.isawaitable(result)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1

        tick = asyncio.create_task(ticker())
        value = await result
        tick.cancel()
        return value, ticks

    value, ticks = asyncio.run(scenario())
    assert value == 10
    assert ticks >= 9  # the other task ran between every two slices


def test_a_step_may_hand_work_to_a_thread_and_receive_its_result() -> None:
    def handler() -> Generator[object, object, str]:
        loop = asyncio.get_running_loop()
        got = yield loop.run_in_executor(None, lambda: "from a thread")
        yield None
        return f"handler saw {got}"

    async def scenario() -> str:
        result = run_cooperatively(handler())  # type: ignore[arg-type]
        assert inspect.isawaitable(result)
        return await result

    assert asyncio.run(scenario()) == "handler saw from a thread"


def test_precreated_segment_files_are_opened_by_the_first_append(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(), FileHandleCache(8))
    assert not log.segments
    precreate_segment_files([(str(log.directory), log.log_end_offset)])
    assert sorted(p.suffix for p in (tmp_path / "t-0").iterdir()) == [
        ".index",
        ".log",
        ".timeindex",
    ]
    log.append(build_batch([(1, None, b"v")]), 1)
    assert log.log_end_offset == 1
    reopened = Log(tmp_path / "t-0", LogConfig(), FileHandleCache(8))
    assert reopened.log_end_offset == 1
