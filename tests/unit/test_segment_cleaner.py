"""The log cleaner on real segment files: latest per key, tombstones, transactions, swaps."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.log.cleaner import Cleaner, CleanResult
from headwater.log.config import LogConfig
from headwater.log.errors import InvalidRecordError
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.records import RecordBatchBuilder, decode_batches
from headwater.records.batch import iter_batch_headers

NOW = 1_700_000_000_000
DAY = 86_400_000


def keyed(*pairs: tuple[bytes | None, bytes | None], **kw: int) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=kw.get("producer_id", -1),
        producer_epoch=kw.get("epoch", -1),
        base_sequence=kw.get("seq", -1),
        is_transactional=bool(kw.get("txn", 0)),
    )
    for key, value in pairs:
        builder.append(NOW, key, value)
    return builder.build()


def make_log(path: Path, **config: object) -> Log:
    base = LogConfig(cleanup_policy=("compact",), segment_bytes=1 << 20)
    fields = {**{f: getattr(base, f) for f in ("cleanup_policy", "segment_bytes")}, **config}
    return Log(path / "t-0", LogConfig(**fields), FileHandleCache(64))  # type: ignore[arg-type]


def compact(log: Log, now_ms: int = NOW, buffer: int = 1 << 20) -> CleanResult | None:
    state = log.cleanable_state(now_ms)
    if state is None:
        return None
    pending = log.begin_clean(now_ms, state)
    result = Cleaner(buffer).clean(pending.task)
    assert log.finish_clean(pending, result)
    return result


def read_all(
    log: Log, isolation: Isolation = Isolation.HIGH_WATERMARK
) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20, isolation, True)
        if result.records is None:
            break
        last = offset
        for batch in decode_batches(result.records.read()):
            last = batch.header.last_offset
            if batch.header.is_control:
                continue
            out.extend((r.offset, r.key, r.value) for r in batch.records)
        offset = last + 1
    return out


def roll(log: Log) -> None:
    if log.segments and log.segments[-1].size > 0:
        log._roll(NOW)


def write(log: Log, pairs: list[tuple[bytes | None, bytes | None]], per_segment: int) -> None:
    for i, pair in enumerate(pairs):
        log.append(keyed(pair), NOW)
        if (i + 1) % per_segment == 0:
            roll(log)


def latest(
    pairs: list[tuple[bytes | None, bytes | None]], keep_tombstones: bool
) -> dict[bytes, tuple[int, bytes | None]]:
    model: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, (key, value) in enumerate(pairs):
        if key is not None:
            model[key] = (offset, value)
    if not keep_tombstones:
        model = {k: v for k, v in model.items() if v[1] is not None}
    return model


def test_keeps_the_latest_value_per_key_with_offsets_and_log_end_unchanged(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    pairs = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(50)]
    write(log, pairs, per_segment=10)
    log.append(keyed((b"k0", b"active")), NOW)  # the active segment is never cleaned
    end = log.log_end_offset
    result = compact(log)
    assert result is not None and result.groups
    assert log.log_end_offset == end
    records = read_all(log)
    assert [r[0] for r in records] == sorted(r[0] for r in records)
    assert records == [(45 + i, b"k%d" % i, b"v%d" % (45 + i)) for i in range(5)] + [
        (50, b"k0", b"active")
    ]
    # merged into one segment plus the active one, indexes valid
    assert len(log.segments) == 2
    assert log.read(3, 1 << 20, Isolation.HIGH_WATERMARK, True).records is not None
    log.close()
    assert read_all(log) == records  # reload: the files are the truth


def test_a_fetch_at_a_compacted_away_offset_returns_the_next_batch(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write(log, [(b"a", b"1"), (b"a", b"2"), (b"b", b"3"), (b"a", b"4")], per_segment=4)
    log.append(keyed((b"z", b"z")), NOW)
    compact(log)
    result = log.read(0, 1 << 20, Isolation.HIGH_WATERMARK, True)
    assert result.records is not None
    first = next(decode_batches(result.records.read()))
    assert [r.offset for r in first.records] == [2]


def test_tombstones_stay_delete_retention_after_cleaning_then_go(tmp_path: Path) -> None:
    log = make_log(tmp_path, delete_retention_ms=DAY)
    write(log, [(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"3")], per_segment=4)
    log.append(keyed((b"z", b"z")), NOW)
    compact(log, NOW)
    assert [(k, v) for _, k, v in read_all(log)] == [
        (b"b", b"2"),
        (b"a", None),
        (b"c", b"3"),
        (b"z", b"z"),
    ]
    # more dirty data so the log is cleanable again; a day later the tombstone goes
    roll(log)
    log.append(keyed((b"y", b"y")), NOW)
    compact(log, NOW + 2 * DAY)
    assert (b"a", None) not in [(k, v) for _, k, v in read_all(log)]


def test_null_keys_are_dropped_and_map_passes_when_keys_do_not_fit(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    pairs = [(b"k%d" % (i % 300), b"v%d" % i) for i in range(900)]
    write(log, pairs, per_segment=100)
    log.append(keyed((b"z", b"z")), NOW)
    passes = 0
    # a 4 KiB buffer holds 128 slots (115 keys): several passes to clean everything
    while (
        (result := compact(log, buffer=4096)) is not None
        and result.end_offset < 900
        and passes < 50
    ):
        passes += 1
    assert passes > 1
    compact(log, buffer=4096)
    model = latest(pairs, keep_tombstones=True)
    got = {k: (o, v) for o, k, v in read_all(log) if k != b"z"}
    assert got == model


def test_a_segment_that_cannot_be_parsed_is_skipped_and_left_alone(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write(log, [(b"a", b"%d" % i) for i in range(30)], per_segment=10)
    log.append(keyed((b"z", b"z")), NOW)
    middle = log.segments[1]
    with open(middle.log_path, "r+b") as f:
        f.seek(70)
        f.write(b"\xff\xff")  # breaks the CRC of the first batch
    before = Path(middle.log_path).read_bytes()
    compact(log)
    assert Path(middle.log_path).read_bytes() == before
    assert len(log.segments) == 4


def _txn(log: Log, pid: int, epoch: int, seq: int, pairs: list[tuple[bytes, bytes]]) -> None:
    log.append(keyed(*pairs, producer_id=pid, epoch=epoch, seq=seq, txn=1), NOW)


def test_aborted_records_go_markers_after_horizon_last_producer_batch_stays(tmp_path: Path) -> None:
    log = make_log(tmp_path, delete_retention_ms=DAY)
    _txn(log, 7, 0, 0, [(b"a", b"aborted")])
    log.append_control_marker(7, 0, False, 0, NOW)
    _txn(log, 8, 0, 0, [(b"b", b"committed")])
    log.append_control_marker(8, 0, True, 0, NOW)
    log.append(keyed((b"b", b"newer")), NOW)
    roll(log)
    log.append(keyed((b"z", b"z")), NOW)
    compact(log, NOW)
    committed = read_all(log, Isolation.TXN_COMMITTED)
    assert [(k, v) for _, k, v in committed] == [(b"b", b"newer"), (b"z", b"z")]
    assert read_all(log) == committed  # aborted data is gone for read_uncommitted too
    headers = list(iter_batch_headers(Path(log.segments[0].log_path).read_bytes()))
    # pid 8's last batch stays (empty: its record was superseded), markers kept until the horizon
    assert any(h.producer_id == 8 and not h.is_control and h.record_count == 0 for h in headers)
    assert sum(h.is_control for h in headers) == 2
    roll(log)
    log.append(keyed((b"y", b"y")), NOW)
    compact(log, NOW + 3 * DAY)
    headers = list(iter_batch_headers(Path(log.segments[0].log_path).read_bytes()))
    assert sum(h.is_control for h in headers) == 2  # producers 7 and 8 are still live
    log.apply_retention(NOW + 3 * DAY)  # producer.id.expiration.ms (a day) has passed
    roll(log)
    log.append(keyed((b"x", b"x")), NOW)
    compact(log, NOW + 3 * DAY)  # their last batches go now, the markers in the next clean
    roll(log)
    log.append(keyed((b"w", b"w")), NOW)
    compact(log, NOW + 3 * DAY)
    headers = list(iter_batch_headers(Path(log.segments[0].log_path).read_bytes()))
    assert sum(h.is_control for h in headers) == 0
    log.close()
    assert [(k, v) for _, k, v in read_all(log, Isolation.TXN_COMMITTED)] == [
        (b"b", b"newer"),
        (b"z", b"z"),
        (b"y", b"y"),
        (b"x", b"x"),
        (b"w", b"w"),
    ]


def test_a_crash_at_any_step_of_the_swap_leaves_old_or_new(tmp_path: Path) -> None:
    import headwater.log.cleaner_swap as swap

    pairs = [(b"k%d" % (i % 3), b"v%d" % i) for i in range(40)]
    for crash_at in range(30):
        directory = tmp_path / f"run{crash_at}"
        log = make_log(directory)
        write(log, pairs, per_segment=10)
        log.append(keyed((b"z", b"z")), NOW)
        before = read_all(log)
        state = log.cleanable_state(NOW)
        assert state is not None
        pending = log.begin_clean(NOW, state)
        result = Cleaner(1 << 20).clean(pending.task)
        calls = 0
        real_rename, real_unlink = os.rename, os.unlink

        class Crash(Exception):
            pass

        def counted(fn, limit=crash_at):  # type: ignore[no-untyped-def]
            def inner(*args):  # type: ignore[no-untyped-def]
                nonlocal calls
                calls += 1
                if calls > limit:
                    raise Crash
                return fn(*args)

            return inner

        swap.os.rename = counted(real_rename)  # type: ignore[assignment]
        swap.os.unlink = counted(real_unlink)  # type: ignore[assignment]
        try:
            log.finish_clean(pending, result)
            done = True
        except Crash:
            done = False
        finally:
            swap.os.rename, swap.os.unlink = real_rename, real_unlink  # type: ignore[assignment]
        fresh = make_log(directory)
        after = read_all(fresh)
        model = latest(pairs, keep_tombstones=True)
        got = {k: (o, v) for o, k, v in after if k != b"z"}
        assert after == before or (got == model and after[-1] == (40, b"z", b"z")), crash_at
        names = os.listdir(fresh.directory)
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
        if done:
            break


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"a", b"b", b"c", b"d", b"e", None]),
            st.one_of(st.none(), st.binary(max_size=8)),
        ),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 12),
)
def test_cleaned_log_equals_the_latest_per_key_model(
    tmp_path_factory: object, pairs: list[tuple[bytes | None, bytes | None]], per_segment: int
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        # written before the topic became compacted: null keys could get in then
        log = make_log(Path(tmp), delete_retention_ms=0, cleanup_policy=("delete",))
        write(log, pairs, per_segment)
        log.config = dataclasses.replace(log.config, cleanup_policy=("compact",))
        roll(log)
        log.append(keyed((b"zz", b"end")), NOW)
        compact(log, NOW)
        roll(log)
        log.append(keyed((b"zz", b"end")), NOW)
        compact(log, NOW + 1)  # a second clean past the horizon drops tombstones
        got = [(o, k, v) for o, k, v in read_all(log) if k != b"zz"]
        model = latest(pairs, keep_tombstones=False)
        assert got == sorted((o, k, v) for k, (o, v) in model.items())
        assert log.log_end_offset == len(pairs) + 2


def test_records_without_a_key_are_refused_in_a_compacted_log(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    with pytest.raises(InvalidRecordError):
        log.append(keyed((b"a", b"1"), (None, b"2")), NOW)
    assert log.log_end_offset == 0


def test_coordinator_replay_steps_over_batches_that_lost_their_last_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headwater.coordinator import partition_state_log
    from headwater.coordinator.partition_state_log import PartitionStateLog

    monkeypatch.setattr(partition_state_log, "_READ_CHUNK", 1)  # one batch per read

    log = make_log(tmp_path)
    log.append(keyed((b"a", b"1"), (b"b", b"1")), NOW)  # offsets 0-1: b=1 goes, the batch stays
    log.append(keyed((b"b", b"2")), NOW)
    log.append(keyed((b"c", b"1")), NOW)
    roll(log)
    log.append(keyed((b"z", b"z")), NOW)
    compact(log)
    assert list(PartitionStateLog(log).replay()) == [
        (b"a", b"1"),
        (b"b", b"2"),
        (b"c", b"1"),
        (b"z", b"z"),
    ]


def test_the_pure_and_compiled_null_key_walks_agree() -> None:
    import numpy as np

    from headwater.log.offset_map import _first_null_key_pure, kernels

    _, _, compiled = kernels()
    for pairs in ([(b"a", b"1"), (b"b", None)], [(b"a", b"1"), (None, b"x")], [(None, None)]):
        batch = keyed(*pairs)
        body = batch[61:]
        expected = next((i for i, (k, _) in enumerate(pairs) if k is None), -1)
        assert _first_null_key_pure(body, len(pairs)) == expected
        assert int(compiled(np.frombuffer(body, dtype=np.uint8), len(pairs))) == expected
    assert _first_null_key_pure(b"\x7f", 1) == -2
