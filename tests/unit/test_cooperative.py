"""Long handlers run in slices and give the event loop a turn in between."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Generator

from headwater.broker.cooperative import run_cooperatively


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
