"""PLACEHOLDER until txn-log's markers.py is merged (same interface as txn-design.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TxnMarker:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]


TxnCompletionListener = Callable[[int, str, int, bool], None]


@dataclass
class TxnMarkerWriter:
    listeners: list[TxnCompletionListener] = field(default_factory=list)

    async def write(self, marker: TxnMarker) -> dict[tuple[str, int], int]:
        raise NotImplementedError
