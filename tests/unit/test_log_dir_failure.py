"""A failing log directory (issue 31 item 3, KIP-112), through the disk_io test seam:
an EIO on write, fsync or read takes the directory offline; every log in it then
answers KAFKA_STORAGE_ERROR without touching the disk, the directory's listener is
told once, and a close leaves no clean-shutdown marker. A real failing device is not
available here (no /dev/mapper, so no device-mapper ``error`` target)."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.log import disk_io
from headwater.log.config import LogConfig
from headwater.log.errors import KafkaStorageError
from headwater.log.isolation import Isolation
from headwater.log.log_directory import CLEAN_SHUTDOWN_FILE, LogDirectory
from tests.unit.test_log import NOW, batch, offsets_in


@pytest.fixture
def faults() -> Iterator[disk_io.DiskFaults]:
    yield disk_io.FAULTS
    disk_io.FAULTS.clear()


def open_dir(tmp_path: Path, told: list[tuple[str, str]]) -> LogDirectory:
    logs = LogDirectory(tmp_path / "data", LogConfig(free_space_min_bytes=0))
    logs.open()
    logs.on_offline = lambda path, reason: told.append((path, reason))
    logs.create_topic("t", 2)
    return logs


def test_a_write_error_takes_the_directory_offline_for_every_partition(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    told: list[tuple[str, str]] = []
    logs = open_dir(tmp_path, told)
    a, b = logs.log("t", 0), logs.log("t", 1)
    a.append(batch(3), NOW)
    b.append(batch(2), NOW)
    faults.fail_under(logs.path)
    with pytest.raises(KafkaStorageError):
        a.append(batch(1), NOW)
    assert logs.offline is not None and "I/O error" in logs.offline
    assert told == [(str(logs.path), logs.offline)]
    assert logs.offline_dirs() == [str(logs.path)]
    assert logs.dir_statuses()[0].offline == logs.offline
    faults.clear()  # even with the disk "back", the directory stays offline
    with pytest.raises(KafkaStorageError):
        b.append(batch(1), NOW)
    with pytest.raises(KafkaStorageError):
        b.read(0, 1 << 20, Isolation.HIGH_WATERMARK, True)
    with pytest.raises(KafkaStorageError):
        logs.log("t", 0).append_as_follower(batch(1), NOW)
    assert len(told) == 1
    logs.close()
    assert not (logs.path / CLEAN_SHUTDOWN_FILE).exists()


def test_a_read_error_takes_the_directory_offline(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    told: list[tuple[str, str]] = []
    logs = open_dir(tmp_path, told)
    log = logs.log("t", 0)
    log.append(batch(3), NOW)
    log.close()  # the next read loads the log from disk, through the seam
    faults.fail_under(logs.path)
    with pytest.raises(KafkaStorageError):
        offsets_in(log, 0)
    assert logs.offline is not None and len(told) == 1


def test_an_fsync_error_takes_the_directory_offline_and_housekeeping_goes_on(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    told: list[tuple[str, str]] = []
    logs = open_dir(tmp_path, told)
    config = LogConfig(free_space_min_bytes=0, flush_interval_ms=0)
    logs.alter_base_config(config)
    logs.log("t", 0).append(batch(1), NOW)
    logs.log("t", 1).append(batch(1), NOW)
    faults.fail_under(logs.path)
    assert logs.flush_due(NOW + 10) == 0  # no exception out of the housekeeping timer
    assert logs.offline is not None and len(told) == 1


def test_a_full_disk_does_not_take_the_directory_offline(tmp_path: Path) -> None:
    told: list[tuple[str, str]] = []
    logs = open_dir(tmp_path, told)
    log = logs.log("t", 0)
    log.append(batch(1), NOW)
    assert log.on_io_error is not None
    log.on_io_error(log, OSError(errno.ENOSPC, "No space left on device"))
    assert logs.offline is None and told == []
    assert offsets_in(log, 0) == [0]
