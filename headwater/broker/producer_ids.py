"""Allocates producer ids for idempotent producers (InitProducerId).

Ids must never repeat across restarts, or a restarted broker could accept a
new producer's sequence 0 as a duplicate of an old one. Ids are handed out
from blocks whose upper end is persisted before any id of the block is used,
so a crash wastes at most one block and never reuses an id.
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK = 1000


class ProducerIdAllocator:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._next = 0
        self._limit = 0
        if path.exists():
            text = path.read_text().strip()
            if text:
                self._next = self._limit = int(text)

    def allocate(self) -> int:
        if self._next >= self._limit:
            self._limit = self._next + BLOCK
            tmp = self._path.with_suffix(".tmp")
            with open(tmp, "w") as fh:
                fh.write(str(self._limit))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self._path)
        pid = self._next
        self._next += 1
        return pid
