"""The entries a coordinator writes to its state log and replays from it.

A coordinator (group or transaction) is sans-I/O: it appends key/value
entries through a ``StateLog`` and rebuilds itself from ``replay()``. The
broker supplies the real log (``partition_state_log.PartitionStateLog`` over
a partition of ``__consumer_offsets`` or ``__transaction_state``);
``InMemoryStateLog`` serves tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from headwater.protocol.error_codes import ErrorCode

LogEntry = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class TxnLogEntry:
    """A record of a TxnOffsetCommit: written in a transactional batch of
    ``producer_id``, it counts only once that producer's COMMIT marker follows."""

    producer_id: int
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class TxnEnd:
    """A COMMIT or ABORT marker of ``producer_id`` in the state log."""

    producer_id: int
    committed: bool


#: What a replay yields: plain records, and transactional records with their markers.
ReplayItem = LogEntry | TxnLogEntry | TxnEnd


class StateLog(Protocol):
    """The durable store the coordinator writes through (adapted by the broker)."""

    def append(self, entries: Sequence[LogEntry]) -> int:
        """Append all entries atomically; None value = tombstone.

        Returns the log's next offset after the write: the offset the caller
        waits for when the write must be replicated before it is answered.
        Raises `AppendFailed` when nothing was written.
        """
        ...

    def append_transactional(
        self, entries: Sequence[LogEntry], producer_id: int, producer_epoch: int
    ) -> int:
        """Append entries as one transactional batch of the producer (TxnOffsetCommit):
        the broker's COMMIT/ABORT marker for the producer decides whether they count."""
        ...

    def replay(self) -> Iterator[ReplayItem]:
        """Every entry ever appended, oldest first, transactional ones marked as such."""
        ...


class AppendFailed(Exception):
    """The state log refused a write (too large, not the leader, disk error...).

    Carries the log's error code; the coordinator answers with its own
    equivalent (`coordinator/replication.py`) instead of failing the request.
    """

    def __init__(self, error: ErrorCode, reason: str = "") -> None:
        super().__init__(reason or error.name)
        self.error = error


class InMemoryStateLog:
    """A `StateLog` in a list: for tests and for brokers run without persistence."""

    def __init__(self) -> None:
        self.entries: list[ReplayItem] = []

    def append(self, entries: Sequence[LogEntry]) -> int:
        self.entries.extend(entries)
        return len(self.entries)

    def append_transactional(
        self, entries: Sequence[LogEntry], producer_id: int, producer_epoch: int
    ) -> int:
        self.entries.extend(TxnLogEntry(producer_id, key, value) for key, value in entries)
        return len(self.entries)

    def append_marker(self, producer_id: int, committed: bool) -> int:
        """What the broker's marker writer does to a real log (for tests)."""
        self.entries.append(TxnEnd(producer_id, committed))
        return len(self.entries)

    def replay(self) -> Iterator[ReplayItem]:
        return iter(list(self.entries))

    @property
    def log_end_offset(self) -> int:
        return len(self.entries)
