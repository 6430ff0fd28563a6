"""The scrubber's look for new logs between passes costs nothing per idle log.

Issue 33 item 2: every second between passes the scrubber listed every loaded
log to find those loaded since, a fifth of an idle broker's CPU at 10,000
partitions. Given the directory's count of logs created, it lists them only
when one was created, and otherwise revisits only logs not loaded yet. Work is
counted (listings, logs visited), never timed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest

from headwater.log.log import Log
from headwater.log.scrubber import LogScrubber


class IdleLog:
    """A loaded log with no closed segment to check."""

    def __init__(self, loaded: bool = True) -> None:
        self.is_loaded = loaded
        self.offline: str | None = None

    def loaded_segments(self) -> list[object]:
        return []


class Directory:
    """What the broker hands the scrubber: its logs, and how many were ever created."""

    def __init__(self, n: int) -> None:
        self.logs = [("t", i, IdleLog()) for i in range(n)]
        self.listings = 0

    def loaded_logs(self) -> Iterator[tuple[str, int, Log]]:
        self.listings += 1
        for topic, partition, plog in list(self.logs):
            yield topic, partition, cast(Log, plog)

    def created(self) -> int:
        return len(self.logs)

    def scrubber(self) -> LogScrubber:
        return LogScrubber(self.loaded_logs, 1 << 30, generation=self.created)


def idle_looks_cost(n: int, looks: int = 5) -> tuple[int, int]:
    """(listings, logs visited) by ``looks`` looks for new logs after a full pass."""
    directory = Directory(n)
    scrubber = directory.scrubber()
    scrubber.scrub_pass()
    assert scrubber.logs_visited == n
    listings, visited = directory.listings, scrubber.logs_visited
    for _ in range(looks):
        scrubber.scrub_pass(only_new=True)
    return directory.listings - listings, scrubber.logs_visited - visited


def test_idle_looks_for_new_logs_do_not_grow_with_the_logs() -> None:
    assert idle_looks_cost(100) == idle_looks_cost(1_000) == (0, 0)


@pytest.mark.parametrize("n", [100, 1_000])
def test_a_log_created_or_loaded_later_is_still_checked(n: int) -> None:
    directory = Directory(n)
    scrubber = directory.scrubber()
    scrubber.scrub_pass()
    late = IdleLog(loaded=False)
    directory.logs.append(("t", n, late))
    scrubber.scrub_pass(only_new=True)  # a log was created: one listing
    assert directory.listings == 2
    visited = scrubber.logs_visited
    scrubber.scrub_pass(only_new=True)  # not loaded yet: only it is revisited
    assert (directory.listings, scrubber.logs_visited - visited) == (2, 1)
    late.is_loaded = True
    scrubber.scrub_pass(only_new=True)
    visited = scrubber.logs_visited
    scrubber.scrub_pass(only_new=True)  # loaded and seen: nothing left to look at
    assert (directory.listings, scrubber.logs_visited - visited) == (2, 0)


def test_without_a_generation_every_look_lists_the_logs() -> None:
    directory = Directory(10)
    scrubber = LogScrubber(directory.loaded_logs, 1 << 30)
    scrubber.scrub_pass()
    scrubber.scrub_pass(only_new=True)
    assert directory.listings == 2
