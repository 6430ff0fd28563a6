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
import threading
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

    #: The file's path (opened by descriptor, its ``name`` is the number): what the
    #: disk_io test seam matches for reads made by ``sendfile``.
    path: str = ""

    def __del__(self) -> None:
        if not self.closed:
            self.close()


class FileHandleCache:
    """Open files by path, least recently used forgotten first.

    Thread-safe (one lock) so that a clean stop can fsync many logs at once
    from a thread pool; on the event loop the lock is never contended.
    """

    __slots__ = ("_by_dir", "_capacity", "_files", "_lock")

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 1:
            raise ValueError("the file handle cache needs room for at least one file")
        self._capacity = capacity
        self._files: OrderedDict[str, BinaryIO] = OrderedDict()
        # directory -> cached paths in it: forgetting a partition's files must
        # not scan the whole cache (a stop closes 100,000 partitions).
        self._by_dir: dict[str, set[str]] = {}
        self._lock = threading.Lock()

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
        with self._lock:
            files = self._files
            handle = files.get(key)
            if handle is not None:
                files.move_to_end(key)
                return handle
            flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
            fd = os.open(key, flags, 0o644)
            handle = SharedFile(fd, "r+", closefd=True)
            handle.path = key
            files[key] = handle
            self._by_dir.setdefault(os.path.dirname(key), set()).add(key)
            if len(files) > self._capacity:
                evicted, _ = files.popitem(last=False)
                self._unindex(evicted)
            return handle

    def _unindex(self, key: str) -> None:
        directory = os.path.dirname(key)
        keys = self._by_dir.get(directory)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_dir[directory]

    def forget(self, path: StrPath) -> None:
        """Drop the cached handle of a file that is being deleted or replaced."""
        key = os.fspath(path)
        with self._lock:
            if self._files.pop(key, None) is not None:
                self._unindex(key)

    def forget_under(self, directory: StrPath) -> None:
        """Drop every cached handle of a directory's files (a deleted or closed partition)."""
        with self._lock:
            for key in list(self._by_dir.pop(os.fspath(directory).rstrip(os.sep), ())):
                self._files.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self._by_dir.clear()
