"""An idle HW checkpoint tick reads no high watermark and writes nothing.

Issue 33 item 2: the replica manager read every hosted replica's high
watermark and compared the whole map every 5 s. ``HighWatermarkTracker`` keeps
the checkpoint's content from log events and reads only partitions whose log
said its HW may have moved. Work is counted (HWs read, checkpoints due), never
timed.
"""

from __future__ import annotations

from typing import cast

import pytest

from headwater.cluster.hw_checkpoint_tracker import HighWatermarkTracker
from headwater.log.log import Log, LogEvent, LogListener


class QuietLog:
    """A log's listeners and high watermark, counting how often the HW is read."""

    def __init__(self, hw: int = 0) -> None:
        self.hw = hw
        self.reads = 0
        self.listeners: list[LogListener] = []

    @property
    def high_watermark(self) -> int:
        self.reads += 1
        return self.hw

    def add_listener(self, listener: LogListener) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: LogListener) -> None:
        self.listeners.remove(listener)

    def notify(self, event: LogEvent) -> None:
        for listener in list(self.listeners):
            listener(cast(Log, self), event)


def hosting(n: int, full_every: int = 0) -> tuple[HighWatermarkTracker, list[QuietLog]]:
    tracker = HighWatermarkTracker(full_every=full_every)
    logs = [QuietLog(hw=i) for i in range(n)]
    for i, plog in enumerate(logs):
        tracker.track(("t", i), cast(Log, plog))
    first = tracker.due()
    assert first == {("t", i): i for i in range(n)}
    tracker.written()
    return tracker, logs


def idle_ticks_cost(n: int, ticks: int = 10) -> tuple[int, int]:
    """(HWs read, checkpoints due) over ``ticks`` idle ticks after the first write."""
    tracker, logs = hosting(n)
    reads = sum(plog.reads for plog in logs)
    due = 0
    for _ in range(ticks):
        logs[0].notify(LogEvent.APPENDED)  # a follower's copy: the HW did not move
        due += tracker.due() is not None
    return sum(plog.reads for plog in logs) - reads, due


def test_idle_ticks_do_not_grow_with_the_replicas_hosted() -> None:
    assert idle_ticks_cost(100) == idle_ticks_cost(1_000) == (0, 0)


@pytest.mark.parametrize("n", [100, 1_000])
def test_a_moved_high_watermark_is_read_alone_and_written_with_the_rest(n: int) -> None:
    tracker, logs = hosting(n)
    logs[7].hw = 500
    logs[7].notify(LogEvent.HIGH_WATERMARK_MOVED)
    reads = tracker.reads
    content = tracker.due()
    assert tracker.reads - reads == 1
    assert content is not None and len(content) == n and content[("t", 7)] == 500
    # The write failed: the same content is due again, with nothing read.
    assert tracker.due() == content and tracker.reads - reads == 1
    tracker.written()
    assert tracker.due() is None


def test_truncation_and_log_start_moves_are_read_too() -> None:
    tracker, logs = hosting(3)
    logs[1].hw = 0
    logs[1].notify(LogEvent.TRUNCATED)
    logs[2].hw = 9
    logs[2].notify(LogEvent.LOG_START_MOVED)
    assert tracker.due() == {("t", 0): 0, ("t", 1): 0, ("t", 2): 9}


def test_a_replica_no_longer_hosted_leaves_the_checkpoint() -> None:
    tracker, logs = hosting(3)
    tracker.untrack(("t", 1))
    assert logs[1].listeners == []
    assert tracker.due() == {("t", 0): 0, ("t", 2): 2}


def test_the_checkpoint_read_at_start_is_not_rewritten_unchanged() -> None:
    tracker = HighWatermarkTracker(full_every=0)
    tracker.seed({("t", 0): 4, ("gone", 0): 8})
    tracker.track(("t", 0), cast(Log, QuietLog(hw=4)))
    assert tracker.due() == {("t", 0): 4}  # the partition no longer hosted is dropped
    tracker.written()
    tracker = HighWatermarkTracker(full_every=0)
    tracker.seed({("t", 0): 4})
    tracker.track(("t", 0), cast(Log, QuietLog(hw=4)))
    assert tracker.due() is None


def test_every_full_every_ticks_all_are_read_again_as_a_safety_net() -> None:
    tracker, logs = hosting(100, full_every=12)
    logs[3].hw = 77  # moved without an event
    reads = tracker.reads
    results = [tracker.due() for _ in range(10)]  # ticks 2-11 (the first write was 1)
    assert results == [None] * 10 and tracker.reads == reads
    content = tracker.due()  # tick 12
    assert tracker.reads - reads == 100
    assert content is not None and content[("t", 3)] == 77
