"""Several data directories (issue 31 item 3b, JBOD): new partitions go to the directory
holding the fewest, each directory has its own lock and clean-shutdown marker, a
restart finds every partition where it was, and a failing directory takes only its
own partitions offline (the first one, holding the registry, stops everything)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.log import disk_io
from headwater.log.config import LogConfig
from headwater.log.disk_space import DirSpace, SpaceFloor, SpaceReading
from headwater.log.errors import KafkaStorageError
from headwater.log.isolation import Isolation
from headwater.log.log_directory import CLEAN_SHUTDOWN_FILE, LogDirectory
from tests.unit.test_log import NOW, batch, offsets_in


@pytest.fixture
def faults() -> Iterator[disk_io.DiskFaults]:
    yield disk_io.FAULTS
    disk_io.FAULTS.clear()


def open_jbod(tmp_path: Path) -> LogDirectory:
    logs = LogDirectory(
        tmp_path / "a", LogConfig(free_space_min_bytes=0), [tmp_path / "b", tmp_path / "c"]
    )
    logs.open()
    return logs


def test_new_partitions_spread_over_the_directories_and_stay_there(tmp_path: Path) -> None:
    logs = open_jbod(tmp_path)
    logs.create_topic("t", 6)
    for p in range(6):
        logs.log("t", p).append(batch(1), NOW)
    placed = {p: logs.dir_of("t", p) for p in range(6)}
    counts = {d: list(placed.values()).count(d) for d in map(str, logs.dirs)}
    assert counts == {str(tmp_path / x): 2 for x in "abc"}
    for p, where in placed.items():
        assert (Path(where) / f"t-{p}").is_dir()
    assert [s.path for s in logs.dir_statuses()] == [str(tmp_path / x) for x in "abc"]
    logs.close()
    for x in "abc":
        assert (tmp_path / x / CLEAN_SHUTDOWN_FILE).exists()
    again = open_jbod(tmp_path)
    assert {p: again.dir_of("t", p) for p in range(6)} == placed
    assert all(offsets_in(again.log("t", p), 0) == [0] for p in range(6))
    assert sorted(k for _, k, _ in again.partition_dirs()) == list(range(6))
    again.close()


def test_a_failing_directory_takes_only_its_partitions_offline(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    logs = open_jbod(tmp_path)
    told: list[tuple[str, str]] = []
    logs.on_offline = lambda path, reason: told.append((path, reason))
    logs.create_topic("t", 6)
    for p in range(6):
        logs.log("t", p).append(batch(1), NOW)
    b = str(tmp_path / "b")
    in_b = logs.partitions_in(b)
    assert len(in_b) == 2
    faults.fail_under(b)
    with pytest.raises(KafkaStorageError):
        logs.log(*in_b[0]).append(batch(1), NOW)
    assert [path for path, _ in told] == [b]
    assert logs.offline is None  # the broker goes on with a and c
    assert logs.offline_dirs() == [b]
    with pytest.raises(KafkaStorageError):
        logs.log(*in_b[1]).read(0, 1 << 20, Isolation.HIGH_WATERMARK, True)
    for p in range(6):
        if ("t", p) not in in_b:
            logs.log("t", p).append(batch(1), NOW)  # the others take writes
    # New partitions avoid the offline directory.
    logs.create_partitions("t", 9)
    for p in range(6, 9):
        logs.log("t", p)
        assert logs.dir_of("t", p) != b
    faults.clear()
    logs.close()
    assert not (tmp_path / "b" / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / "c" / CLEAN_SHUTDOWN_FILE).exists()


def test_the_first_directory_failing_stops_everything(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    logs = open_jbod(tmp_path)
    logs.create_topic("t", 3)
    for p in range(3):
        logs.log("t", p).append(batch(1), NOW)
    in_a = logs.partitions_in(str(tmp_path / "a"))
    faults.fail_under(tmp_path / "a")
    with pytest.raises(KafkaStorageError):
        logs.log(*in_a[0]).append(batch(1), NOW)
    assert logs.offline is not None
    faults.clear()
    logs.close()


def test_placement_counts_what_is_on_disk_after_a_restart(tmp_path: Path) -> None:
    logs = open_jbod(tmp_path)
    logs.create_topic("t", 3)
    for p in range(3):
        logs.log("t", p).append(batch(1), NOW)
    logs.close()
    again = open_jbod(tmp_path)  # nothing loaded yet: the counts come from the disk
    again.create_topic("u", 3)
    for p in range(3):
        again.log("u", p)
    counts = [len([p for p in range(3) if again.dir_of("u", p) == str(d)]) for d in again.dirs]
    assert counts == [1, 1, 1]
    again.close()


def test_the_free_space_floor_is_each_partition_s_own_directory(tmp_path: Path) -> None:
    logs = open_jbod(tmp_path)
    logs.create_topic("t", 3)
    for p in range(3):
        logs.log("t", p).append(batch(1), NOW)
    full = logs.extra[1]
    full.space = DirSpace(
        str(full.path), SpaceFloor(1 << 20), reader=lambda _path: SpaceReading(4096, 1 << 30)
    )
    refusals = {p: logs.write_refusal("t", p, 10) for p in range(3)}
    [refused] = [p for p, why in refusals.items() if why is not None]
    assert logs.dir_of("t", refused) == str(full.path)
    assert str(full.path) in (refusals[refused] or "")
    assert logs.full_dirs() == [str(full.path)]
    # A new broker-wide floor reaches every directory, not only the first.
    logs.alter_base_config(LogConfig(free_space_min_bytes=1 << 62))
    assert all(logs.write_refusal("t", p, 10) is not None for p in range(3))
    logs.close()
