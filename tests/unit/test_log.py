"""Partition log: append, read, roll, retention, recovery, producers, listeners."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headwater.log.config import LogConfig
from headwater.log.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.log import Log, LogEvent
from headwater.log.segment import Segment
from headwater.records import RecordBatchBuilder, decode_batches, iter_batch_headers
from tests.unit.open_files import open_files_under

NOW = 1_700_000_000_000
HW = Isolation.HIGH_WATERMARK


def batch(
    count: int = 1,
    *,
    ts: int = NOW,
    value_size: int = 100,
    producer_id: int = -1,
    epoch: int = -1,
    seq: int = -1,
) -> bytes:
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)
    for i in range(count):
        builder.append(ts + i, b"k%d" % i, bytes([i % 256]) * value_size)
    return builder.build()


def make_log(path: Path, handles: FileHandleCache | None = None, **config: int) -> Log:
    return Log(path / "topic-0", LogConfig(**config), handles or FileHandleCache(64))


def offsets_in(log: Log, offset: int, max_bytes: int = 1 << 20) -> list[int]:
    result = log.read(offset, max_bytes, HW, True)
    if result.records is None:
        return []
    return [r.offset for b in decode_batches(result.records.read()) for r in b.records]


def test_first_append_creates_the_directory_and_assigns_offsets_from_zero(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    assert not (tmp_path / "topic-0").exists()
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    first = log.append(batch(3), NOW)
    second = log.append(batch(2), NOW)
    assert (first.base_offset, first.last_offset, first.duplicate) == (0, 2, False)
    assert (second.base_offset, second.last_offset) == (3, 4)
    assert first.log_append_time_ms == -1
    assert log.log_end_offset == log.high_watermark == log.last_stable_offset == 5
    assert offsets_in(log, 0) == [0, 1, 2, 3, 4]
    assert (tmp_path / "topic-0" / "00000000000000000000.log").exists()


def test_appended_batches_get_their_base_offset_and_leader_epoch_stamped(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.partition_leader_epoch = 7
    log.append(batch(2) + batch(3), NOW)
    data = log.read(0, 1 << 20, HW, True).records
    assert data is not None
    headers = list(iter_batch_headers(data.read()))
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 7), (2, 7)]


def test_reading_at_the_log_end_is_empty_and_past_it_is_out_of_range(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(2), NOW)
    result = log.read(2, 1000, HW, True)
    assert result.records is None
    assert (result.high_watermark, result.log_end_offset, result.log_start_offset) == (2, 2, 0)
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(3, 1000, HW, True)
    assert info.value.kafka_error_code == 1


def test_empty_log_reads_empty_at_zero(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    assert log.read(0, 1000, Isolation.TXN_COMMITTED, True).records is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 1000, Isolation.LOG_END, True)


def test_corrupt_batch_appends_nothing(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(1), NOW)
    bad = bytearray(batch(2))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(batch(2) + bytes(bad), NOW)
    assert log.log_end_offset == 1
    assert log.size_bytes == len(batch(1))


def test_batch_larger_than_max_message_bytes_is_refused(tmp_path: Path) -> None:
    log = make_log(tmp_path, max_message_bytes=500)
    with pytest.raises(RecordTooLargeError):
        log.append(batch(1, value_size=600), NOW)
    assert log.log_end_offset == 0


def test_append_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=1000)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(batch(1, value_size=1200), NOW)


def test_segment_rolls_when_the_next_append_would_exceed_segment_bytes(tmp_path: Path) -> None:
    one = len(batch(1))
    log = make_log(tmp_path, segment_bytes=3 * one)
    for _ in range(7):
        log.append(batch(1), NOW)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert all(s.size <= 3 * one for s in log.segments)
    names = sorted(os.listdir(tmp_path / "topic-0"))
    assert "00000000000000000003.log" in names and "00000000000000000006.timeindex" in names


def test_segment_rolls_when_older_than_segment_ms(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_ms=1000)
    log.append(batch(1, ts=NOW), NOW)
    log.append(batch(1, ts=NOW + 1000), NOW + 1000)
    assert len(log.segments) == 1
    log.append(batch(1, ts=NOW + 1001), NOW + 1001)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_maybe_roll_rolls_an_idle_old_segment_only(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_ms=1000)
    assert not log.maybe_roll(NOW)
    log.append(batch(1), NOW)
    assert not log.maybe_roll(NOW + 500)
    assert log.maybe_roll(NOW + 1001)
    assert [s.base_offset for s in log.segments] == [0, 1]
    assert not log.maybe_roll(NOW + 5000)  # the new active segment is empty


def test_index_is_sparse_and_every_offset_reads_from_its_own_batch(tmp_path: Path) -> None:
    log = make_log(tmp_path, index_interval_bytes=1000)
    sizes = []
    for i in range(60):
        data = batch(1 + i % 4, value_size=50 + 10 * (i % 7))
        sizes.append(len(data))
        log.append(data, NOW)
    [segment] = log.segments
    entries = segment.offset_index.entry_count
    assert 0 < entries < 60
    assert entries <= sum(sizes) // 1000
    for offset in range(log.log_end_offset):
        result = log.read(offset, 1, HW, True)
        assert result.records is not None
        [decoded] = decode_batches(result.records.read())
        assert decoded.header.base_offset <= offset <= decoded.header.last_offset


def test_read_smaller_than_the_first_batch_returns_exactly_that_batch(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    first = batch(5, value_size=200)
    log.append(first, NOW)
    log.append(batch(1), NOW)
    result = log.read(2, 10, HW, True)
    assert result.records is not None and result.records.size == len(first)
    without = log.read(2, 10, HW, False)
    assert without.records is not None and without.records.size == 10
    assert log.read(2, 0, HW, False).records is None


def test_read_may_end_inside_a_batch_and_readers_skip_it(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    one = len(batch(1))
    for _ in range(3):
        log.append(batch(1), NOW)
    result = log.read(0, one + one // 2, HW, True)
    assert result.records is not None and result.records.size == one + one // 2
    assert [b.header.base_offset for b in decode_batches(result.records.read())] == [0]


def test_read_continues_into_the_next_segment(tmp_path: Path) -> None:
    one = len(batch(2))
    log = make_log(tmp_path, segment_bytes=2 * one)
    for _ in range(4):
        log.append(batch(2), NOW)
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert offsets_in(log, 3) == [2, 3]  # the batch holding 3 ends its segment
    assert offsets_in(log, 4) == [4, 5, 6, 7]  # a read is within one segment
    # An offset in a gap between segments reads from the next segment.
    assert offsets_in(log, 5) == [4, 5, 6, 7]


def test_retention_by_time_deletes_old_segments_and_advances_log_start(tmp_path: Path) -> None:
    one = len(batch(1))
    log = make_log(tmp_path, segment_bytes=2 * one, retention_ms=10_000)
    for i in range(6):
        log.append(batch(1, ts=NOW + i * 1000), NOW + i * 1000)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert log.apply_retention(NOW + 11_000) == 0  # segment 0 is exactly 10 s old: kept
    assert log.apply_retention(NOW + 11_001) == 1
    assert log.log_start_offset == 2
    assert not (tmp_path / "topic-0" / "00000000000000000000.log").exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 1000, HW, True)
    assert offsets_in(log, 2)[0] == 2
    assert log.apply_retention(NOW + 1_000_000) == 1  # never the active segment
    assert [s.base_offset for s in log.segments] == [4]


def test_retention_by_bytes_keeps_the_newest_segments_under_the_limit(tmp_path: Path) -> None:
    one = len(batch(1))
    log = make_log(tmp_path, segment_bytes=2 * one, retention_ms=-1, retention_bytes=3 * one)
    for _ in range(7):
        log.append(batch(1), NOW)
    assert log.size_bytes == 7 * one
    assert log.apply_retention(NOW) == 2
    assert log.log_start_offset == 4
    assert log.size_bytes == 3 * one


def test_retention_forever_deletes_nothing(tmp_path: Path) -> None:
    one = len(batch(1))
    log = make_log(tmp_path, segment_bytes=one, retention_ms=-1)
    for _ in range(3):
        log.append(batch(1, ts=0), NOW)
    assert log.apply_retention(NOW * 10) == 0


def test_retention_on_a_log_that_was_never_written_touches_nothing(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    assert log.apply_retention(NOW) == 0
    assert not log.is_loaded


def test_listeners_fire_on_append_and_retention_and_can_be_removed(tmp_path: Path) -> None:
    one = len(batch(1))
    log = make_log(tmp_path, segment_bytes=one, retention_ms=1)
    seen: list[tuple[int, int, LogEvent]] = []

    def listener(changed: Log, event: LogEvent) -> None:
        seen.append((changed.log_start_offset, changed.log_end_offset, event))

    log.add_listener(listener)
    log.append(batch(1, ts=NOW), NOW)
    log.append(batch(1, ts=NOW), NOW)
    log.apply_retention(NOW + 10)
    visible = LogEvent.APPENDED | LogEvent.HIGH_WATERMARK_MOVED  # no replicas: HW = log end
    assert seen == [(0, 1, visible), (0, 2, visible), (1, 2, LogEvent.LOG_START_MOVED)]
    log.remove_listener(listener)
    log.append(batch(1), NOW)
    assert len(seen) == 3


def test_listeners_fire_on_truncation_and_delete_records(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    for _ in range(4):
        log.append(batch(1), NOW)
    calls: list[int] = []
    log.add_listener(lambda changed, _event: calls.append(changed.log_end_offset))
    log.delete_records(2)
    log.truncate_to(3)
    assert calls == [4, 3]


def test_delete_records_moves_log_start_inside_a_segment_and_survives_reopen(
    tmp_path: Path,
) -> None:
    handles = FileHandleCache(16)
    log = make_log(tmp_path, handles)
    for _ in range(5):
        log.append(batch(1), NOW)
    assert log.delete_records(3) == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 1000, HW, True)
    assert offsets_in(log, 3) == [3, 4]
    log.close()
    assert make_log(tmp_path, handles).log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(9)


def test_truncate_to_drops_later_batches_and_segments(tmp_path: Path) -> None:
    one = len(batch(2))
    log = make_log(tmp_path, segment_bytes=2 * one)
    for _ in range(5):
        log.append(batch(2), NOW)
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    log.truncate_to(6)
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert log.log_end_offset == 6
    log.truncate_to(5)  # inside a batch: the whole batch goes
    assert log.log_end_offset == 4
    assert log.append(batch(1), NOW).base_offset == 4
    assert offsets_in(log, 0) == [0, 1, 2, 3]
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.append(batch(1), NOW).base_offset == 0


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path: Path) -> None:
    one = len(batch(3))
    log = make_log(tmp_path, segment_bytes=2 * one, index_interval_bytes=0)
    for i in range(6):
        log.append(batch(3, ts=NOW + 100 * i), NOW)  # records at +100i, +100i+1, +100i+2
    assert log.offset_for_timestamp(0) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 1) == (1, NOW + 1)
    assert log.offset_for_timestamp(NOW + 3) == (3, NOW + 100)
    assert log.offset_for_timestamp(NOW + 302) == (11, NOW + 302)
    assert log.offset_for_timestamp(NOW + 450) == (15, NOW + 500)
    assert log.offset_for_timestamp(NOW + 503) is None
    log.close()
    assert make_log(tmp_path).offset_for_timestamp(NOW + 250) == (9, NOW + 300)


def test_reopened_log_continues_at_the_same_offset(tmp_path: Path) -> None:
    handles = FileHandleCache(16)
    one = len(batch(2))
    log = make_log(tmp_path, handles, segment_bytes=3 * one)
    for _ in range(5):
        log.append(batch(2), NOW)
    log.close()
    again = make_log(tmp_path, handles, segment_bytes=3 * one)
    assert not again.is_loaded
    assert again.log_end_offset == 10
    assert [s.base_offset for s in again.segments] == [0, 6]
    assert again.append(batch(1), NOW).base_offset == 10
    assert offsets_in(again, 6) == [6, 7, 8, 9, 10]


def _two_segments_then_cut(tmp_path: Path, cut: int) -> tuple[Path, int]:
    one = len(batch(3))
    log = make_log(tmp_path, segment_bytes=4 * one, index_interval_bytes=100)
    for _ in range(7):
        log.append(batch(3), NOW)
    log.close()
    active = tmp_path / "topic-0" / "00000000000000000012.log"
    size = active.stat().st_size
    os.truncate(active, size - cut)
    return active, one


def test_recovery_truncates_a_batch_cut_in_the_middle(tmp_path: Path) -> None:
    active, one = _two_segments_then_cut(tmp_path, cut=40)
    log = Log(
        tmp_path / "topic-0", LogConfig(index_interval_bytes=100), FileHandleCache(8), recover=True
    )
    assert log.log_end_offset == 18  # 7 batches of 3, the last one torn
    assert log.recovered_bytes == one - 40
    assert active.stat().st_size == 2 * one
    assert offsets_in(log, 0)[:3] == [0, 1, 2]
    assert offsets_in(log, 15) == [15, 16, 17]
    assert log.append(batch(1), NOW).base_offset == 18
    assert offsets_in(log, 18) == [18]


def test_recovery_truncates_garbage_after_the_last_good_batch(tmp_path: Path) -> None:
    active, _ = _two_segments_then_cut(tmp_path, cut=0)
    good = active.stat().st_size
    with open(active, "ab") as f:
        f.write(batch(2)[:30] + os.urandom(200))
    # A whole batch whose CRC is wrong is garbage too.
    broken = bytearray(batch(1))
    broken[-1] ^= 0xFF
    with open(active, "ab") as f:
        f.write(broken)
    log = Log(tmp_path / "topic-0", LogConfig(), FileHandleCache(8), recover=True)
    assert log.log_end_offset == 21
    assert active.stat().st_size == good
    assert log.append(batch(1), NOW).base_offset == 21


def test_recovery_drops_a_crc_corrupt_batch_and_everything_after(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    for _ in range(3):
        log.append(batch(1), NOW)
    log.close()
    one = len(batch(1))
    path = tmp_path / "topic-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[one + 70] ^= 0xFF  # inside the second batch's records
    path.write_bytes(data)
    recovered = Log(tmp_path / "topic-0", LogConfig(), FileHandleCache(8), recover=True)
    assert recovered.log_end_offset == 1
    assert recovered.recovered_bytes == 2 * one


def test_missing_index_is_rebuilt(tmp_path: Path) -> None:
    log = make_log(tmp_path, index_interval_bytes=200)
    for _ in range(30):
        log.append(batch(1), NOW)
    entries = log.segments[0].offset_index.entry_count
    log.close()
    os.unlink(tmp_path / "topic-0" / "00000000000000000000.index")
    os.unlink(tmp_path / "topic-0" / "00000000000000000000.timeindex")
    again = make_log(tmp_path, index_interval_bytes=200)
    assert offsets_in(again, 17, 1)[0] == 17
    assert again.segments[0].offset_index.entry_count == entries
    assert (tmp_path / "topic-0" / "00000000000000000000.index").stat().st_size == 8 * entries


def test_stale_index_pointing_past_the_log_is_rebuilt(tmp_path: Path) -> None:
    log = make_log(tmp_path, index_interval_bytes=200)
    for _ in range(30):
        log.append(batch(1), NOW)
    log.close()
    index = tmp_path / "topic-0" / "00000000000000000000.index"
    with open(index, "ab") as f:
        f.write((1000).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    again = make_log(tmp_path, index_interval_bytes=200)
    for offset in (0, 13, 29):
        assert offsets_in(again, offset, 1) == [offset]
    assert again.log_end_offset == 30


def test_non_monotonic_index_is_rebuilt(tmp_path: Path) -> None:
    log = make_log(tmp_path, index_interval_bytes=200)
    for _ in range(30):
        log.append(batch(1), NOW)
    log.close()
    index = tmp_path / "topic-0" / "00000000000000000000.index"
    data = index.read_bytes()
    index.write_bytes(data[8:16] + data[:8] + data[16:])
    again = make_log(tmp_path, index_interval_bytes=200)
    assert [offsets_in(again, o, 1) for o in range(30)] == [[o] for o in range(30)]


def test_idempotent_retry_is_answered_with_the_original_offsets(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    first = batch(3, producer_id=42, epoch=0, seq=0)
    log.append(batch(1), NOW)
    original = log.append(first, NOW)
    log.append(batch(2, producer_id=42, epoch=0, seq=3), NOW)
    retry = log.append(first, NOW)
    assert retry.duplicate
    assert (retry.base_offset, retry.last_offset) == (original.base_offset, original.last_offset)
    assert log.log_end_offset == 6


def test_idempotent_gap_is_out_of_order(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(3, producer_id=42, epoch=0, seq=0), NOW)
    with pytest.raises(OutOfOrderSequenceError) as info:
        log.append(batch(1, producer_id=42, epoch=0, seq=4), NOW)
    assert info.value.kafka_error_code == 45
    assert log.log_end_offset == 3
    log.append(batch(1, producer_id=42, epoch=0, seq=3), NOW)
    assert log.log_end_offset == 4


def test_idempotent_epoch_rules(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(1, producer_id=42, epoch=3, seq=0), NOW)
    with pytest.raises(InvalidProducerEpochError) as info:
        log.append(batch(1, producer_id=42, epoch=2, seq=1), NOW)
    assert info.value.kafka_error_code == 47
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(1, producer_id=42, epoch=4, seq=5), NOW)
    log.append(batch(1, producer_id=42, epoch=4, seq=0), NOW)
    assert log.log_end_offset == 2


def test_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(1, producer_id=5, epoch=0, seq=1000), NOW)
    log.append(batch(1, producer_id=5, epoch=0, seq=1001), NOW)
    assert log.log_end_offset == 2


def test_two_batches_of_one_producer_in_one_append_are_checked_in_order(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(2, producer_id=1, epoch=0, seq=0), NOW)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(
            batch(2, producer_id=1, epoch=0, seq=2) + batch(1, producer_id=1, epoch=0, seq=5),
            NOW,
        )
    assert log.log_end_offset == 2
    log.append(
        batch(2, producer_id=1, epoch=0, seq=2) + batch(1, producer_id=1, epoch=0, seq=4), NOW
    )
    assert log.log_end_offset == 5


def test_producer_state_is_rebuilt_from_the_log_after_reopen(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    first = batch(2, producer_id=9, epoch=1, seq=0)
    log.append(first, NOW)
    log.close()
    again = make_log(tmp_path)
    assert again.append(first, NOW).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        again.append(batch(1, producer_id=9, epoch=1, seq=3), NOW)
    assert again.append(batch(1, producer_id=9, epoch=1, seq=2), NOW).base_offset == 2


def test_flush_interval_messages_and_flush_ms(tmp_path: Path) -> None:
    log = make_log(tmp_path, flush_interval_messages=3, flush_interval_ms=1000)
    log.append(batch(2), NOW)
    assert not log.maybe_flush(NOW + 999)
    assert log.maybe_flush(NOW + 1000)
    assert not log.maybe_flush(NOW + 5000)  # nothing new since
    log.append(batch(3), NOW)  # reaches flush.messages: flushed at once
    assert not log.maybe_flush(NOW + 5000)


def test_ten_thousand_lazy_logs_open_no_files(tmp_path: Path) -> None:
    handles = FileHandleCache(1024)
    logs = [Log(tmp_path / f"t-{i}", LogConfig(), handles) for i in range(10_000)]
    assert all(not log.is_loaded for log in logs)
    assert open_files_under(tmp_path) == 0
    assert len(handles) == 0
    assert not any(tmp_path.iterdir())


def test_many_written_logs_keep_open_files_within_the_cache_bound(tmp_path: Path) -> None:
    handles = FileHandleCache(10)
    logs = [Log(tmp_path / f"t-{i}", LogConfig(index_interval_bytes=0), handles) for i in range(40)]
    for round_ in range(3):
        for log in logs:
            log.append(batch(1), NOW + round_)
            assert open_files_under(tmp_path) <= 10
    for log in logs:
        assert offsets_in(log, 1, 1) == [1]
    assert open_files_under(tmp_path) <= 10


def test_a_slice_outlives_its_handle_being_evicted_and_its_segment_deleted(tmp_path: Path) -> None:
    handles = FileHandleCache(1)
    one = len(batch(1))
    log = make_log(tmp_path, handles, segment_bytes=one, retention_ms=0)
    log.append(batch(1, ts=0), NOW)
    log.append(batch(1, ts=0), NOW)
    result = log.read(0, 1 << 20, HW, True)
    assert result.records is not None
    log.apply_retention(NOW)
    other = make_log(tmp_path / "other", handles)
    other.append(batch(1), NOW)  # evicts everything else from the cache
    assert not (tmp_path / "topic-0" / "00000000000000000000.log").exists()
    [decoded] = decode_batches(result.records.read())
    assert decoded.header.base_offset == 0


def test_delete_removes_the_partition_directory(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(1), NOW)
    log.delete()
    assert not (tmp_path / "topic-0").exists()
    assert log.log_end_offset == 0


def test_segment_open_is_lazy_and_costs_no_file_handle(tmp_path: Path) -> None:
    handles = FileHandleCache(8)
    log = make_log(tmp_path, handles)
    log.append(batch(1), NOW)
    log.close()
    assert len(handles) == 0
    segment = Segment.open(str(tmp_path / "topic-0"), 0, handles, 4096)
    assert segment.size == len(batch(1)) and len(handles) == 0
    assert segment.next_offset == 1


def test_sequence_wraps_from_int_max_to_zero(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(batch(2, producer_id=3, epoch=0, seq=2**31 - 3), NOW)  # last seq 2**31-2
    log.append(batch(1, producer_id=3, epoch=0, seq=2**31 - 1), NOW)
    log.append(batch(1, producer_id=3, epoch=0, seq=0), NOW)
    assert log.log_end_offset == 4


def test_only_the_last_five_batches_are_recognised_as_retries(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    batches = [batch(1, producer_id=8, epoch=0, seq=i) for i in range(6)]
    for data in batches:
        log.append(data, NOW)
    assert log.append(batches[1], NOW).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batches[0], NOW)  # too old to be a retry we can answer
    assert log.log_end_offset == 6


def test_old_timestamps_do_not_roll_a_segment_per_append(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_ms=1000)
    for i in range(5):
        log.append(batch(1, ts=1000 + i), NOW)  # replayed data stamped long ago
    assert len(log.segments) == 1
    log.append(batch(1, ts=1000 + 1001), NOW)  # a second newer than the first batch
    assert len(log.segments) == 2


def test_a_torn_tail_is_dropped_even_without_recovery(tmp_path: Path) -> None:
    log = make_log(tmp_path, index_interval_bytes=0)
    for _ in range(4):
        log.append(batch(1), NOW)
    log.close()
    path = tmp_path / "topic-0" / "00000000000000000000.log"
    os.truncate(path, path.stat().st_size - 10)
    again = make_log(tmp_path, index_interval_bytes=0)
    assert again.log_end_offset == 3
    assert again.append(batch(1), NOW).base_offset == 3
    assert [offsets_in(again, o, 1) for o in range(4)] == [[0], [1], [2], [3]]


def test_recovery_logs_what_it_truncated_and_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = make_log(tmp_path)
    for _ in range(3):
        log.append(batch(1), NOW)
    log.close()
    one = len(batch(1))
    path = tmp_path / "topic-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[one + 70] ^= 0xFF
    path.write_bytes(data)
    with caplog.at_level("WARNING", logger="headwater.log.segment"):
        recovered = Log(tmp_path / "topic-0", LogConfig(), FileHandleCache(8), recover=True)
        assert recovered.log_end_offset == 1
    [message] = [r.getMessage() for r in caplog.records]
    assert f"truncated {2 * one} bytes at position {one} (offset 1)" in message
    assert "batch at offset 1 fails its CRC-32C check" in message


def test_recovery_names_a_torn_write(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _two_segments_then_cut(tmp_path, cut=40)
    with caplog.at_level("WARNING", logger="headwater.log.segment"):
        recovered = Log(tmp_path / "topic-0", LogConfig(), FileHandleCache(8), recover=True)
        assert recovered.log_end_offset == 18
    assert any("incomplete" in r.getMessage() for r in caplog.records)
