"""Leader-epoch cache: Kafka's LeaderEpochFileCache rules and its checkpoint file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.log.leader_epoch import EpochEntry, LeaderEpochCache


def cache_at(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(tmp_path / "leader-epoch-checkpoint", [EpochEntry(*e) for e in entries])


# -- assign --------------------------------------------------------------------------------


def test_empty_cache_has_no_latest_epoch_and_no_end_offsets(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    assert cache.latest_epoch == -1
    assert cache.entries == []
    assert cache.end_offset_for(0, 100) == (-1, -1)


def test_assign_appends_a_new_epoch_and_persists_it_in_kafka_format(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    assert cache.assign(0, 0)
    assert cache.assign(2, 10)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 10)]
    assert cache.latest_epoch == 2
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n2 10\n"


def test_assign_of_the_latest_epoch_at_a_later_offset_changes_nothing(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    cache.assign(1, 5)
    path = tmp_path / "leader-epoch-checkpoint"
    os.utime(path, (0, 0))
    assert not cache.assign(1, 9)
    assert cache.entries == [EpochEntry(1, 5)]
    assert path.stat().st_mtime == 0  # not rewritten


def test_assign_of_the_latest_epoch_at_an_earlier_offset_moves_its_start(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, (0, 0), (1, 5))
    assert cache.assign(1, 3)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(1, 3)]


def test_assign_drops_entries_that_would_break_monotonicity(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, (0, 0), (2, 10), (4, 20))
    # A lower epoch than the latest removes every entry with epoch >= it.
    assert cache.assign(3, 25)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(3, 25)]
    # A start offset not after an entry's start removes that entry too.
    assert cache.assign(5, 10)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(5, 10)]


def test_assign_refuses_negative_epochs_and_offsets(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)
    assert cache.entries == []


def test_assign_without_a_partition_directory_keeps_the_entry_in_memory(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "absent" / "leader-epoch-checkpoint")
    assert cache.assign(0, 0)
    assert cache.entries == [EpochEntry(0, 0)]
    assert not (tmp_path / "absent").exists()


# -- end_offset_for -------------------------------------------------------------------------


def test_end_offset_for_the_latest_epoch_is_the_log_end(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, (0, 0), (2, 10))
    assert cache.end_offset_for(2, 17) == (2, 17)


def test_end_offset_for_an_older_epoch_is_the_next_epochs_start(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, (0, 0), (2, 10), (5, 30))
    assert cache.end_offset_for(0, 40) == (0, 10)
    assert cache.end_offset_for(2, 40) == (2, 30)


def test_end_offset_for_an_unknown_epoch_between_two_answers_the_one_below(
    tmp_path: Path,
) -> None:
    cache = cache_at(tmp_path, (0, 0), (2, 10), (5, 30))
    assert cache.end_offset_for(1, 40) == (0, 10)
    assert cache.end_offset_for(4, 40) == (2, 30)


def test_end_offset_for_an_epoch_before_the_first_answers_the_first_start(
    tmp_path: Path,
) -> None:
    cache = cache_at(tmp_path, (3, 100), (4, 150))
    assert cache.end_offset_for(1, 200) == (1, 100)


def test_end_offset_for_undefined_or_future_epochs_is_undefined(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, (0, 0), (2, 10))
    assert cache.end_offset_for(-1, 20) == (-1, -1)
    assert cache.end_offset_for(3, 20) == (-1, -1)


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, (1, 10), (3, 20))
    assert [cache.epoch_for_offset(o) for o in (5, 10, 19, 20, 99)] == [-1, 1, 1, 3, 3]


# -- truncation -------------------------------------------------------------------------------


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_offset(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, (0, 0), (2, 10), (5, 30))
    cache.truncate_from_end(30)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 10)]
    cache.truncate_from_end(11)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 10)]
    cache.truncate_from_end(5)
    assert cache.entries == [EpochEntry(0, 0)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"


def test_truncate_from_start_keeps_the_epoch_of_the_new_first_offset(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, (0, 0), (2, 10), (5, 30))
    cache.truncate_from_start(15)
    assert cache.entries == [EpochEntry(2, 15), EpochEntry(5, 30)]
    cache.truncate_from_start(30)
    assert cache.entries == [EpochEntry(5, 30)]
    cache.truncate_from_start(3)
    assert cache.entries == [EpochEntry(5, 30)]
    cache.truncate_from_start(40)
    assert cache.entries == [EpochEntry(5, 40)]


def test_clear_empties_the_cache_and_the_file(tmp_path: Path) -> None:
    cache = cache_at(tmp_path, (0, 0))
    cache.assign(1, 4)
    cache.clear()
    assert cache.entries == []
    assert LeaderEpochCache.read_file(cache.path) == []


# -- the checkpoint file ----------------------------------------------------------------------


def test_read_file_round_trips_what_was_written(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    cache.assign(0, 0)
    cache.assign(7, 1234567890123)
    assert LeaderEpochCache.read_file(cache.path) == [
        EpochEntry(0, 0),
        EpochEntry(7, 1234567890123),
    ]
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()


@pytest.mark.parametrize(
    "content",
    ["", "1\n0\n", "0\n2\n0 0\n", "0\n1\n0\n", "0\nx\n", "0\n1\na b\n", "\xff\xfe"],
)
def test_read_file_treats_a_corrupt_file_as_missing(tmp_path: Path, content: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(content, encoding="latin-1")
    assert LeaderEpochCache.read_file(path) is None


def test_read_file_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert LeaderEpochCache.read_file(tmp_path / "nope") is None


# -- against a reference model --------------------------------------------------------------


class Reference:
    """The rules written as plainly as possible (lists rebuilt by filters)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and self.entries[-1][0] == epoch and start >= self.entries[-1][1]:
            return
        while self.entries and (self.entries[-1][0] >= epoch or self.entries[-1][1] >= start):
            self.entries.pop()
        self.entries.append((epoch, start))

    def truncate_from_end(self, offset: int) -> None:
        self.entries = [e for e in self.entries if e[1] < offset]

    def truncate_from_start(self, offset: int) -> None:
        before = [e for e in self.entries if e[1] <= offset]
        after = [e for e in self.entries if e[1] > offset]
        self.entries = ([(before[-1][0], offset)] if before else []) + after

    def end_offset_for(self, epoch: int, leo: int) -> tuple[int, int]:
        if epoch == -1 or not self.entries:
            return -1, -1
        if self.entries[-1][0] == epoch:
            return epoch, leo
        higher = [e for e in self.entries if e[0] > epoch]
        lower = [e for e in self.entries if e[0] <= epoch]
        if not higher:
            return -1, -1
        if not lower:
            return epoch, higher[0][1]
        return lower[-1][0], higher[0][1]


