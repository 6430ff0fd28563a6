"""The leader-epoch cache of one partition: at which offset each leader epoch began.

Replication needs it to find where two replicas' logs diverge (KIP-101,
KIP-279): a follower asks the leader for the end offset of its latest epoch
(OffsetsForLeaderEpoch, or the Fetch v12+ diverging-epoch field) and
truncates there, instead of trusting its high watermark, which loses or
duplicates acknowledged records after a double failover.

The rules follow Kafka's ``LeaderEpochFileCache`` (assign, endOffsetFor,
truncateFromEnd, truncateFromStart); the entries are kept strictly increasing
in both epoch and start offset. The cache is persisted as
``leader-epoch-checkpoint`` in Kafka's text format, rewritten atomically and
only when an entry changes (a new epoch, a truncation): never per append.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from headwater.log.checkpoint_file import (
    CorruptCheckpointError,
    overwrite_checkpoint,
    read_checkpoint,
    write_checkpoint,
)

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

log = logging.getLogger(__name__)


class EpochEntry(NamedTuple):
    """Leader epoch ``epoch`` wrote its first batch at ``start_offset``."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch start offsets of one partition, persisted to ``path`` when they change.

    Not thread-safe: like the ``Log`` that owns it, it lives on the event loop.
    """

    __slots__ = ("_entries", "_epochs", "path")

    def __init__(self, path: Path | str, entries: Iterable[EpochEntry] = ()) -> None:
        """A cache over ``entries`` (as read or rebuilt by the caller); writes nothing."""
        self.path = Path(path)
        self._entries: list[EpochEntry] = []
        self._epochs: list[int] = []  # the epochs of _entries, for bisect
        for entry in entries:
            self._assign(EpochEntry(*entry))

    @staticmethod
    def read_file(path: Path | str) -> list[EpochEntry] | None:
        """The entries stored at ``path``; None when the file is missing or unreadable.

        A corrupt file is logged and treated as missing: the log can rebuild
        the cache from its batch headers, which are the truth it summarises.
        """
        try:
            rows = read_checkpoint(path, 2)
            if rows is None:
                return None
            return [EpochEntry(int(epoch), int(start)) for epoch, start in rows]
        except (CorruptCheckpointError, ValueError, OSError) as e:
            log.warning("ignoring unreadable leader-epoch checkpoint %s: %s", path, e)
            return None

    # -- queries ----------------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        """The epoch of the newest entry; -1 when the cache is empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= ``epoch``, the offset where that epoch ended).

        The end is the start offset of the next higher epoch, or the log end
        when ``epoch`` is the latest one (a leader is still writing it).
        ``(-1, -1)`` when undefined: an undefined or unknown-future epoch.
        An epoch older than every entry answers itself with the first entry's
        start offset, as Kafka does: that data is gone, and a follower must
        replicate from the leader's start.
        """
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._entries[-1].epoch:
            return epoch, log_end_offset
        higher = bisect_right(self._epochs, epoch)  # first entry with a larger epoch
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that wrote ``offset`` (-1 when before the first entry or empty)."""
        starts = [entry.start_offset for entry in self._entries]
        i = bisect_right(starts, offset)
        return self._entries[i - 1].epoch if i else UNDEFINED_EPOCH

    # -- changes ----------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True (and persisted) if it changed.

        Kafka's rule: nothing happens when ``epoch`` is the latest epoch and
        ``start_offset`` is not earlier than its start (every append of the
        current leader lands here). Otherwise newer entries that conflict
        with the new one (epoch >= ``epoch`` or start >= ``start_offset``)
        are dropped first, which keeps both columns strictly increasing.
        """
        if not self._assign(EpochEntry(epoch, start_offset)):
            return False
        self._write()
        return True

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        entries = self._entries
        if (
            entries
            and entries[-1].epoch == entry.epoch
            and entry.start_offset >= entries[-1].start_offset
        ):
            return False
        removed: list[EpochEntry] = []
        while entries and (
            entries[-1].epoch >= entry.epoch or entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(entries.pop())
            self._epochs.pop()
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            # Only surprising when data had been written under a removed epoch.
            log.warning(
                "%s: new epoch entry %s truncated conflicting entries %s", self.path, entry, removed
            )
        entries.append(entry)
        self._epochs.append(entry.epoch)
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after ``end_offset`` (the log was truncated there)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
            self._epochs.pop()
        self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly before ``start_offset`` (the log start moved there).

        The last entry starting at or before ``start_offset`` stays, moved to
        start there, so the epoch of the first remaining record is still known.
        """
        keep_from = 0
        while (
            keep_from < len(self._entries) and self._entries[keep_from].start_offset <= start_offset
        ):
            keep_from += 1
        if keep_from == 0:
            return
        first = EpochEntry(self._entries[keep_from - 1].epoch, start_offset)
        if keep_from == 1 and self._entries[0] == first:
            return
        self._entries[:keep_from] = [first]
        self._epochs[:keep_from] = [first.epoch]
        self._write()

    def clear(self) -> None:
        """Forget every entry (the log was emptied and starts afresh)."""
        if self._entries:
            self._entries.clear()
            self._epochs.clear()
            self._write()

    def _write(self) -> None:
        """Persist the entries; a partition directory not created yet has nothing to persist.

        Rewritten in place (created atomically the first time), not fsynced.
        Each new epoch wrote this file on the event loop with two fsyncs, on
        every leader and again on every follower's first append of the epoch:
        at 4,000 partitions half the loop's time in a failover, and the first
        acks=all write to each partition waited on it (issue 33 item 2); then
        the file creation and rename of each write were a fifth of the loop's
        at 50,000. A process crash loses nothing (the page cache stays); after
        a machine crash the file may be an older version, whose last epoch then
        differs from the last batch's, or torn, which does not parse: either
        way ``Log._load_epoch_cache`` rebuilds the entries from the batch
        headers, which are the truth.
        """
        if not overwrite_checkpoint(self.path, self._entries) and self.path.parent.is_dir():
            write_checkpoint(self.path, self._entries, durable=False)
