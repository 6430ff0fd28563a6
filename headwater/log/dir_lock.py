"""The exclusive lock on a data directory (Kafka's ``<log.dir>/.lock``).

Two brokers on one directory would both append to the same segment files; the
second must refuse to start. ``fcntl.lockf`` locks belong to the process and go
away with it (kill -9 included), so a stale lock file never blocks a restart.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirLockedError(Exception):
    """Another process holds the data directory's lock; the message says which."""


class DataDirLock:
    """Held from ``acquire`` to ``release``; the file itself stays (as in Kafka)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise DataDirLockedError(
                f"data directory {self.path.parent} is in use by another process "
                f"(lock {self.path} is held); refusing to start"
            ) from exc
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.lockf(fd, fcntl.LOCK_UN)
            os.close(fd)
