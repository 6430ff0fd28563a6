"""The aborted-transaction index of one segment (Kafka's TransactionIndex, ``.txnindex``).

When an ABORT marker completes a transaction, the log appends an entry to
the index of the segment the marker went into: producer id, the first and
last offset of the transaction, and the last stable offset at that moment.
A read_committed fetch then answers "which aborted transactions overlap the
records I return" from these small files instead of reading any records,
which is what keeps read_committed zero-copy: the consumer filters.

The file is Kafka's: 34-byte big-endian entries ``version int16 (0),
producerId int64, firstOffset int64, lastOffset int64, lastStableOffset
int64``, in the order the markers were written. Segments without an aborted
transaction have no file. Entries are kept in memory once read (aborts are
rare and an entry is small), so a fetch costs no I/O after the first.
"""

from __future__ import annotations

import contextlib
import os
import struct
from typing import NamedTuple

from headwater.log.handles import FileHandleCache
from headwater.protocol.fetch_types import AbortedTransaction

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    """One entry of the index."""

    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the ABORT marker
    last_stable_offset: int  # the partition's LSO once this transaction was decided

    def to_fetch(self) -> AbortedTransaction:
        return AbortedTransaction(self.producer_id, self.first_offset)


class TxnIndexSearch(NamedTuple):
    """Entries overlapping a range, and whether later segments could hold more."""

    aborted: list[AbortedTxn]
    complete: bool


class TransactionIndex:
    """The ``.txnindex`` of one segment: read once, appended as aborts complete."""

    __slots__ = ("_entries", "_handles", "path")

    def __init__(self, path: str, handles: FileHandleCache, *, exists: bool | None = None) -> None:
        self.path = path
        self._handles = handles
        # None: not read yet. A caller that listed the directory may say the
        # file does not exist, which saves a failed open per segment.
        self._entries: list[AbortedTxn] | None = None if exists is not False else []

    def _load(self) -> list[AbortedTxn]:
        entries = self._entries
        if entries is None:
            entries = []
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            whole = len(data) - len(data) % ENTRY_SIZE
            for pos in range(0, whole, ENTRY_SIZE):
                version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
                if version != VERSION:
                    break  # not ours to read: the rest is cut off, as a torn tail would be
                entries.append(AbortedTxn(pid, first, last, lso))
            if whole != len(data) or len(entries) * ENTRY_SIZE != len(data):
                self._truncate_file(len(entries))  # a torn write at the end
            self._entries = entries
        return entries

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._load())

    @property
    def is_empty(self) -> bool:
        return not self._load()

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; markers complete in offset order, so entries stay sorted by last offset."""
        entries = self._load()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"{self.path}: aborted transaction ending at {txn.last_offset} "
                f"does not follow {entries[-1].last_offset}"
            )
        handle = self._handles.get(self.path, create=True)
        data = ENTRY.pack(VERSION, *txn)
        os.pwrite(handle.fileno(), data, len(entries) * ENTRY_SIZE)
        entries.append(txn)

    def collect(self, start_offset: int, upper_bound_offset: int) -> TxnIndexSearch:
        """Entries with last offset >= ``start_offset`` and first offset < ``upper_bound_offset``.

        ``complete`` (Kafka's rule) once an entry's last stable offset reaches
        the upper bound: every transaction starting before the bound was
        decided by then, so no later segment can list another one.
        """
        found: list[AbortedTxn] = []
        for txn in self._load():
            if txn.last_offset >= start_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearch(found, True)
        return TxnIndexSearch(found, False)

    def truncate_to(self, offset: int) -> None:
        """Forget the transactions whose marker is at or after ``offset``."""
        entries = self._load()
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep != len(entries):
            del entries[keep:]
            self._truncate_file(keep)

    def reset(self) -> None:
        """Empty the index (recovery rebuilds it from the segment's markers)."""
        self._entries = []
        self._truncate_file(0)

    def _truncate_file(self, count: int) -> None:
        if count == 0:
            self._handles.forget(self.path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return
        os.truncate(self.path, count * ENTRY_SIZE)

    def flush(self) -> None:
        if self._entries:
            os.fsync(self._handles.get(self.path, create=True).fileno())

    def delete(self) -> None:
        self._handles.forget(self.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._entries = []

    def forget_cache(self) -> None:
        """Drop the in-memory entries (the file is read again on next use)."""
        self._entries = None
