"""The free-space floor of a log directory: when Produce is refused before the disk is full.

Kafka has no such floor: a full disk fails a write with an ``IOException`` and
takes the whole directory offline (KIP-112). Redpanda refuses producers below a
free-space threshold so that its own metadata always has room, and keeps
serving reads; Headwater does the same. Below ``log.dir.free.space.min.bytes``
free bytes a directory refuses client Produce with KAFKA_STORAGE_ERROR, while
the checkpoints, the metadata snapshot, the cleaner, the coordinators and
replica fetchers still write into the room left above the truly full disk.
Writes resume by themselves once space returns: every decision re-reads the
volume's free space (at most every ``REFRESH_S``), with no restart.

:class:`SpaceFloor` is the pure decision; :class:`DirSpace` adds the clock and
``statvfs`` for one directory.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Kafka-style name of the floor (no Kafka equivalent; the ``log.dir.`` family).
FREE_SPACE_MIN_BYTES_KEY = "log.dir.free.space.min.bytes"
#: 64 MiB: a few checkpoint, snapshot and coordinator writes, and a segment roll or two.
DEFAULT_FREE_SPACE_MIN_BYTES = 64 * 1024 * 1024
#: How stale a reading of free space may be (one ``statvfs`` per directory at most).
REFRESH_S = 0.25

#: The errors that mean "no room", not "the device is failing".
FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_full_disk_error(exc: OSError) -> bool:
    return exc.errno in FULL_DISK_ERRNOS


@dataclass(frozen=True, slots=True)
class SpaceFloor:
    """The rule: a write of ``size`` bytes is refused when it would leave less than the floor."""

    min_free_bytes: int

    def refuses(self, usable_bytes: int, size: int = 0) -> bool:
        return usable_bytes - size < self.min_free_bytes


@dataclass(frozen=True, slots=True)
class SpaceReading:
    usable_bytes: int
    total_bytes: int


def read_space(path: str) -> SpaceReading:
    """What an unprivileged writer may still use (``f_bavail``), as Kafka's usable bytes."""
    st = os.statvfs(path)
    return SpaceReading(st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)


class DirSpace:
    """One directory's free space, read at most every ``REFRESH_S``, and its floor."""

    def __init__(
        self,
        path: str,
        floor: SpaceFloor,
        *,
        clock: Callable[[], float] = time.monotonic,
        reader: Callable[[str], SpaceReading] = read_space,
    ) -> None:
        self.path = path
        self.floor = floor
        self._clock = clock
        self._reader = reader
        self._read_at = -float("inf")
        self._reading = SpaceReading(1 << 62, 1 << 62)
        #: Free bytes when a write last met ENOSPC: the directory counts as full
        #: until a reading shows more room than that (space was freed).
        self._full_at: int | None = None

    def reading(self) -> SpaceReading:
        now = self._clock()
        if now - self._read_at >= REFRESH_S:
            self._read_at = now
            try:
                self._reading = self._reader(self.path)
            except OSError:
                pass  # keep the last reading; a failing device is handled elsewhere
            else:
                if self._full_at is not None and self._reading.usable_bytes > self._full_at:
                    self._full_at = None
        return self._reading

    def below_floor(self, size: int = 0) -> bool:
        """Whether a client write of ``size`` bytes is refused here now."""
        return self.floor.refuses(self.reading().usable_bytes, size)

    @property
    def is_full(self) -> bool:
        """Below the floor, or a write met ENOSPC since the last time space grew
        (what health and the metric report)."""
        self.reading()
        return self._full_at is not None or self.floor.refuses(self._reading.usable_bytes)

    def note_full(self) -> None:
        """A write met ENOSPC: full until space grows; the next question reads again."""
        self._read_at = -float("inf")
        self._full_at = self.reading().usable_bytes
