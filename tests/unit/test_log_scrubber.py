"""The scrubber (issue 31 item 4): a byte flipped in a closed segment on disk (a real
file) is found by its CRC-32C; no read returns the batch's bytes afterwards (reading
at it raises CorruptRecordError, CORRUPT_MESSAGE on the wire; a read before it stops
short of it); the rate bound holds; truncation forgets what it removes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.log import CorruptBatch, Log
from headwater.log.scrubber import LogScrubber
from headwater.records.errors import CorruptRecordError
from tests.unit.test_log import NOW, batch, offsets_in


def closed_log(tmp_path: Path, batches: int = 12) -> Log:
    """Batches of one ~170-byte record, four per segment: several closed segments."""
    log = Log(tmp_path / "t-0", _config(), FileHandleCache(64))
    for _ in range(batches):
        log.append(batch(1, value_size=100), NOW)
    assert len(log.segments) >= 3
    return log


def _config() -> LogConfig:
    return LogConfig(segment_bytes=4 * 180)


def flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


def test_a_flipped_byte_is_found_and_never_served(tmp_path: Path) -> None:
    log = closed_log(tmp_path)
    second = log.segments[1]
    headers = list(second.iter_headers())
    bad = headers[1]
    flip(second.log_path, bad.position + bad.size - 10)  # inside the record's value
    found: list[tuple[str, int, CorruptBatch]] = []
    scrubber = LogScrubber(
        lambda: [("t", 0, log)],
        bytes_per_second=1 << 30,
        on_corrupt=lambda t, p, _log, c: found.append((t, p, c)),
    )
    checked = scrubber.scrub_pass()
    assert checked == sum(s.size for s in log.segments[:-1])
    assert [(t, p, c.base_offset, c.last_offset) for t, p, c in found] == [
        ("t", 0, bad.base_offset, bad.last_offset)
    ]
    assert log.corrupt_ranges() == [(bad.base_offset, bad.last_offset)]
    with pytest.raises(CorruptRecordError):
        log.read(bad.base_offset, 1 << 20, Isolation.HIGH_WATERMARK, True)
    # A read from before the bad batch stops short of it: the consumer gets the good
    # records, then CORRUPT_MESSAGE at the bad offset.
    assert offsets_in(log, bad.base_offset - 1) == [bad.base_offset - 1]
    assert offsets_in(log, bad.last_offset + 1)[0] == bad.last_offset + 1
    # A second pass reports nothing new.
    scrubber.scrub_pass()
    assert len(found) == 1 and scrubber.corrupt_found == 1


def test_truncating_below_a_corrupt_batch_forgets_it(tmp_path: Path) -> None:
    log = closed_log(tmp_path)
    first = log.segments[0]
    bad = list(first.iter_headers())[2]
    flip(first.log_path, bad.position + bad.size - 10)
    LogScrubber(lambda: [("t", 0, log)], bytes_per_second=1 << 30).scrub_pass()
    assert log.corrupt_ranges() == [(bad.base_offset, bad.last_offset)]
    log.truncate_to(bad.base_offset)  # a follower cuts, then re-fetches from the leader
    assert log.corrupt_ranges() == []
    assert log.corrupt == ()
    log.append(batch(1, value_size=100), NOW)
    assert offsets_in(log, 0) == list(range(min(bad.base_offset + 1, 4)))


def test_the_active_segment_is_left_alone_and_the_rate_is_bounded(tmp_path: Path) -> None:
    log = closed_log(tmp_path)
    active = log.segments[-1]
    flip(active.log_path, 40)
    rate = 8_000  # bytes per second
    scrubber = LogScrubber(lambda: [("t", 0, log)], bytes_per_second=rate)
    started = time.monotonic()
    checked = scrubber.scrub_pass()
    elapsed = time.monotonic() - started
    assert log.corrupt == ()  # the active segment is recovery's, not the scrubber's
    assert elapsed >= checked / rate * 0.9


def test_the_thread_runs_passes_and_stops(tmp_path: Path) -> None:
    log = closed_log(tmp_path)
    first = log.segments[0]
    bad = next(iter(first.iter_headers()))
    flip(first.log_path, bad.position + bad.size - 10)
    scrubber = LogScrubber(lambda: [("t", 0, log)], bytes_per_second=1 << 30, pass_pause_s=0.05)
    scrubber.start()
    try:
        deadline = time.monotonic() + 30
        while not log.corrupt and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.corrupt_ranges() == [(bad.base_offset, bad.last_offset)]
    finally:
        scrubber.stop()
    off = LogScrubber(lambda: [("t", 0, log)], bytes_per_second=0)
    off.start()
    off.stop()
    assert off.passes == 0
