"""``ProcessPulse``: the longest gap between beats in each window, and ZooKeeper's
session trouble heard on another thread (issue 33)."""

from __future__ import annotations

import time

from headwater.cluster.process_pulse import ProcessPulse
from headwater.cluster.store import SessionEvent


def test_the_longest_gap_of_each_window_counts_up_to_now() -> None:
    pulse = ProcessPulse(interval_ms=100)
    pulse.beat(1_000)
    assert pulse.take(1_000) == (0, False)
    for t in (1_100, 1_200, 3_200, 3_300):  # a 2 s pause between 1.2 s and 3.2 s
        pulse.beat(t)
    assert pulse.take(3_350) == (2_000, False)
    # The next window starts at the take: the old pause is not counted again.
    pulse.beat(3_450)
    assert pulse.take(3_500) == (100, False)
    # A pause still going on (no beat since) counts up to now.
    assert pulse.take(6_000) == (2_500, False)


def test_only_a_suspended_or_lost_session_is_trouble_and_it_is_taken_once() -> None:
    pulse = ProcessPulse()
    pulse.beat(0)
    pulse.session_event(SessionEvent.RECONNECTED)
    pulse.session_event(SessionEvent.RESTORED)
    assert pulse.take(10) == (10, False)
    pulse.session_event(SessionEvent.SUSPENDED)
    assert pulse.take(20)[1] is True
    assert pulse.take(30)[1] is False
    pulse.session_event(SessionEvent.LOST)
    assert pulse.take(40)[1] is True


def test_the_thread_beats_while_the_caller_is_busy_and_stops_cleanly() -> None:
    pulse = ProcessPulse(interval_ms=10)
    pulse.start()
    try:
        started = pulse.take(time.monotonic_ns() // 1_000_000)
        assert started[1] is False
        # Busy on this thread (a spin, never a sleep): the pulse thread beats on.
        deadline = time.monotonic() + 30
        beats_seen = 0
        last = pulse._last_beat_ms
        while beats_seen < 3:
            assert time.monotonic() < deadline, "the pulse thread never beat"
            if pulse._last_beat_ms != last:
                beats_seen += 1
                last = pulse._last_beat_ms
    finally:
        pulse.stop()
    assert pulse._thread is None
