"""A bounded LRU of open segment and index files shared by every log of a broker.

With 100,000 partitions a broker cannot keep three descriptors per segment
open, so no segment owns a file object: each asks this cache for one at the
moment it reads or writes. The cache only *forgets* a file when it evicts
it, never closes it, because a FileSlice queued for ``sendfile`` may still
hold the same object; CPython closes the descriptor when the last reference
goes. So the bound is on files the log layer holds, and in-flight responses
add at most one descriptor each on top.
"""

from __future__ import annotations

import io
import os
from collections import OrderedDict
from typing import BinaryIO

StrPath = str | os.PathLike[str]


class SharedFile(io.FileIO):
    """A file that closes itself, quietly, when its last holder lets go.

    Eviction from the cache must not close a file a queued FileSlice still
    uses, so nobody closes these explicitly; plain ``FileIO`` would then warn
    (ResourceWarning) on every collection. Closing in ``__del__`` is the
    intended end of life here, not a leak.
    """

    def __del__(self) -> None:
        if not self.closed:
            self.close()


class FileHandleCache:
    """Open files by path, least recently used forgotten first."""

    __slots__ = ("_capacity", "_files")

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 1:
            raise ValueError("the file handle cache needs room for at least one file")
        self._capacity = capacity
        self._files: OrderedDict[str, BinaryIO] = OrderedDict()

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str | os.PathLike) and os.fspath(path) in self._files

    def get(self, path: StrPath, *, create: bool = False) -> BinaryIO:
        """An unbuffered read/write file for ``path``; ``create`` makes a missing file.

        Unbuffered because every access is a positional ``pread``/``pwrite``
        or ``sendfile`` on the descriptor: a Python buffer would only go stale.
        """
        key = os.fspath(path)
        files = self._files
        handle = files.get(key)
        if handle is not None:
            files.move_to_end(key)
            return handle
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        fd = os.open(key, flags, 0o644)
        handle = SharedFile(fd, "r+", closefd=True)
        files[key] = handle
        if len(files) > self._capacity:
            files.popitem(last=False)
        return handle

    def forget(self, path: StrPath) -> None:
        """Drop the cached handle of a file that is being deleted or replaced."""
        self._files.pop(os.fspath(path), None)

    def forget_under(self, directory: StrPath) -> None:
        """Drop every cached handle of a directory's files (a deleted partition)."""
        prefix = os.path.join(os.fspath(directory), "")
        for key in [k for k in self._files if k.startswith(prefix)]:
            del self._files[key]

    def clear(self) -> None:
        self._files.clear()
