"""Sparse offset/time indexes and the shared file-handle cache."""

from __future__ import annotations

import gc
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.log.handles import FileHandleCache
from headwater.log.index import OffsetIndex, TimeIndex
from tests.unit.open_files import open_files_under

BASE = 1_000


def offset_index(tmp_path: Path, handles: FileHandleCache | None = None) -> OffsetIndex:
    return OffsetIndex(str(tmp_path / "0.index"), BASE, handles or FileHandleCache(4))


def test_lookup_returns_the_greatest_entry_at_or_below(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for offset, position in [(1010, 400), (1020, 900), (1100, 5000)]:
        index.append(offset, position)
    assert index.lookup(999) == (BASE, 0)
    assert index.lookup(1009) == (BASE, 0)
    assert index.lookup(1010) == (1010, 400)
    assert index.lookup(1099) == (1020, 900)
    assert index.lookup(10**9) == (1100, 5000)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=50), min_size=0, max_size=40),
    st.integers(min_value=BASE - 5, max_value=BASE + 2500),
)
def test_lookup_agrees_with_a_linear_search(gaps: list[int], target: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index = offset_index(Path(tmp))
        entries = []
        offset = BASE
        for i, gap in enumerate(gaps):
            offset += gap
            entries.append((offset, 100 * (i + 1)))
            index.append(offset, 100 * (i + 1))
        expected = max((e for e in entries if e[0] <= target), default=(BASE, 0))
        assert index.lookup(target) == expected


def test_entries_persist_big_endian_and_reload_lazily(tmp_path: Path) -> None:
    handles = FileHandleCache(4)
    index = offset_index(tmp_path, handles)
    index.append(1005, 123)
    index.append(1009, 456)
    assert (tmp_path / "0.index").read_bytes() == bytes.fromhex(
        "00000005 0000007b 00000009 000001c8"
    )
    handles.clear()
    reloaded = offset_index(tmp_path, handles)
    assert len(handles) == 0  # nothing read yet
    assert reloaded.lookup(1010) == (1009, 456)
    assert reloaded.last_entry() == (1009, 456)


def test_truncate_to_removes_entries_at_and_above(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for i in range(1, 6):
        index.append(BASE + 10 * i, 100 * i)
    index.truncate_to(BASE + 30)
    assert index.last_entry() == (BASE + 20, 200)
    assert (tmp_path / "0.index").stat().st_size == 16


def test_appends_must_increase_and_fit_32_bits(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(BASE + 5, 10)
    with pytest.raises(ValueError):
        index.append(BASE + 5, 20)
    with pytest.raises(ValueError):
        index.append(BASE + 2**32, 30)


def test_consistency_checks_catch_stale_files(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    assert not index.is_consistent(100)  # missing file
    index.append(BASE + 1, 50)
    assert index.is_consistent(51)
    assert not index.is_consistent(50)  # entry at or past the end of the log
    with open(tmp_path / "0.index", "ab") as f:
        f.write(b"\x00\x00\x00")
    assert not offset_index(tmp_path).is_consistent(1000)  # torn entry


def test_time_index_keeps_only_rising_timestamps(tmp_path: Path) -> None:
    index = TimeIndex(str(tmp_path / "0.timeindex"), BASE, FileHandleCache(4))
    index.maybe_append(100, BASE)
    index.maybe_append(100, BASE + 5)  # not higher: ignored
    index.maybe_append(300, BASE + 9)
    assert index.entry_count == 2
    assert index.lookup(50) == (-1, BASE)
    assert index.lookup(299) == (100, BASE)
    assert index.lookup(10**12) == (300, BASE + 9)
    assert (tmp_path / "0.timeindex").stat().st_size == 24
    index.truncate_to(BASE + 9)
    assert index.last_entry() == (100, BASE)
    assert index.is_consistent()


def test_file_handle_cache_is_a_bounded_lru(tmp_path: Path) -> None:
    handles = FileHandleCache(3)
    paths = [tmp_path / f"f{i}" for i in range(5)]
    first = handles.get(paths[0], create=True)
    for path in paths[1:3]:
        handles.get(path, create=True)
    assert handles.get(paths[0]) is first  # a hit refreshes it
    handles.get(paths[3], create=True)  # evicts f1, the least recently used
    assert paths[0] in handles and paths[1] not in handles and len(handles) == 3
    handles.forget(paths[0])
    assert paths[0] not in handles
    with pytest.raises(FileNotFoundError):
        handles.get(paths[4])


def test_file_handle_cache_bounds_open_descriptors(tmp_path: Path) -> None:
    handles = FileHandleCache(16)
    for i in range(500):
        handles.get(tmp_path / f"f{i}", create=True)
        assert open_files_under(tmp_path) <= 16
    handles.clear()
    gc.collect()  # a closed handle's file object may still wait for the collector
    assert open_files_under(tmp_path) == 0


def test_an_evicted_file_stays_open_while_someone_holds_it(tmp_path: Path) -> None:
    handles = FileHandleCache(1)
    path = tmp_path / "held"
    path.write_bytes(b"payload")
    held = handles.get(path)
    handles.get(tmp_path / "other", create=True)  # evicts "held"
    assert os.pread(held.fileno(), 7, 0) == b"payload"
    fd = held.fileno()
    del held
    with pytest.raises(OSError):
        os.fstat(fd)  # the last reference closed it
