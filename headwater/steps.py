"""Work written as step generators, so a server can run it in time slices.

A long computation (decoding a 100,000-partition Fetch, building its
session) is a generator that yields ``None`` at checkpoints and returns
its result. The broker drives it in slices between other clients'
requests (``headwater.broker.cooperative``); pure code and tests run it to
the end at once with :func:`drain`. Both get the very same result.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")


def drain(steps: Generator[None, None, T]) -> T:
    """Run a step generator to its end at once; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


def count_steps(steps: Generator[None, None, T]) -> tuple[T, int]:
    """Like :func:`drain`, also saying how many times it yielded (for tests)."""
    yielded = 0
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value, yielded
        yielded += 1
