"""A response the coordinator owes but cannot give yet.

JoinGroup waits for the whole group to rejoin and SyncGroup followers wait for
the leader's assignment. The coordinator is sans-I/O, so instead of futures it
hands out `Pending` values and completes them later, from another member's
request or from `tick(now_ms)`. The asyncio adapter turns one into an awaited
future with `on_done`; tests just read `done` and `result()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")


class Pending(Generic[T]):
    """A value completed at most once; callbacks run synchronously on completion."""

    __slots__ = ("_callbacks", "_done", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._callbacks: list[Callable[[T], None]] = []

    @classmethod
    def completed(cls, value: T) -> Pending[T]:
        """A response that is known at once (most errors, immediate rejoins)."""
        pending: Pending[T] = cls()
        pending.complete(value)
        return pending

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        """The value; asking early is a bug in the caller, so it raises."""
        if not self._done:
            raise RuntimeError("pending response is not complete yet")
        return self._value  # type: ignore[return-value]

    def complete(self, value: T) -> None:
        """Give the answer. Completing twice would answer one request twice: a bug."""
        if self._done:
            raise RuntimeError("pending response completed twice")
        self._done = True
        self._value = value
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(value)

    def on_done(self, callback: Callable[[T], None]) -> None:
        """Run `callback(value)` on completion, or now if already complete."""
        if self._done:
            callback(self._value)  # type: ignore[arg-type]
        else:
            self._callbacks.append(callback)

    def map(self, transform: Callable[[T], U]) -> Pending[U]:
        """A pending of the transformed value (e.g. a result turned into a response dict)."""
        mapped: Pending[U] = Pending()
        self.on_done(lambda value: mapped.complete(transform(value)))
        return mapped
