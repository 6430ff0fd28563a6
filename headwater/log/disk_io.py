"""The one place where the log writes, syncs and reads segment bytes, with a test seam.

Every ``pwrite``, ``fsync`` and ``pread`` of a segment goes through here, so a
failing disk is seen in one way everywhere: an ``OSError`` that the log turns
into KAFKA_STORAGE_ERROR and the log directory into an offline directory
(KIP-112). Tests that cannot break a real device (device-mapper's ``error``
target needs ``/dev/mapper``, absent on the machines this runs on) make the
I/O under chosen directories fail with ``EIO`` here instead:

- in-process, with ``FAULTS.fail_under(path)``;
- in a broker process, by starting it with ``HEADWATER_TEST_DISK_FAULTS`` naming a
  control file that lists one directory per line, read again whenever it changed (its
  size and mtime are looked at on every call), so that every write after the test's
  write of the file fails: a stale copy kept for 100 ms let a whole workload through
  and the broker never met the fault.

Nothing else enables the seam: with neither set, each call costs one attribute test.
"""

from __future__ import annotations

import errno
import os

CONTROL_ENV = "HEADWATER_TEST_DISK_FAULTS"


class DiskFaults:
    """Directories under which segment I/O fails with EIO (tests only)."""

    def __init__(self, control_file: str | None = None) -> None:
        self._prefixes: tuple[str, ...] = ()
        self._control = control_file
        #: (mtime_ns, size, inode) of the control file when last read; None: not read.
        self._seen: tuple[int, int, int] | None = None
        self.active = control_file is not None

    def fail_under(self, path: str | os.PathLike[str]) -> None:
        self._prefixes = (*self._prefixes, _prefix(path))
        self.active = True

    def clear(self) -> None:
        self._prefixes = ()
        self._seen = None
        self.active = self._control is not None

    def _refresh(self) -> None:
        """Reread the control file when it changed (one stat per call; tests only)."""
        if self._control is None:
            return
        try:
            st = os.stat(self._control)
        except FileNotFoundError:
            self._seen = None
            self._prefixes = ()
            return
        seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        if seen == self._seen:
            return
        try:
            with open(self._control) as f:
                lines = [line.strip() for line in f if line.strip()]
        except FileNotFoundError:
            lines = []
        self._seen = seen
        self._prefixes = tuple(_prefix(line) for line in lines)

    def check(self, path: str) -> None:
        """Raise EIO when ``path`` lies under a failing directory."""
        self._refresh()
        full = os.path.realpath(path)
        for prefix in self._prefixes:
            if full.startswith(prefix):
                raise OSError(errno.EIO, "injected I/O error (test seam)", path)


def _prefix(path: str | os.PathLike[str]) -> str:
    """A directory as compared: absolute, symlinks resolved, with a trailing separator."""
    return os.path.join(os.path.realpath(path), "")


FAULTS = DiskFaults(os.environ.get(CONTROL_ENV) or None)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int, path: str) -> None:
    """Write all of ``data`` at ``position`` (a short write continues)."""
    if FAULTS.active:
        FAULTS.check(path)
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def fsync(fd: int, path: str) -> None:
    if FAULTS.active:
        FAULTS.check(path)
    os.fsync(fd)


def pread(fd: int, length: int, position: int, path: str) -> bytes:
    if FAULTS.active:
        FAULTS.check(path)
    return os.pread(fd, length, position)
