"""The data directory lock: a second process cannot take it, the holder's exit frees it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headwater.log.config import LogConfig
from headwater.log.dir_lock import LOCK_FILE, DataDirLock, DataDirLockedError
from headwater.log.log_directory import CLEAN_SHUTDOWN_FILE, LogDirectory

_TRY_LOCK = """
import sys
from pathlib import Path
from headwater.log.dir_lock import DataDirLock, DataDirLockedError
try:
    DataDirLock(Path(sys.argv[1])).acquire()
except DataDirLockedError as exc:
    print(exc)
    sys.exit(3)
"""


def _try_in_other_process(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _TRY_LOCK, str(path)], capture_output=True, text=True, timeout=60
    )


def test_other_process_is_refused_while_held_and_admitted_after(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path)
    lock.acquire()
    refused = _try_in_other_process(tmp_path)
    assert refused.returncode == 3
    assert "in use by another process" in refused.stdout
    assert (tmp_path / LOCK_FILE).exists()
    lock.release()
    assert _try_in_other_process(tmp_path).returncode == 0


def test_log_directory_holds_the_lock_while_open(tmp_path: Path) -> None:
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    assert _try_in_other_process(tmp_path).returncode == 3
    logs.close()
    assert _try_in_other_process(tmp_path).returncode == 0


def test_refused_directory_is_left_alone(tmp_path: Path) -> None:
    """Closing a LogDirectory that never got the lock writes no clean-shutdown marker."""
    logs = LogDirectory(tmp_path, LogConfig())
    logs.lock.acquire = _raise  # type: ignore[method-assign]
    with pytest.raises(DataDirLockedError):
        logs.open()
    logs.close()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def _raise() -> None:
    raise DataDirLockedError("held")
