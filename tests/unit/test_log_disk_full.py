"""A full disk (issue 31 item 2): the free-space floor, a failed append that changes
nothing, and one warning per partition per minute. No sockets, no real full disk
(the loop-device test in tests/integration/test_disk_faults.py has one)."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from headwater.broker.rejection_log import OncePerKey
from headwater.log.config import LogConfig
from headwater.log.disk_space import DirSpace, SpaceFloor, SpaceReading, is_full_disk_error
from headwater.log.errors import KafkaStorageError
from headwater.log.log_directory import LogDirectory
from tests.unit.test_log import NOW, batch, make_log, offsets_in


def test_floor_refuses_a_write_that_would_leave_less_than_the_floor() -> None:
    floor = SpaceFloor(min_free_bytes=1000)
    assert not floor.refuses(usable_bytes=2000, size=1000)
    assert floor.refuses(usable_bytes=2000, size=1001)
    assert floor.refuses(usable_bytes=999)
    assert not SpaceFloor(0).refuses(usable_bytes=0)


def test_full_disk_errors_are_told_apart_from_failing_devices() -> None:
    assert is_full_disk_error(OSError(errno.ENOSPC, "full"))
    assert is_full_disk_error(OSError(errno.EDQUOT, "quota"))
    assert not is_full_disk_error(OSError(errno.EIO, "I/O error"))


class FakeVolume:
    def __init__(self, usable: int) -> None:
        self.usable = usable
        self.now = 0.0
        self.reads = 0

    def read(self, path: str) -> SpaceReading:
        self.reads += 1
        return SpaceReading(self.usable, 10_000)


def test_dir_space_rereads_the_volume_so_writes_resume_when_space_returns() -> None:
    volume = FakeVolume(usable=500)
    space = DirSpace("/d", SpaceFloor(1000), clock=lambda: volume.now, reader=volume.read)
    assert space.below_floor() and space.is_full
    volume.usable = 5000
    assert space.below_floor()  # the reading is at most REFRESH_S old
    volume.now += 1.0
    assert not space.below_floor() and not space.is_full
    reads = volume.reads
    for _ in range(100):
        space.below_floor()
    assert volume.reads == reads  # one statvfs per refresh interval, not per write


def test_a_write_that_met_enospc_marks_the_directory_full_until_space_grows() -> None:
    volume = FakeVolume(usable=4096)
    space = DirSpace("/d", SpaceFloor(0), clock=lambda: volume.now, reader=volume.read)
    assert not space.is_full
    space.note_full()
    assert space.is_full
    volume.now += 1.0
    assert space.is_full  # no more room than when the write failed
    volume.usable = 1 << 20
    volume.now += 1.0
    assert not space.is_full


@pytest.fixture
def enospc(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """os.pwrite (under the log's I/O seam) fails with ENOSPC after a short write."""
    calls: list[int] = []
    real = os.pwrite

    def pwrite(fd: int, data: memoryview, position: int) -> int:
        calls.append(position)
        if len(calls) == 1 and len(data) > 10:
            return real(fd, data[:10], position)  # a short write first, as a filling disk does
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", pwrite)
    return calls


def test_failed_append_leaves_log_end_and_producer_state_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(tmp_path)
    log.append(batch(2, producer_id=7, epoch=0, seq=0), NOW)
    size = log.segments[-1].size
    real = os.pwrite
    failing = [True]

    def pwrite(fd: int, data: memoryview, position: int) -> int:
        if failing[0]:
            real(fd, data[:10], position)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, position)

    monkeypatch.setattr(os, "pwrite", pwrite)
    with pytest.raises(KafkaStorageError) as caught:
        log.append(batch(2, producer_id=7, epoch=0, seq=2), NOW)
    assert caught.value.kafka_error_code == 56
    assert log.log_end_offset == 2
    assert log.segments[-1].size == size
    assert os.path.getsize(log.segments[-1].log_path) == size  # the partial write is undone
    assert log.producers()[7].last_seq == 1
    failing[0] = False
    # Space is back: the producer's retry of the same sequence is accepted where it belongs.
    again = log.append(batch(2, producer_id=7, epoch=0, seq=2), NOW)
    assert (again.base_offset, again.duplicate) == (2, False)
    assert offsets_in(log, 0) == [0, 1, 2, 3]


def test_clean_reopen_after_a_failed_append_sees_no_torn_bytes(
    tmp_path: Path, enospc: list[int]
) -> None:
    log = make_log(tmp_path)
    with pytest.raises(KafkaStorageError):
        log.append(batch(3), NOW)
    log.close()
    assert make_log(tmp_path).log_end_offset == 0


def test_log_directory_refuses_below_the_floor_and_names_the_directory(tmp_path: Path) -> None:
    logs = LogDirectory(tmp_path / "data", LogConfig(free_space_min_bytes=1 << 62))
    logs.open()
    try:
        logs.create_topic("t", 1)
        refusal = logs.write_refusal("t", 0, 100)
        assert refusal is not None and str(tmp_path / "data") in refusal
        assert logs.full_dirs() == [str(tmp_path / "data")]
        [status] = logs.dir_statuses()
        assert status.full
        logs.alter_base_config(LogConfig(free_space_min_bytes=0))
        assert logs.write_refusal("t", 0, 100) is None
    finally:
        logs.close()


def test_once_per_key_logs_one_warning_per_partition_per_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    warnings = OncePerKey(logging.getLogger("t"), clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for _ in range(50):
            warnings.warn(("a", 0), "full %s", "a-0")
            warnings.warn(("a", 1), "full %s", "a-1")
        now[0] += 61
        warnings.warn(("a", 0), "full %s", "a-0")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["full a-0", "full a-1", "full a-0 (49 more like it not logged)"]
    assert all(r.exc_info is None for r in caplog.records)
