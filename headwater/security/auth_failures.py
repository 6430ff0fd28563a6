"""Slowing down repeated authentication failures from one address.

Kafka delays the close after a failed authentication by
``connection.failed.authentication.delay.ms``, which caps a single client's
guessing rate. Headwater doubles that delay for each further failure from the
same host within a minute (up to 32 times the base), so a password-guessing
loop slows down quickly while one typo costs only the base delay. Memory is
bounded: the least recently failing hosts are forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_DOUBLINGS = 5  # up to 32 times the base delay


class FailedAuthenticationDelay:
    def __init__(
        self, base_ms: int, *, forget_after_ms: int = 60_000, max_hosts: int = 10_000
    ) -> None:
        self.base_ms = base_ms
        self.forget_after_ms = forget_after_ms
        self.max_hosts = max_hosts
        self._failures: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def failure(self, host: str, now_ms: int) -> int:
        """Record a failure; returns how long to wait before answering it."""
        count, last = self._failures.pop(host, (0, now_ms))
        if now_ms - last > self.forget_after_ms:
            count = 0
        count += 1
        self._failures[host] = (count, now_ms)
        while len(self._failures) > self.max_hosts:
            self._failures.popitem(last=False)
        return self.base_ms << min(count - 1, MAX_DOUBLINGS)

    def success(self, host: str) -> None:
        self._failures.pop(host, None)