operations = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(0, 60), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 60), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(operations, st.integers(-1, 14))
def test_cache_matches_the_reference_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]], query: int
) -> None:
    path = tmp_path_factory.mktemp("epochs") / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    ref = Reference()
    for op, a, b in ops:
        if op == "assign":
            cache.assign(a, b)
            ref.assign(a, b)
        elif op == "end":
            cache.truncate_from_end(a)
            ref.truncate_from_end(a)
        else:
            cache.truncate_from_start(a)
            ref.truncate_from_start(a)
        assert [tuple(e) for e in cache.entries] == ref.entries
        epochs = [e.epoch for e in cache.entries]
        starts = [e.start_offset for e in cache.entries]
        assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))
    assert cache.end_offset_for(query, 100) == ref.end_offset_for(query, 100)
    on_disk = LeaderEpochCache.read_file(path)
    assert (on_disk or []) == cache.entries


def test_a_new_epoch_is_written_without_an_fsync_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every leader and follower writes this file at each new epoch, on the event loop:
    two fsyncs each were half a failover's loop time at 4,000 partitions. The file is
    replaced whole and read back as written; a stale one is rebuilt on load."""
    synced: list[int] = []
    real_fsync = os.fsync

    def counted_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counted_fsync)
    cache = cache_at(tmp_path)
    for epoch in range(5):
        assert cache.assign(epoch, epoch * 10)
    assert synced == []
    reread = LeaderEpochCache.read_file(cache.path)
    assert reread == [EpochEntry(e, e * 10) for e in range(5)]


def test_a_new_epoch_rewrites_the_file_in_place_after_creating_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file creation and a rename per new epoch were a fifth of a broker's samples
    in a failover at 50,000 partitions: only the first write creates the file."""
    renamed: list[str] = []
    real_replace = os.replace

    def counted_replace(src: str, dst: str) -> None:
        renamed.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", counted_replace)
    cache = cache_at(tmp_path)
    assert cache.assign(0, 0)
    assert cache.assign(3, 20)
    assert cache.assign(4, 30)
    cache.truncate_from_end(25)  # shorter than before: the tail is cut
    assert len(renamed) == 1
    assert cache.path.read_text() == "0\n2\n0 0\n3 20\n"
    assert LeaderEpochCache.read_file(cache.path) == [EpochEntry(0, 0), EpochEntry(3, 20)]
    assert os.listdir(tmp_path) == ["leader-epoch-checkpoint"]


def test_a_rewrite_cut_short_by_a_crash_does_not_parse(tmp_path: Path) -> None:
    """A crash between writing the new text and cutting the file to its length leaves
    the old text's tail behind: the file must then be refused (and the log rebuilds
    the entries from its batch headers), never read as a list of epochs."""
    cache = cache_at(tmp_path)
    for epoch, start in ((0, 0), (1, 10), (2, 200), (3, 3000)):
        cache.assign(epoch, start)
    old = cache.path.read_bytes()
    new = b"0\n2\n0 0\n4 10\n"
    for cut in range(len(new), len(old)):
        torn = new + old[len(new) : cut + 1]
        cache.path.write_bytes(torn)
        if torn.strip() != new.strip():
            assert LeaderEpochCache.read_file(cache.path) is None, torn
