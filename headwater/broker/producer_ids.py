"""Allocates producer ids for idempotent producers (InitProducerId).

Ids must never repeat across restarts, or a restarted broker could accept a
new producer's sequence 0 as a duplicate of an old one. Ids are handed out
from blocks whose upper end is persisted before any id of the block is used,
so a crash wastes at most one block and never reuses an id.

In a cluster every broker hands out ids, and a producer keeps its id when
leadership moves, so ids must not collide between brokers either: each
broker then allocates from its own stride, ``local * STRIDE + broker.id``.
(Kafka allocates blocks through ZooKeeper's ``/latest_producer_id_block``;
a stride needs no coordination and keeps 2^53 ids per broker.)
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK = 1000
#: Producer ids of broker ``b`` are ``n * STRIDE + b`` in a cluster (broker ids < STRIDE).
STRIDE = 1024


class ProducerIdAllocator:
    def __init__(self, path: Path, broker_id: int | None = None) -> None:
        if broker_id is not None and not 0 <= broker_id < STRIDE:
            raise ValueError(f"broker.id must be in [0, {STRIDE}) in a cluster, not {broker_id}")
        self._broker_id = broker_id
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
        if self._broker_id is not None:
            return pid * STRIDE + self._broker_id
        return pid
