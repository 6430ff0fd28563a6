"""The value that travels from the log to the socket writer.

A read from the log returns a *file slice*, never bytes, so that the
network layer can hand the range to ``sendfile`` and the record data
never enters the Python heap (the book chapter's ``FileRecords``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO


@dataclass(frozen=True, slots=True)
class FileSlice:
    """``size`` bytes of an open segment file starting at ``position``.

    The slice holds a reference to the file object itself: the handle LRU
    may forget the file while a response is queued, and CPython closes it
    only when the last slice referencing it is gone. No explicit release.
    """

    file: BinaryIO
    position: int
    size: int
    #: Told when reading the slice fails (EIO from ``sendfile``): the log sets it so
    #: that its directory is taken offline, as for a failed read of its own (KIP-112).
    on_read_error: Callable[[OSError], None] | None = field(default=None, compare=False)

    def fileno(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        """Copy the bytes into memory: the fallback when zero-copy is off."""
        return os.pread(self.file.fileno(), self.size, self.position)
