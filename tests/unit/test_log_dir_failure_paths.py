"""The failing-log-directory paths that used to let an I/O error by (issue 31 item 3,
KIP-112), each through the disk_io test seam (no sockets, no broker process):

- a fault written to the seam's control file is seen by the very next write (a copy
  kept for 100 ms let a whole workload through, and the broker never met the fault);
- a close that meets a failing directory takes it offline and goes on (it raised, so a
  stop ended in a traceback: "exited on KafkaStorageError" in a JBOD CI run);
- a lazy load, a roll and retention met on a failing disk tell the directory and raise
  KAFKA_STORAGE_ERROR (they raised a bare OSError that timers and fetchers took for
  something else, and the directory was never told);
- several threads meeting the failure at once tell the broker once;
- a directory named another way (trailing separator, symlink) is still the one failing,
  and a path naming no directory is not dropped.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.log import disk_io
from headwater.log.config import LogConfig
from headwater.log.errors import KafkaStorageError
from headwater.log.isolation import Isolation
from headwater.log.log_directory import CLEAN_SHUTDOWN_FILE, LogDirectory
from tests.unit.test_log import NOW, batch


@pytest.fixture
def faults() -> Iterator[disk_io.DiskFaults]:
    yield disk_io.FAULTS
    disk_io.FAULTS.clear()


def open_jbod(tmp_path: Path, told: list[tuple[str, str]], **config: int) -> LogDirectory:
    logs = LogDirectory(
        tmp_path / "a", LogConfig(free_space_min_bytes=0, **config), [tmp_path / "b"]
    )
    logs.open()
    logs.on_offline = lambda path, reason: told.append((path, reason))
    logs.create_topic("t", 4)
    return logs


def in_dir(logs: LogDirectory, path: Path) -> list[tuple[str, int]]:
    for p in range(4):
        logs.log("t", p)
    found = logs.partitions_in(str(path))
    assert found
    return found


def test_a_control_file_fault_is_seen_by_the_next_write(tmp_path: Path) -> None:
    control = tmp_path / "faults"
    control.write_text("")
    seam = disk_io.DiskFaults(str(control))
    target = tmp_path / "data" / "t-0" / "00000000000000000000.log"
    seam.check(str(target))  # read once: nothing fails
    control.write_text(f"{tmp_path / 'data'}\n")
    with pytest.raises(OSError, match="injected"):
        seam.check(str(target))  # at once, not up to 100 ms later
    control.write_text("")
    seam.check(str(target))


def test_a_control_file_names_a_directory_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    control = tmp_path / "faults"
    control.write_text(f"{tmp_path / 'link'}/\n")
    seam = disk_io.DiskFaults(str(control))
    with pytest.raises(OSError):
        seam.check(str(tmp_path / "real" / "t-0" / "x.log"))
    seam.check(str(tmp_path / "realistic" / "x.log"))  # a prefix of the name is not under it


def test_a_close_meeting_a_failing_extra_directory_goes_on(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    told: list[tuple[str, str]] = []
    logs = open_jbod(tmp_path, told)
    for topic, partition in in_dir(logs, tmp_path / "a") + in_dir(logs, tmp_path / "b"):
        logs.log(topic, partition).append(batch(2), NOW)  # unflushed: the close fsyncs
    faults.fail_under(tmp_path / "b")
    logs.close()  # raised KafkaStorageError out of the broker's stop
    assert [path for path, _ in told] == [str(tmp_path / "b")]
    assert (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()
    assert not (tmp_path / "b" / CLEAN_SHUTDOWN_FILE).exists()
    assert not logs.lock.held and not any(e.lock.held for e in logs.extra)


def test_a_close_meeting_a_failing_first_directory_tells_it_and_leaves_no_marker(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    told: list[tuple[str, str]] = []
    logs = open_jbod(tmp_path, told)
    for p in range(4):
        logs.log("t", p).append(batch(2), NOW)
    faults.fail_under(tmp_path / "a")
    logs.close()
    assert [path for path, _ in told] == [str(tmp_path / "a")]
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / "b" / CLEAN_SHUTDOWN_FILE).exists()
    assert not logs.lock.held


def test_a_lazy_load_on_a_failing_disk_tells_the_directory(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    told: list[tuple[str, str]] = []
    logs = open_jbod(tmp_path, told)
    key = in_dir(logs, tmp_path / "b")[0]
    log = logs.log(*key)
    log.append(batch(3), NOW)
    log.close()  # the next use loads it from disk, through the seam
    faults.fail_under(tmp_path / "b")
    with pytest.raises(KafkaStorageError):  # was a bare OSError, the directory untold
        log.append_as_follower(batch(1), NOW)  # loads first
    assert [path for path, _ in told] == [str(tmp_path / "b")]
    assert not log.is_loaded  # not half loaded with a log end of 0
    with pytest.raises(KafkaStorageError):
        _ = log.log_end_offset
    assert logs.offline is None


def test_roll_and_retention_go_on_past_a_failing_extra_directory(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    told: list[tuple[str, str]] = []
    logs = open_jbod(tmp_path, told, segment_ms=1000)
    in_a, in_b = in_dir(logs, tmp_path / "a"), in_dir(logs, tmp_path / "b")
    for topic, partition in in_a + in_b:
        logs.log(topic, partition).append(batch(1), NOW)
    faults.fail_under(tmp_path / "b")
    rolled = logs.roll_due(NOW + 10_000)  # raised OSError out of housekeeping
    assert rolled == len(in_a)
    assert all(len(logs.log(*key).segments) == 2 for key in in_a)
    assert [path for path, _ in told] == [str(tmp_path / "b")]
    assert logs.roll_due(NOW + 20_000) == 0  # the offline directory is not touched again
    logs.run_retention(NOW + 20_000)
    assert [path for path, _ in told] == [str(tmp_path / "b")]


def test_threads_meeting_the_failure_together_tell_it_once(tmp_path: Path) -> None:
    """Many threads failing one directory at the same moment: one call of on_offline
    (a stress check of the lock in ``fail``; the race it closes is a few bytecodes wide
    and did not show here without it)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for round_ in range(10):
            told: list[tuple[str, str]] = []
            logs = LogDirectory(tmp_path / f"r{round_}", LogConfig(free_space_min_bytes=0))
            logs.open()

            def slow_listener(path: str, reason: str, told: list[tuple[str, str]] = told) -> None:
                told.append((path, reason))

            logs.on_offline = slow_listener
            logs.create_topic("t", 1)
            start = threading.Barrier(8)

            def fail(logs: LogDirectory = logs, start: threading.Barrier = start) -> None:
                start.wait()
                for _ in range(50):
                    logs.fail("injected", str(logs.path))

            threads = [threading.Thread(target=fail) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(told) == 1, told
            logs.close()
    finally:
        sys.setswitchinterval(before)


def test_a_directory_named_another_way_is_the_one_failing(tmp_path: Path) -> None:
    told: list[tuple[str, str]] = []
    logs = open_jbod(tmp_path, told)
    in_b = in_dir(logs, tmp_path / "b")
    logs.fail("injected", os.path.join(str(tmp_path / "b"), ""))  # trailing separator
    assert told == [(str(tmp_path / "b"), "injected")]
    assert logs.dir_offline(str(tmp_path / "b") + "/") == "injected"
    assert all(logs.log(*key).offline == "injected" for key in in_b)
    assert logs.offline is None
    logs.fail("injected", str(tmp_path / "elsewhere"))  # dropped silently before
    assert logs.offline == "injected"
    assert [path for path, _ in told] == [str(tmp_path / "b"), str(tmp_path / "a")]


def test_a_symlinked_extra_directory_fails_alone(
    tmp_path: Path, faults: disk_io.DiskFaults
) -> None:
    (tmp_path / "real-b").mkdir()
    (tmp_path / "b").symlink_to(tmp_path / "real-b")
    told: list[tuple[str, str]] = []
    logs = open_jbod(tmp_path, told)
    key = in_dir(logs, tmp_path / "b")[0]
    faults.fail_under(tmp_path / "real-b")  # the seam sees the real path
    with pytest.raises(KafkaStorageError):
        logs.log(*key).append(batch(1), NOW)
    assert [path for path, _ in told] == [str(tmp_path / "b")]
    assert logs.offline is None


def test_a_directory_failing_before_the_start_leaves_the_broker_on_the_others(
    tmp_path: Path,
) -> None:
    """KIP-112 at start: an extra directory that cannot be opened is offline from the
    start and the broker opens on the others. Its partitions answer KAFKA_STORAGE_ERROR
    and are not created again, empty, in another directory (Kafka refuses a log that is
    not new while a directory is offline); a topic created afterwards goes to the
    directories that work, and nothing scans the failed one."""
    told: list[tuple[str, str]] = []
    logs = open_jbod(tmp_path, told)
    on_b = in_dir(logs, tmp_path / "b")
    on_a = in_dir(logs, tmp_path / "a")
    for topic, partition in on_a + on_b:
        logs.log(topic, partition).append(batch(2), NOW)
    logs.close()
    shutil.rmtree(tmp_path / "b")
    (tmp_path / "b").write_bytes(b"the disk is gone")  # mkdir and scans fail: EEXIST/ENOTDIR

    reopened = LogDirectory(tmp_path / "a", LogConfig(free_space_min_bytes=0), [tmp_path / "b"])
    reopened.open()
    try:
        assert reopened.offline_dirs() == [str(tmp_path / "b")]
        assert reopened.online_dirs == [tmp_path / "a"]
        for topic, partition in on_a:
            read = reopened.log(topic, partition).read(0, 1 << 20, Isolation.LOG_END, True)
            assert read.records is not None
        for topic, partition in on_b:
            failed = reopened.log(topic, partition)
            assert failed.offline is not None
            assert reopened.dir_of(topic, partition) == str(tmp_path / "b")
            with pytest.raises(KafkaStorageError):
                failed.read(0, 1 << 20, Isolation.LOG_END, True)
        reopened.create_topic("later", 2)
        assert {reopened.dir_of("later", p) for p in range(2)} == {str(tmp_path / "a")}
        assert reopened.stray_dirs() == [] and reopened.partition_dirs()
    finally:
        reopened.close()
