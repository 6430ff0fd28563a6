"""The high watermark of a replicated log: reads capped at it, moves, truncation, retention."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.fetch.purgatory import FetchPurgatory
from headwater.log.config import LogConfig
from headwater.log.errors import OffsetOutOfRangeError
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.protocol.fetch_types import ZERO_UUID, PartitionFetch
from headwater.records import RecordBatchBuilder, decode_batches

NOW = 1_700_000_000_000
HW = Isolation.HIGH_WATERMARK
COMMITTED = Isolation.TXN_COMMITTED
LOG_END = Isolation.LOG_END


def batch(count: int = 1, value_size: int = 100) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(NOW + i, b"k%d" % i, bytes([i % 256]) * value_size)
    return builder.build()


def make_log(path: Path, **config: int) -> Log:
    return Log(path / "topic-0", LogConfig(**config), FileHandleCache(64))


def offsets_read(
    log: Log, offset: int, isolation: Isolation, max_bytes: int = 1 << 20
) -> list[int]:
    result = log.read(offset, max_bytes, isolation, True)
    if result.records is None:
        return []
    return [r.offset for b in decode_batches(result.records.read()) for r in b.records]


def log_with_batches(tmp_path: Path, sizes: list[int], **config: int) -> Log:
    log = make_log(tmp_path, **config)
    for count in sizes:
        log.append(batch(count), NOW)
    return log


# -- not replicated: today's behaviour ------------------------------------------------------


def test_a_log_that_is_not_replicated_has_its_high_watermark_at_the_log_end(
    tmp_path: Path,
) -> None:
    log = log_with_batches(tmp_path, [2, 3])
    assert not log.replicated
    assert log.high_watermark == log.last_stable_offset == log.log_end_offset == 5
    assert not log.update_high_watermark(2)
    assert offsets_read(log, 0, HW) == [0, 1, 2, 3, 4]
    result = log.read(5, 100, HW, True)
    assert (result.records, result.high_watermark, result.last_stable_offset) == (None, 5, 5)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 100, HW, True)


# -- capped reads ----------------------------------------------------------------------------


def test_consumers_read_only_below_the_high_watermark_followers_to_the_log_end(
    tmp_path: Path,
) -> None:
    log = log_with_batches(tmp_path, [2, 3, 1])
    log.enable_replication(2)
    assert log.replicated
    assert (log.high_watermark, log.last_stable_offset, log.log_end_offset) == (2, 2, 6)
    assert offsets_read(log, 0, HW) == [0, 1]
    assert offsets_read(log, 0, COMMITTED) == [0, 1]
    assert offsets_read(log, 0, LOG_END) == [0, 1, 2, 3, 4, 5]
    result = log.read(0, 1 << 20, HW, True)
    assert (result.high_watermark, result.last_stable_offset) == (2, 2)
    assert (result.log_start_offset, result.log_end_offset) == (0, 6)


def test_a_batch_straddling_the_high_watermark_is_not_read(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [2, 3, 1])
    log.enable_replication(4)  # inside the batch 2..4
    assert offsets_read(log, 0, HW) == [0, 1]
    assert offsets_read(log, 2, HW) == []
    assert offsets_read(log, 2, HW, max_bytes=1) == []  # min_one_batch does not pass the cap


def test_an_offset_between_the_high_watermark_and_the_log_end_reads_nothing(
    tmp_path: Path,
) -> None:
    log = log_with_batches(tmp_path, [2, 3, 1])
    log.enable_replication(2)
    for offset in (2, 4, 6):
        result = log.read(offset, 1 << 20, HW, True)
        assert result.records is None
        assert result.high_watermark == 2
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7, 1 << 20, HW, True)


def test_appends_after_the_high_watermark_stay_unread_until_it_moves(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [2])
    log.enable_replication(2)
    assert offsets_read(log, 0, HW) == [0, 1]  # caches the boundary at the log end
    log.append(batch(3), NOW)
    assert offsets_read(log, 0, HW) == [0, 1]
    assert log.update_high_watermark(5)
    assert offsets_read(log, 0, HW) == [0, 1, 2, 3, 4]


def test_the_cap_holds_across_segments(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [1] * 12, segment_bytes=400)
    assert len(log.segments) >= 4
    bases = [s.base_offset for s in log.segments]
    for hw in [0, 1, bases[1], bases[1] + 1, bases[2], 11, 12]:
        log.enable_replication(hw)
        got: list[int] = []
        offset = 0
        while offset < hw:
            batch_offsets = offsets_read(log, offset, HW, max_bytes=1)
            assert batch_offsets, (hw, offset)
            got += batch_offsets
            offset = batch_offsets[-1] + 1
        assert got == list(range(hw))
        assert offsets_read(log, hw, HW) == []


def test_timestamp_lookups_for_consumers_stop_at_the_high_watermark(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [2])  # offsets 0, 1 stamped NOW, NOW+1
    late = RecordBatchBuilder()
    late.append(NOW + 50, b"k", b"v")
    log.append(late.build(), NOW)  # offset 2 stamped NOW+50
    log.enable_replication(2)
    assert log.offset_for_timestamp(NOW + 1, HW) == (1, NOW + 1)
    assert log.offset_for_timestamp(NOW + 50, HW) is None
    assert log.offset_for_timestamp(NOW + 50, COMMITTED) is None
    assert log.offset_for_timestamp(NOW + 50, LOG_END) == (2, NOW + 50)
    assert log.offset_for_timestamp(NOW + 50) is None  # default: a consumer's view
    assert log.update_high_watermark(3)
    assert log.offset_for_timestamp(NOW + 50, HW) == (2, NOW + 50)


# -- moving the high watermark ------------------------------------------------------------


def test_update_high_watermark_is_monotonic_clamped_and_wakes_listeners(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [5])
    log.enable_replication(0)
    woken: list[int] = []
    log.add_listener(lambda log, _event: woken.append(log.high_watermark))
    assert log.update_high_watermark(3)
    assert not log.update_high_watermark(3)
    assert not log.update_high_watermark(1)
    assert log.update_high_watermark(99)
    assert log.high_watermark == 5
    assert not log.update_high_watermark(100)
    assert woken == [3, 5]


def test_enable_replication_clamps_into_the_log_and_may_reset(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [5])
    log.delete_records(2)
    log.enable_replication(100)
    assert log.high_watermark == 5
    log.enable_replication(0)
    assert log.high_watermark == 2
    log.disable_replication()
    assert not log.replicated
    assert log.high_watermark == 5


def test_truncation_lowers_the_high_watermark(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [2, 2, 2])
    log.enable_replication(6)
    assert offsets_read(log, 0, HW) == [0, 1, 2, 3, 4, 5]
    log.truncate_to(4)
    assert (log.high_watermark, log.log_end_offset) == (4, 4)
    assert offsets_read(log, 0, HW) == [0, 1, 2, 3]
    log.append(batch(2), NOW)
    assert offsets_read(log, 0, HW) == [0, 1, 2, 3]
    log.truncate_fully_and_start_at(50)
    assert (log.high_watermark, log.log_start_offset, log.log_end_offset) == (50, 50, 50)


def test_the_high_watermark_survives_close_and_reload(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [2, 2])
    log.enable_replication(2)
    log.close()
    assert log.high_watermark == 2
    assert offsets_read(log, 0, HW) == [0, 1]


# -- retention and DeleteRecords ----------------------------------------------------------


def test_retention_never_deletes_segments_above_the_high_watermark(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [1] * 12, segment_bytes=400, retention_bytes=0)
    log.enable_replication(log.segments[1].base_offset)
    assert log.apply_retention(NOW) == 1
    assert log.log_start_offset == log.segments[0].base_offset <= log.high_watermark
    log.update_high_watermark(log.log_end_offset)
    older = len(log.segments) - 1
    assert older > 1
    assert log.apply_retention(NOW) == older


def test_delete_records_stops_at_the_high_watermark(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [5])
    log.enable_replication(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(4)
    assert log.delete_records(3) == 3


# -- against a reference --------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(
    counts=st.lists(st.integers(1, 4), min_size=1, max_size=14),
    segment_bytes=st.sampled_from([600, 1000, 1 << 20]),
    hw_fraction=st.floats(0, 1),
    offset_fraction=st.floats(0, 1),
    max_bytes=st.integers(0, 1500),
    min_one_batch=st.booleans(),
    moves=st.integers(0, 2),
)
def test_capped_reads_match_a_reference(
    tmp_path_factory: pytest.TempPathFactory,
    counts: list[int],
    segment_bytes: int,
    hw_fraction: float,
    offset_fraction: float,
    max_bytes: int,
    min_one_batch: bool,
    moves: int,
) -> None:
    log = log_with_batches(tmp_path_factory.mktemp("hw"), counts, segment_bytes=segment_bytes)
    leo = log.log_end_offset
    log.enable_replication(0)
    for i in range(moves):  # exercise the boundary cache across HW moves
        log.update_high_watermark(int(hw_fraction * leo * (i + 1) / (moves + 1)))
        log.read(0, max_bytes, HW, min_one_batch)
    hw = int(hw_fraction * leo)
    log.update_high_watermark(hw)
    offset = int(offset_fraction * leo)
    # Reference: the batches of the segment holding ``offset``, from its batch on,
    # wholly below the HW, as many as fit the byte limit.
    batches = [
        (index, header)
        for index, segment in enumerate(log.segments)
        for header in segment.iter_headers()
    ]
    expected: list[int] = []
    if offset < hw:
        start = next(i for i, (_, h) in enumerate(batches) if h.last_offset >= offset)
        segment_index, first = batches[start]
        limit = max(max_bytes, first.size) if min_one_batch else max_bytes
        used = 0
        for index, header in batches[start:]:
            if index != segment_index or header.last_offset >= hw or used + header.size > limit:
                break
            used += header.size
            expected += range(header.base_offset, header.next_offset)
    result = log.read(offset, max_bytes, HW, min_one_batch)
    got = (
        []
        if result.records is None
        else [r.offset for b in decode_batches(result.records.read()) for r in b.records]
    )
    assert got == expected
    assert (result.high_watermark, result.log_end_offset) == (hw, leo)


# -- waking parked fetches ------------------------------------------------------------------


class _SessionlessContext:
    """A fetch context without a session: the purgatory listens on each log."""

    def add_change_listener(self, listener: Callable[[], None]) -> bool:
        return False

    def remove_change_listener(self, listener: Callable[[], None]) -> None:
        raise AssertionError("not registered")


def test_a_parked_consumer_fetch_wakes_when_the_high_watermark_moves(tmp_path: Path) -> None:
    log = log_with_batches(tmp_path, [2])
    log.enable_replication(0)
    fetch = PartitionFetch(ZERO_UUID, "topic", 0, fetch_offset=0)

    async def park() -> tuple[bool, bool]:
        async with FetchPurgatory().watch(_SessionlessContext(), [fetch], lambda t, p: log) as w:
            quiet = await w.wait(0.01)
            asyncio.get_running_loop().call_soon(log.update_high_watermark, 2)
            woken = await w.wait(5)
        return quiet, woken

    assert asyncio.run(park()) == (False, True)
    assert offsets_read(log, 0, HW) == [0, 1]
