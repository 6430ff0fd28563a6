"""Rate-limited warnings about rejected input, naming who sent it.

An operator must learn that a client is sending corrupt batches (and which
client: address and client id), but a broken producer retrying in a loop
must not flood the log. So at most ``burst`` lines are written per
``interval_s``; the rest are counted and reported in one line when the
next interval opens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RejectionLog:
    """A token bucket in front of ``logger.warning``; sans-I/O apart from the logger call."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = 10,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._burst = burst
        self._interval_s = interval_s
        self._clock = clock
        self._window_start = -float("inf")
        self._written = 0
        self.suppressed = 0

    def reject(self, what: str, client_host: str, client_id: str | None, reason: str) -> bool:
        """Log one rejection if the budget allows; returns whether a line was written."""
        now = self._clock()
        if now - self._window_start >= self._interval_s:
            if self.suppressed:
                self._logger.warning(
                    "%d more rejections were not logged in the last %.0f s",
                    self.suppressed,
                    self._interval_s,
                )
            self._window_start = now
            self._written = 0
            self.suppressed = 0
        if self._written >= self._burst:
            self.suppressed += 1
            return False
        self._written += 1
        self._logger.warning(
            "rejected %s from %s (client id %r): %s", what, client_host, client_id, reason
        )
        return True


class OncePerKey:
    """At most one line per key per ``interval_s`` (a full disk: one WARNING per
    partition per minute, however fast producers retry); sans-I/O but for the logger."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[object, float] = {}
        self._suppressed: dict[object, int] = {}

    def warn(self, key: object, message: str, *args: object) -> bool:
        """Log ``message`` (no traceback) unless ``key`` was logged within the interval."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        if len(self._last) > 100_000:
            self._last.clear()
        self._last[key] = now
        more = self._suppressed.pop(key, 0)
        if more:
            self._logger.warning(message + " (%d more like it not logged)", *args, more)
        else:
            self._logger.warning(message, *args)
        return True
