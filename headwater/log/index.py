"""Sparse offset and time indexes of one segment (Kafka's OffsetIndex / TimeIndex).

An index holds one entry per ``index_interval_bytes`` of log, so it is small
enough to keep in two parallel ``array`` columns and binary-search with
``bisect``; it is read from its file only on first use, which is what keeps
idle partitions free. Entries are appended to the file as they are made and
the file can always be rebuilt from the log, so it is never trusted blindly:
the segment checks it and rebuilds it when it is missing or inconsistent.

Entries are big-endian on disk, as in Kafka: offset index = relative offset
u32 + file position u32; time index = timestamp i64 + relative offset u32.
Offsets are stored relative to the segment's base offset to fit in 32 bits.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from typing import ClassVar

from headwater.log.handles import FileHandleCache

MAX_RELATIVE_OFFSET = 0xFFFFFFFF


class _SparseIndex:
    """File plumbing shared by both indexes: lazy load, append, truncate."""

    _entry: ClassVar[struct.Struct]
    _key_type: ClassVar[str]
    _value_type: ClassVar[str]

    __slots__ = (
        "_handles",
        "_keys",
        "_loaded",
        "_malformed",
        "_missing",
        "_values",
        "base_offset",
        "path",
    )

    def __init__(self, path: str, base_offset: int, handles: FileHandleCache) -> None:
        self.path = path
        self.base_offset = base_offset
        self._handles = handles
        self._keys: array[int] = array(self._key_type)
        self._values: array[int] = array(self._value_type)
        self._loaded = False
        self._missing = False
        self._malformed = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        try:
            fd = self._handles.get(self.path).fileno()
        except FileNotFoundError:
            self._missing = True
            return
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        whole = len(data) - len(data) % self._entry.size
        self._malformed = whole != len(data)
        for key, value in self._entry.iter_unpack(memoryview(data)[:whole]):
            self._keys.append(key)
            self._values.append(value)

    @property
    def is_missing(self) -> bool:
        self._load()
        return self._missing

    @property
    def entry_count(self) -> int:
        self._load()
        return len(self._keys)

    def _append_entry(self, key: int, value: int) -> None:
        handle = self._handles.get(self.path, create=True)
        os.pwrite(handle.fileno(), self._entry.pack(key, value), len(self._keys) * self._entry.size)
        self._missing = False
        self._keys.append(key)
        self._values.append(value)

    def _truncate_entries(self, count: int) -> None:
        del self._keys[count:]
        del self._values[count:]
        handle = self._handles.get(self.path, create=True)
        os.ftruncate(handle.fileno(), count * self._entry.size)
        self._missing = False
        self._malformed = False

    def reset(self) -> None:
        """Empty the index (before a rebuild)."""
        self._loaded = True
        self._truncate_entries(0)

    def flush(self) -> None:
        if self._loaded and not self._missing:
            os.fsync(self._handles.get(self.path, create=True).fileno())

    def delete(self) -> None:
        self._handles.forget(self.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._keys = array(self._key_type)
        self._values = array(self._value_type)
        self._loaded = True
        self._missing = True


def _strictly_increasing(values: array[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


class OffsetIndex(_SparseIndex):
    """Offset -> file position of the batch starting at that offset."""

    _entry = struct.Struct(">II")
    _key_type = "I"  # relative offset
    _value_type = "I"  # position in the .log file
    __slots__ = ()

    def lookup(self, offset: int) -> tuple[int, int]:
        """The greatest entry at or below ``offset``; (base offset, 0) when there is none."""
        self._load()
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def append(self, offset: int, position: int) -> None:
        self._load()
        relative = offset - self.base_offset
        if not 0 <= relative <= MAX_RELATIVE_OFFSET:
            raise ValueError(f"offset {offset} does not fit segment {self.base_offset}")
        if self._keys and relative <= self._keys[-1]:
            raise ValueError(f"offset {offset} is not above the last index entry")
        self._append_entry(relative, position)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry at or above ``offset``."""
        self._load()
        self._truncate_entries(bisect_left(self._keys, offset - self.base_offset))

    def last_entry(self) -> tuple[int, int] | None:
        self._load()
        if not self._keys:
            return None
        return self.base_offset + self._keys[-1], self._values[-1]

    def entry_at_or_after_position(self, position: int) -> tuple[int, int] | None:
        """The first entry whose batch starts at or after ``position`` in the log file."""
        self._load()
        i = bisect_left(self._values, position)
        if i == len(self._values):
            return None
        return self.base_offset + self._keys[i], self._values[i]

    def is_consistent(self, segment_size: int) -> bool:
        """False when the file cannot describe a log of ``segment_size`` bytes."""
        self._load()
        if self._missing or self._malformed:
            return False
        if self._values and self._values[-1] >= segment_size:
            return False
        return _strictly_increasing(self._keys) and _strictly_increasing(self._values)


class TimeIndex(_SparseIndex):
    """Max timestamp so far -> offset of the first batch that reached it."""

    _entry = struct.Struct(">qI")
    _key_type = "q"  # timestamp
    _value_type = "I"  # relative offset
    __slots__ = ()

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The greatest entry at or below ``timestamp``; (-1, base offset) when there is none."""
        self._load()
        i = bisect_right(self._keys, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._keys[i], self.base_offset + self._values[i]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry only if it raises the max timestamp (entries stay monotonic)."""
        self._load()
        if self._keys and timestamp <= self._keys[-1]:
            return
        relative = offset - self.base_offset
        if not 0 <= relative <= MAX_RELATIVE_OFFSET:
            raise ValueError(f"offset {offset} does not fit segment {self.base_offset}")
        if self._values and relative < self._values[-1]:
            raise ValueError(f"offset {offset} is below the last time index entry")
        self._append_entry(timestamp, relative)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry pointing at or above ``offset``."""
        self._load()
        self._truncate_entries(bisect_left(self._values, offset - self.base_offset))

    def last_entry(self) -> tuple[int, int] | None:
        self._load()
        if not self._keys:
            return None
        return self._keys[-1], self.base_offset + self._values[-1]

    def is_consistent(self) -> bool:
        self._load()
        if self._missing or self._malformed:
            return False
        values = self._values
        return _strictly_increasing(self._keys) and all(
            a <= b for a, b in itertools.pairwise(values)
        )
