"""One partition's log: an ordered run of segments (Kafka's UnifiedLog, single replica).

A broker may host 100,000 partitions of which few are busy, so a ``Log`` is
lazy: constructing one touches nothing on disk, the first use lists the
directory and stats the segment files, and files are opened through the
shared handle cache only when read or written. A log whose directory does
not exist is simply empty at offset 0 until its first append creates it.

Offsets: ``log_start_offset`` (first readable), ``log_end_offset`` (next to
be assigned). With one replica the high watermark equals the log end offset;
the *last stable offset* (what read_committed consumers read to) is the
first offset of the oldest open transaction, capped by the high watermark.
Transactions are tracked in the producer table (``producer_state``), saved
in ``<offset>.snapshot`` files at every roll and clean close, and each
segment's aborted transactions are listed in its ``.txnindex``. A *replicated* log (switched
on by the replica manager through ``enable_replication``) keeps a high
watermark of its own, which consumers' reads never pass, and a leader-epoch
cache that followers use to find where their log diverged from the leader's.
The log knows nothing of brokers or ZooKeeper: it is told the high watermark
and the leader epoch, and appends a leader's batches as they come.

Size: one class, ``Log``, whose invariants (offsets, segments, the high
watermark, the last stable offset, producer state, leader epochs, recovery) only
hold together; segments, indexes, producer state, the epoch cache and recovery
details are their own modules.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import shutil
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, NamedTuple, ParamSpec, TypeVar

from headwater.gc_policy import COLLECTOR
from headwater.log.cleaner import CLEANED_SUFFIX, SWAP_SUFFIX, CleanResult, CleanTask, SourceSegment
from headwater.log.cleaner_swap import (
    DELETED_SUFFIX,
    commit_swap,
    delete_files,
    discard_cleaned,
    recover_swaps,
)
from headwater.log.config import LONG_MAX, LogConfig
from headwater.log.errors import (
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, EpochEntry, LeaderEpochCache
from headwater.log.offset_map import first_null_key
from headwater.log.producer_snapshot import (
    CorruptSnapshotError,
    delete_snapshot,
    read_snapshot,
    snapshot_offsets,
    write_snapshot,
)
from headwater.log.producer_state import CompletedTxn, ProducerEntry, ProducerStateTable
from headwater.log.segment import LOG_SUFFIX, Segment
from headwater.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from headwater.protocol.fetch_types import AbortedTransaction
from headwater.protocol.file_slice import FileSlice
from headwater.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    iter_batch_headers,
    parse_batch_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    validate_batches,
)
from headwater.records.compression import decompress
from headwater.records.control import ControlMarker, build_control_batch, parse_control_batch
from headwater.records.errors import CorruptRecordError
from headwater.records.validation import TimestampPolicy, validate_append

log = logging.getLogger(__name__)

LOG_START_OFFSET_FILE = "log-start-offset"
# Where the log cleaner stopped: everything below is clean (Kafka keeps one such
# checkpoint per log directory; one per partition keeps the log self-contained).
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"
# Producer state is rebuilt from the headers of at most this many trailing
# bytes of the log: idempotence only needs the producers of recent batches.
PRODUCER_STATE_SCAN_BYTES = 64 << 20


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1: batches keep their CreateTime
    log_start_offset: int
    duplicate: bool = False  # a producer retry: nothing was written


class ReadResult(NamedTuple):
    records: FileSlice | None  # None: nothing to send (an empty record set on the wire)
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    #: read_committed reads only: the aborted transactions overlapping the records
    aborted_transactions: list[AbortedTransaction] | None = None


class CorruptBatch(NamedTuple):
    """A batch of a closed segment whose CRC-32C the scrubber found wrong (or, with
    ``size`` to the segment's end, bytes it could not even parse as batches)."""

    segment: Segment
    position: int
    size: int
    base_offset: int
    last_offset: int
    reason: str


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _tells_directory(
    method: Callable[Concatenate[Log, _P], _R],
) -> Callable[Concatenate[Log, _P], _R]:
    """A log operation that may touch the disk: refused on an offline directory, and
    an ``OSError`` it meets becomes KAFKA_STORAGE_ERROR with the directory told.

    Without it a raw ``OSError`` from a roll, retention, truncation or a lazy load
    reached timers, fetcher tasks and handlers that took it for a network error (or
    a bug) and the directory never learnt that its disk failed (KIP-112).
    """

    @functools.wraps(method)
    def guarded(self: Log, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        self._check_online()
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise self._storage_error(exc) from None

    return guarded


class LogEvent(enum.Flag):
    """What changed in a log, for its listeners: the one typed event that completes
    parked fetches (consumers and followers), produce waits and session news."""

    APPENDED = enum.auto()
    """New records at the log end (a leader's append, or a follower's copy)."""
    HIGH_WATERMARK_MOVED = enum.auto()
    """Records became readable to consumers (in a log without replicas, every append)."""
    LOG_START_MOVED = enum.auto()
    """Retention or DeleteRecords removed records at the start."""
    TRUNCATED = enum.auto()
    """The log end moved back (a follower's divergence) or the log was emptied."""


LogListener = Callable[["Log", LogEvent], None]

#: An append to a log without replicas; built once (a Flag's ``|`` costs a microsecond).
_APPENDED_AND_READABLE = LogEvent.APPENDED | LogEvent.HIGH_WATERMARK_MOVED


class CleanableState(NamedTuple):
    """How much of a compacted log the cleaner could clean now."""

    first_dirty_offset: int
    end_offset: int  # the first uncleanable offset, a segment base
    segment_count: int  # segments [0, segment_count) are cleanable
    clean_bytes: int
    dirty_bytes: int
    overdue: bool  # dirty data older than max.compaction.lag.ms

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


class PendingClean(NamedTuple):
    """A clean handed to a cleaner thread, and what the log looked like then."""

    task: CleanTask
    generation: int
    segments: dict[int, Segment]


class Log:
    """The segments of one partition, with append, read, retention and recovery."""

    __slots__ = (
        "_bases",
        "_boundaries",
        "_cleaning",
        "_epoch_cache",
        "_generation",
        "_high_watermark",
        "_listeners",
        "_loaded",
        "_log_end_offset",
        "_log_start_offset",
        "_on_read_error",
        "_path",
        "_producers",
        "_recover",
        "_replicated",
        "_segments",
        "_snapshots",
        "_txn_index_rebuild_from",
        "_unflushed_messages",
        "_unflushed_since_ms",
        "config",
        "corrupt",
        "handles",
        "offline",
        "on_io_error",
        "partition_leader_epoch",
        "recovered_bytes",
        "topic_id",
    )

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        handles: FileHandleCache,
        *,
        topic_id: uuid.UUID | None = None,
        recover: bool = False,
    ) -> None:
        self.config = config
        self.handles = handles
        self.topic_id = topic_id
        self.partition_leader_epoch = 0  # stamped on appended batches
        self.recovered_bytes = 0  # torn tail removed by recovery, for logging
        #: Told of every I/O error a write met (the log directory takes itself
        #: offline on one that is not a full disk, KIP-112).
        self.on_io_error: Callable[[Log, OSError], None] | None = None
        #: Given to the file slices reads return (one bound method, not one per read).
        self._on_read_error = self._read_failed
        #: Why the log's directory is offline after an I/O error (KIP-112), or None:
        #: set, every append and read answers KAFKA_STORAGE_ERROR without touching the disk.
        self.offline: str | None = None
        #: Batches the scrubber found corrupt (replaced whole, so another thread may set
        #: it): no read returns their bytes; reading at them raises CorruptRecordError.
        self.corrupt: tuple[CorruptBatch, ...] = ()
        self._path = os.fspath(directory)
        self._recover = recover
        self._loaded = False
        self._segments: list[Segment] = []
        self._bases: list[int] = []  # base offsets of _segments, for bisect
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._producers: ProducerStateTable | None = None
        self._epoch_cache: LeaderEpochCache | None = None
        self._replicated = False
        self._high_watermark = 0  # only meaningful when _replicated
        # offset -> (segment base offset, file position) where the batch holding
        # it starts: where reads capped at the HW or the LSO stop.
        self._boundaries: dict[int, tuple[int, int]] = {}
        self._snapshots: list[int] = []  # offsets of <offset>.snapshot files, ascending
        # After a crash: the segments from here get their .txnindex rebuilt when
        # the producer table is (the index may miss the last aborts, or list too many).
        self._txn_index_rebuild_from: int | None = None
        self._listeners: LogListener | list[LogListener] | None = None
        self._unflushed_messages = 0
        self._unflushed_since_ms: int | None = None
        # Log compaction: a clean in progress holds retention back, and any change
        # of the segment list (truncation, deletion, close) makes its swap void.
        self._cleaning = False
        self._generation = 0

    def __repr__(self) -> str:
        return f"Log({self._path!r})"

    @property
    def directory(self) -> Path:
        """The partition's directory. Only its string is kept: a ``Path`` held by every
        log cost about 450 bytes each (its parts list and cached strings), 5 % of the
        memory of a replica at 50,000 partitions (issue 33)."""
        return Path(self._path)

    # -- loading --------------------------------------------------------------------------

    def _load(self) -> None:
        """Read the segment list and the log's end from disk, once.

        Offline, nothing is read (KAFKA_STORAGE_ERROR). An ``OSError`` met half way
        leaves the log unloaded (not loaded with an end of 0, as it did, served
        from then on) and tells the directory.
        """
        if self._loaded:
            return
        self._check_online()
        try:
            self._load_from_disk()
        except OSError as exc:
            self._forget_loaded_state()
            raise self._storage_error(exc) from None

    def _forget_loaded_state(self) -> None:
        self.handles.forget_under(self._path)
        self._loaded = False
        self._segments = []
        self._bases = []
        self._producers = None
        self._epoch_cache = None
        self._boundaries.clear()

    def _load_from_disk(self) -> None:
        self._loaded = True
        COLLECTOR.long_lived_created()  # segments, indexes: as long-lived as the log
        try:
            names = os.listdir(self._path)
        except FileNotFoundError:
            names = []
        if any(
            name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)) for name in names
        ) and recover_swaps(self._path, names):
            names = os.listdir(self._path)
        bases = sorted(
            int(name[:-4])
            for name in names
            if name.endswith(LOG_SUFFIX) and len(name) == 24 and name[:20].isdigit()
        )
        interval = self.config.index_interval_bytes
        txn_indexes = {name for name in names if name.endswith(TXN_INDEX_SUFFIX)}
        self._segments = [
            Segment.open(
                self._path,
                base,
                self.handles,
                interval,
                has_txn_index=f"{base:020d}{TXN_INDEX_SUFFIX}" in txn_indexes,
            )
            for base in bases
        ]
        self._bases = bases
        self._snapshots = snapshot_offsets(names)
        if not self._segments:
            self._log_start_offset = self._log_end_offset = 0
            self._clamp_high_watermark()
            return
        active = self._segments[-1]
        if self._recover:
            self.recovered_bytes = active.recover()
            self._txn_index_rebuild_from = active.base_offset
        self._log_end_offset = active.next_offset
        self._log_start_offset = min(
            max(self._segments[0].base_offset, self._read_log_start_checkpoint()),
            self._log_end_offset,
        )
        self._clamp_high_watermark()

    def _read_log_start_checkpoint(self) -> int:
        try:
            with open(os.path.join(self._path, LOG_START_OFFSET_FILE)) as f:
                return int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _write_log_start_checkpoint(self) -> None:
        path = os.path.join(self._path, LOG_START_OFFSET_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{self._log_start_offset}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _producer_state(self) -> ProducerStateTable:
        """The producer table, rebuilt on first need: latest snapshot plus the batches after it."""
        if self._producers is None:
            self._load()
            try:
                self._producers = self._rebuild_producer_state()
            except OSError as exc:
                raise self._storage_error(exc) from None
        return self._producers

    def _rebuild_producer_state(self) -> ProducerStateTable:
        """Kafka's ``rebuildProducerState``: load the newest usable snapshot, replay the rest.

        Snapshots past the log end (a truncated or crashed tail) are deleted
        first. After a crash the replay must start at or before the recovered
        segment, whose ``.txnindex`` it rebuilds. Without a snapshot (a log
        written before snapshots existed) the table comes from the headers of
        the last ``PRODUCER_STATE_SCAN_BYTES`` of the log.
        """
        leo = self._log_end_offset
        rebuild_from = self._txn_index_rebuild_from
        self._txn_index_rebuild_from = None
        for offset in [o for o in self._snapshots if o > leo]:
            self._drop_snapshot(offset)
        table: ProducerStateTable | None = None
        start_offset = 0
        for offset in reversed(self._snapshots):
            if rebuild_from is not None and offset > rebuild_from:
                continue
            try:
                rows = read_snapshot(self._path, offset)
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("%s: producer snapshot at %d is unusable (%s)", self._path, offset, exc)
                self._drop_snapshot(offset)
                continue
            table = ProducerStateTable.from_snapshot(rows)
            start_offset = offset
            break
        if table is None:
            table = ProducerStateTable()
            first, position = self._scan_budget_start(rebuild_from)
        else:
            first = max(bisect_right(self._bases, start_offset) - 1, 0)
            segment = self._segments[first] if self._segments else None
            position = (
                0
                if segment is None or start_offset <= segment.base_offset
                else segment.batch_boundary_before(start_offset)
            )
        for segment in self._segments[first:]:
            rebuild = rebuild_from is not None and segment.base_offset >= rebuild_from
            if rebuild:
                segment.txn_index.reset()
            for header in segment.iter_headers(position):
                if header.last_offset < start_offset:
                    continue  # already in the snapshot
                marker = None
                if header.is_control:
                    marker = self._marker_of(header, segment.read_batch(header), 0)
                done = table.update(header, header.max_timestamp, marker)
                if done is not None and rebuild:
                    self._index_if_aborted(segment, done)
            position = 0
        table.on_high_watermark(self.high_watermark)
        table.changed = False
        return table

    def _scan_budget_start(self, rebuild_from: int | None) -> tuple[int, int]:
        """(segment index, position) to replay from without a snapshot: the last bytes only.

        A crashed segment is replayed whole, however large, to rebuild its index.
        """
        budget = PRODUCER_STATE_SCAN_BYTES
        first = len(self._segments)
        while first > 0 and budget > 0:
            first -= 1
            budget -= self._segments[first].size
        if (
            rebuild_from is not None
            and first < len(self._segments)
            and self._segments[first].base_offset >= rebuild_from
        ):
            return first, 0  # the crashed segment is replayed whole
        if first < len(self._segments) and budget < 0:
            return first, self._segments[first].batch_position_at_or_after(-budget)
        return first, 0

    def _marker_of(
        self, header: BatchHeader, data: bytes | bytearray | memoryview, position: int
    ) -> ControlMarker | None:
        """The COMMIT/ABORT marker of a control batch at ``position`` of ``data``."""
        try:
            return parse_control_batch(data, header._replace(position=position))
        except CorruptRecordError as exc:
            # The CRC was good, so a producer never wrote this: log and go on.
            log.warning(
                "%s: unreadable control batch at %d: %s", self._path, header.base_offset, exc
            )
            return None

    def _index_if_aborted(self, segment: Segment, done: CompletedTxn) -> None:
        if done.aborted:
            segment.txn_index.append(
                AbortedTxn(
                    done.producer_id, done.first_offset, done.last_offset, done.last_stable_offset
                )
            )

    # -- producer snapshots -------------------------------------------------------------------

    def _take_snapshot(self) -> None:
        """Save the producer table at the log end, keeping only the snapshots recovery needs.

        Kept: this one and the newest at or below the active segment's base
        (where a crash recovery replays from); none below the first segment.
        """
        table = self._producers
        if table is None:
            return
        offset = self._log_end_offset
        try:
            write_snapshot(self._path, offset, table.snapshot_entries())
        except OSError as exc:
            # Only a shortcut for the next load: a replay from an older one is
            # slower, never wrong. The append or close that asked goes on.
            log.warning("%s: producer snapshot at %d not written: %s", self._path, offset, exc)
            return
        table.changed = False
        if offset not in self._snapshots:
            self._snapshots.append(offset)
            self._snapshots.sort()
        self._prune_snapshots()

    def _prune_snapshots(self) -> None:
        if not self._snapshots:
            return
        keep = {self._snapshots[-1]}
        if self._segments:
            active_base = self._segments[-1].base_offset
            below = [o for o in self._snapshots if o <= active_base]
            if below:
                keep.add(below[-1])
        first_base = self._bases[0] if self._bases else self._log_start_offset
        for offset in list(self._snapshots):
            if offset not in keep or offset < first_base:
                self._drop_snapshot(offset)

    def _drop_snapshot(self, offset: int) -> None:
        delete_snapshot(self._path, offset)
        if offset in self._snapshots:
            self._snapshots.remove(offset)

    def _drop_snapshots_after(self, offset: int) -> None:
        for snap in [o for o in self._snapshots if o > offset]:
            self._drop_snapshot(snap)

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        """The partition's leader-epoch cache, read (or rebuilt) on first use."""
        cache = self._epoch_cache
        if cache is None:
            try:
                cache = self._load_epoch_cache()
            except OSError as exc:
                raise self._storage_error(exc) from None
        return cache

    def _load_epoch_cache(self) -> LeaderEpochCache:
        """Read ``leader-epoch-checkpoint``, or rebuild it from the batch headers.

        The checkpoint is trusted only when its latest epoch is the epoch of the
        last batch in the log: a crash between a segment write and the
        checkpoint write (or a log written before epochs were tracked, all at
        epoch 0) is then rebuilt from the headers, which are the truth. Entries
        past the log end (a torn tail cut by recovery) or before the log start
        are dropped, as Kafka does on load.
        """
        self._load()
        path = os.path.join(self._path, LEADER_EPOCH_CHECKPOINT_FILE)
        entries = LeaderEpochCache.read_file(path)
        last = self._last_batch()
        last_epoch = -1 if last is None else last.partition_leader_epoch
        if entries is None or (
            last_epoch >= 0 and (not entries or entries[-1].epoch != last_epoch)
        ):
            entries = self._epoch_entries_from_batches()
        cache = LeaderEpochCache(path, entries)
        cache.truncate_from_end(self._log_end_offset)
        cache.truncate_from_start(self._log_start_offset)
        self._epoch_cache = cache
        return cache

    def _last_batch(self) -> BatchHeader | None:
        for segment in reversed(self._segments):
            if segment.size > 0:
                return segment.find_batch(segment.next_offset - 1)
        return None

    def _epoch_entries_from_batches(self) -> list[EpochEntry]:
        """Where each leader epoch starts, read from batch headers without scanning them all.

        Epochs never decrease along a log, so a run of segments whose first and
        last batches carry the same epoch holds nothing else: only runs with a
        change are split, and only a segment with a change inside is scanned.
        A log written by one leader epoch (every single-broker log) costs two
        header reads, however large it is.
        """
        segments = [segment for segment in self._segments if segment.size > 0]
        entries: list[EpochEntry] = []

        def add(header: BatchHeader) -> None:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not entries or entries[-1].epoch != epoch):
                entries.append(EpochEntry(epoch, header.base_offset))

        def visit(lo: int, hi: int) -> None:
            first = segments[lo].find_batch(segments[lo].base_offset)
            last = segments[hi].find_batch(segments[hi].next_offset - 1)
            if first is None or last is None:  # nothing whole to read: scan what there is
                for segment in segments[lo : hi + 1]:
                    for header in segment.iter_headers():
                        add(header)
            elif first.partition_leader_epoch == last.partition_leader_epoch:
                add(first)
            elif lo == hi:
                for header in segments[lo].iter_headers():
                    add(header)
            else:
                mid = (lo + hi) // 2
                visit(lo, mid)
                visit(mid + 1, hi)

        if segments:
            visit(0, len(segments) - 1)
        return entries

    @_tells_directory
    def assign_leader_epoch(self, epoch: int) -> None:
        """This replica leads in ``epoch`` from now on: stamp it on appends, from the log end.

        Recording the start at once (Kafka's ``maybeAssignEpochStartOffset`` on
        becoming leader), not at the first append, lets a follower of the old
        epoch learn where that epoch ended even before anyone produces.
        """
        self._load()
        self.partition_leader_epoch = epoch
        self.leader_epoch_cache.assign(epoch, self._log_end_offset)

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch that wrote to this log (-1 when none did)."""
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch and divergence checks; (-1, -1) if unknown.

        The leader's divergence rule over it is ``headwater.log.divergence``.

        See ``LeaderEpochCache.end_offset_for``: the largest epoch <= ``epoch``
        and where it ended (the log end for the latest epoch).
        """
        cache = self.leader_epoch_cache
        return cache.end_offset_for(epoch, self._log_end_offset)

    @property
    def is_loaded(self) -> bool:
        return self._loaded

    # -- offsets --------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        self._load()
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        self._load()
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        """The first offset not known to be on every in-sync replica.

        Not replicated (one broker): everything appended is committed, so it
        is the log end. Replicated: what the replica manager last set.
        """
        self._load()
        return self._high_watermark if self._replicated else self._log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, capped by the high watermark.

        A decided transaction keeps holding it back until the high watermark
        passes its marker (Kafka's unreplicated transactions).
        """
        hw = self.high_watermark
        if self._producers is None and not self._segments:
            return hw  # an idle partition with no files gets no producer table either
        first = self._producer_state().first_unstable_offset
        if first is None:
            return hw
        return min(max(first, self._log_start_offset), hw)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not decided-and-replicated (None: none)."""
        self._load()
        return self._producer_state().first_unstable_offset

    def ongoing_transactions(self) -> dict[int, int]:
        """Open transactions in this partition: first offset -> producer id, oldest first."""
        self._load()
        return self._producer_state().ongoing_transactions()

    def producers(self) -> dict[int, ProducerEntry]:
        """The producers this partition remembers (id -> entry), for DescribeProducers."""
        self._load()
        return self._producer_state().producers()

    def aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTransaction]:
        """Aborted transactions with last offset >= start and first offset < upper bound.

        From the ``.txnindex`` of the segment holding ``start_offset`` on, until
        an entry shows that every transaction starting before the bound was
        decided (Kafka's ``collectAbortedTransactions``). Entries are cached in
        memory, and segments without an abort have no file to read.
        """
        self._load()
        self._producer_state()  # a crashed log rebuilds its newest indexes first
        found: list[AbortedTransaction] = []
        first = max(bisect_right(self._bases, start_offset) - 1, 0)
        for segment in self._segments[first:]:
            search = segment.txn_index.collect(start_offset, upper_bound_offset)
            found.extend(txn.to_fetch() for txn in search.aborted)
            if search.complete:
                break
        return found

    # -- replication: the high watermark ----------------------------------------------------

    @property
    def replicated(self) -> bool:
        """Whether the high watermark is kept apart from the log end (the log has replicas)."""
        return self._replicated

    def enable_replication(self, high_watermark: int) -> None:
        """Keep a high watermark of its own from now on, starting at ``high_watermark``.

        Called by the replica manager when the partition becomes a leader or a
        follower, with the checkpointed value (or the leader's). The value is
        clamped into [log start, log end]; unlike ``update_high_watermark`` it
        may move the HW down, so calling it again resets the HW.
        """
        self._load()
        before = self.high_watermark
        self._replicated = True
        self._high_watermark = high_watermark
        self._clamp_high_watermark()
        self._boundaries.clear()
        if self._high_watermark != before:
            self._notify(LogEvent.HIGH_WATERMARK_MOVED)
        if self._producers is not None:
            self._producers.on_high_watermark(self._high_watermark)

    def disable_replication(self) -> None:
        """Back to a single replica: the high watermark is the log end again."""
        if not self._replicated:
            return
        self._load()
        before = self._high_watermark
        self._replicated = False
        self._boundaries.clear()
        if self._producers is not None:
            self._producers.on_high_watermark(self._log_end_offset)
        if before != self._log_end_offset:
            self._notify(LogEvent.HIGH_WATERMARK_MOVED)

    def update_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to ``offset`` (clamped to the log); True if it moved.

        Monotonic: a lower value is ignored (only truncation or
        ``enable_replication`` lower it). A move wakes the listeners, which is
        how parked consumer fetches and fetch sessions learn that records became
        readable. A log that is not replicated has nothing to move (its HW is
        its log end) and answers False.
        """
        if not self._replicated:
            return False
        self._load()
        new = max(self._log_start_offset, min(offset, self._log_end_offset))
        if new <= self._high_watermark:
            return False
        self._high_watermark = new
        if self._producers is not None:
            self._producers.on_high_watermark(new)
        self._notify(LogEvent.HIGH_WATERMARK_MOVED)
        return True

    def _clamp_high_watermark(self) -> None:
        """Keep the HW inside [log start, log end] after the log moved under it."""
        if self._replicated:
            hw = max(self._log_start_offset, min(self._high_watermark, self._log_end_offset))
            if hw != self._high_watermark:
                self._high_watermark = hw
                self._boundaries.clear()

    def _read_boundary(self, offset: int) -> tuple[int, int]:
        """(segment base, position) where the batch holding ``offset`` starts, cached.

        Found once per HW or LSO value by index lookup plus a short header scan
        in the one segment that holds it; every capped read then only compares
        numbers. The batch holding an offset stays where it is until
        truncation or segment deletion, which clear the cache.
        """
        boundary = self._boundaries.get(offset)
        if boundary is None:
            segment = self._segments[max(bisect_right(self._bases, offset) - 1, 0)]
            boundary = (segment.base_offset, segment.batch_boundary_before(offset))
            if len(self._boundaries) >= 8:
                self._boundaries.clear()
            self._boundaries[offset] = boundary
        return boundary

    @property
    def size_bytes(self) -> int:
        self._load()
        return sum(segment.size for segment in self._segments)

    @property
    def segments(self) -> tuple[Segment, ...]:
        self._load()
        return tuple(self._segments)

    def loaded_segments(self) -> tuple[Segment, ...]:
        """The segments if the log is loaded, else none: never loads (another thread's
        view, the scrubber's)."""
        return tuple(self._segments) if self._loaded else ()

    # -- listeners ------------------------------------------------------------------------

    def add_listener(self, listener: LogListener) -> None:
        """Call ``listener(log, event)`` after every append, high watermark move,
        log-start change or truncation (``event`` says which).

        One listener is kept as is, more in a list: most logs have exactly
        one (the fetch sessions' watcher), and 100,000 logs would otherwise
        hold 100,000 one-element lists.
        """
        current = self._listeners
        if current is None:
            self._listeners = listener
        elif isinstance(current, list):
            current.append(listener)
        else:
            self._listeners = [current, listener]

    def remove_listener(self, listener: LogListener) -> None:
        current = self._listeners
        if isinstance(current, list):
            current.remove(listener)
            if len(current) == 1:
                self._listeners = current[0]
        elif current is not None and current == listener:
            self._listeners = None
        else:
            raise ValueError("not a listener of this log")

    def _notify(self, event: LogEvent) -> None:
        current = self._listeners
        if isinstance(current, list):
            for listener in tuple(current):
                listener(self, event)
        elif current is not None:
            current(self, event)

    # -- append ---------------------------------------------------------------------------

    def append(self, payload: bytes | bytearray | memoryview, now_ms: int) -> AppendResult:
        """Validate, assign offsets and write a producer's batches; all or nothing."""
        self._check_online()
        checked = validate_append(
            payload,
            self.config.max_message_bytes,
            self._policy(),
            now_ms,
            max_decompressed_bytes=self.config.max_decompressed_bytes,
        )
        headers, payload = checked.headers, checked.payload
        if self.config.compact:
            self._refuse_null_keys(payload, headers)
        if len(payload) > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"{len(payload)} bytes do not fit a segment of {self.config.segment_bytes}"
            )
        self._load()
        producers = self._producer_state()
        duplicate = producers.check(headers)
        if duplicate is not None:
            return AppendResult(
                duplicate.base_offset, duplicate.last_offset, -1, self._log_start_offset, True
            )
        buf = bytearray(payload)
        offset = self._log_end_offset
        epoch = self.partition_leader_epoch
        assigned = []
        for header in headers:
            patch_base_offset(buf, header.position, offset)
            patch_partition_leader_epoch(buf, header.position, epoch)
            assigned.append(header._replace(base_offset=offset, partition_leader_epoch=epoch))
            offset += header.last_offset_delta + 1
        self._write_as_leader(buf, assigned, epoch, now_ms)
        self._after_append(assigned, producers, now_ms, buf)
        return AppendResult(
            assigned[0].base_offset, offset - 1, checked.log_append_time_ms, self._log_start_offset
        )

    def _refuse_null_keys(
        self, payload: bytes | bytearray | memoryview, headers: list[BatchHeader]
    ) -> None:
        """Kafka refuses records without a key in a compacted topic: the cleaner would drop them."""
        view = memoryview(payload)
        for header in headers:
            if header.is_control:
                continue
            body = view[header.position + HEADER_SIZE : header.position + header.size]
            if header.compression:
                body = memoryview(decompress(header.compression, body))
            index = first_null_key(body, header.record_count)
            if index >= 0:
                raise InvalidRecordError(
                    "Compacted topic cannot accept message without key in topic partition "
                    f"{os.path.basename(self._path)} (record at offset delta {index})"
                )

    def _write_as_leader(
        self, buf: bytearray, assigned: list[BatchHeader], epoch: int, now_ms: int
    ) -> None:
        """Write batches whose offsets this log assigned, in one segment, and note the epoch."""
        newest = max(header.max_timestamp for header in assigned)
        cache = self.leader_epoch_cache
        end = assigned[-1].next_offset
        try:
            segment = self._segment_for_append(len(buf), end - 1, newest, now_ms)
            segment.append(buf, assigned)
        except OSError as exc:
            raise self._storage_error(exc) from None
        self._log_end_offset = end
        if cache.latest_epoch != epoch:
            # Assigned after the write: a failed write leaves no epoch without data.
            cache.assign(epoch, assigned[0].base_offset)

    def append_control_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
        *,
        leader_epoch: int | None = None,
    ) -> AppendResult:
        """Append a COMMIT or ABORT marker ending ``producer_id``'s transaction (leaders only).

        The transaction coordinator's WriteTxnMarkers lands here. The marker is
        checked against the producer's state first (an older producer epoch is
        INVALID_PRODUCER_EPOCH, an older coordinator epoch
        TRANSACTION_COORDINATOR_FENCED), then written like any batch, stamped
        with ``leader_epoch`` (this log's leader epoch by default).
        """
        self._check_online()
        self._load()
        producers = self._producer_state()
        producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        epoch = self.partition_leader_epoch if leader_epoch is None else leader_epoch
        buf = bytearray(
            build_control_batch(
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch,
                now_ms,
                base_offset=self._log_end_offset,
                partition_leader_epoch=epoch,
            )
        )
        assigned = [parse_batch_header(buf)]
        self._write_as_leader(buf, assigned, epoch, now_ms)
        self._after_append(assigned, producers, now_ms, buf)
        return AppendResult(
            assigned[0].base_offset, assigned[0].last_offset, -1, self._log_start_offset
        )

    def append_as_follower(
        self, payload: bytes | bytearray | memoryview, now_ms: int
    ) -> AppendResult:
        """Write a leader's batches as they are: offsets and leader epochs come from the leader.

        The first batch must start at this log's end and offsets must increase
        (else UnexpectedAppendOffsetError: the fetcher is out of step and must
        re-fetch or truncate). Batches are checked like a producer's (CRC,
        structure) because a fetch response crosses the network; producer
        sequences are not checked, only recorded, so that this replica can
        dedupe a producer's retry the day it becomes leader. A payload larger
        than a segment is spread over as many segments as it needs. A partial
        batch at the end (the leader cuts a fetch response at its byte limit)
        is left out, as every reader of fetched data does: this is the one
        place a follower trims, so its fetcher hands over what it got. The
        result's ``last_offset`` says how far the append got (``log end - 1``
        when not even one batch was whole).
        """
        self._check_online()
        view = memoryview(payload)
        whole = 0
        for header in iter_batch_headers(view):
            whole = header.position + header.size
        self._load()
        if not whole:  # not one whole batch yet: it comes with the next fetch
            end = self._log_end_offset
            return AppendResult(end, end - 1, -1, self._log_start_offset)
        # No size limit: the leader accepted these batches, and a follower that
        # refused one (its max.message.bytes lower for a moment) would stall
        # replication for good; Kafka ignores the record size here too.
        headers = validate_batches(view[:whole], whole, allow_control=True, compacted=True)
        expected = self._log_end_offset
        for header in headers:
            # Batches may leave gaps (a compacted leader log: even the first, when
            # the records at this log's end were cleaned away), never go back (Kafka).
            if header.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"{self._path}: batch at offset {header.base_offset} does not follow "
                    f"offset {expected - 1}"
                )
            expected = header.next_offset
        producers = self._producer_state()
        cache = self.leader_epoch_cache
        start = 0
        while start < len(headers):
            first = headers[start]
            try:
                segment = self._segment_for_append(
                    first.size, first.last_offset, first.max_timestamp, now_ms
                )
            except OSError as exc:
                raise self._storage_error(exc) from None
            room = self.config.segment_bytes - segment.size
            stop, size = start + 1, first.size
            while (
                stop < len(headers)
                and size + headers[stop].size <= room
                and segment.can_hold_offset(headers[stop].last_offset)
            ):
                size += headers[stop].size
                stop += 1
            # Positions relative to the chunk; the usual fetch is one run from 0, kept as is.
            run = (
                headers[start:stop]
                if first.position == 0
                else [h._replace(position=h.position - first.position) for h in headers[start:stop]]
            )
            chunk = view[first.position : first.position + size]
            try:
                segment.append(chunk, run)
            except OSError as exc:
                # Runs already written stay (they are whole, and recorded below).
                if start:
                    self._after_append(headers[:start], producers, now_ms, None)
                raise self._storage_error(exc) from None
            self._log_end_offset = run[-1].next_offset
            # Per run, before the next roll snapshots the table at the new log end.
            self._record_producers(run, producers, now_ms, chunk)
            for header in run:
                epoch = header.partition_leader_epoch
                if epoch >= 0 and epoch != cache.latest_epoch:
                    cache.assign(epoch, header.base_offset)
            start = stop
        self._after_append(headers, producers, now_ms, None)
        return AppendResult(
            headers[0].base_offset, headers[-1].last_offset, -1, self._log_start_offset
        )

    def _record_producers(
        self,
        headers: list[BatchHeader],
        producers: ProducerStateTable,
        now_ms: int,
        data: bytes | bytearray | memoryview,
    ) -> None:
        """Update the producer table with written batches; index the aborts they decide.

        ``data`` holds the batches at their header positions, to read markers
        from. A marker that aborts a transaction adds it to the ``.txnindex``
        of the segment the marker went into.
        """
        for header in headers:
            marker = self._marker_of(header, data, header.position) if header.is_control else None
            done = producers.update(header, now_ms, marker)
            if done is not None:
                segment = self._segments[bisect_right(self._bases, header.base_offset) - 1]
                self._index_if_aborted(segment, done)

    def _after_append(
        self,
        headers: list[BatchHeader],
        producers: ProducerStateTable,
        now_ms: int,
        data: bytes | bytearray | memoryview | None,
    ) -> None:
        """What every append does once its batches are written: producers, flush policy, wake.

        ``data`` None: the caller recorded the producers already.
        """
        if data is not None:
            self._record_producers(headers, producers, now_ms, data)
        if not self._replicated:
            producers.on_high_watermark(self._log_end_offset)
        self._unflushed_messages += sum(header.record_count for header in headers)
        if self._unflushed_since_ms is None:
            self._unflushed_since_ms = now_ms
        if self._unflushed_messages >= self.config.flush_interval_messages:
            self.flush()
        self._notify(LogEvent.APPENDED if self._replicated else _APPENDED_AND_READABLE)

    def _check_online(self) -> None:
        if self.offline is not None:
            raise KafkaStorageError(f"{self._path}: log directory offline ({self.offline})")

    def _read_failed(self, exc: OSError) -> None:
        """A slice of this log could not be read while it was being sent (``sendfile``
        met EIO on the event loop, after ``read`` returned): the directory is told."""
        if self.on_io_error is not None:
            self.on_io_error(self, exc)

    def _storage_error(self, exc: OSError) -> KafkaStorageError:
        """What a write's OSError becomes: KAFKA_STORAGE_ERROR, the directory told."""
        if self.on_io_error is not None:
            self.on_io_error(self, exc)
        return KafkaStorageError(f"{self._path}: {exc.strerror or exc}")

    def _policy(self) -> TimestampPolicy:
        c = self.config
        return TimestampPolicy(
            c.message_timestamp_type,
            c.message_timestamp_before_max_ms,
            c.message_timestamp_after_max_ms,
        )

    def _segment_for_append(
        self, size: int, last_offset: int, max_timestamp: int, now_ms: int
    ) -> Segment:
        if not self._segments:
            os.makedirs(self._path, exist_ok=True)
            return self._roll(now_ms)
        active = self._segments[-1]
        if active.size > 0 and (
            active.size + size > self.config.segment_bytes
            or active.time_waited_for_roll(now_ms, max_timestamp) > self.config.roll_ms
            or not active.can_hold_offset(last_offset)
        ):
            return self._roll(now_ms)
        return active

    def _roll(self, now_ms: int) -> Segment:
        """Start a new segment at the log end; the old one is finished and flushed."""
        if self._segments:
            old = self._segments[-1]
            old.on_become_inactive()
            old.flush()
            self._producer_state()  # the snapshot below needs the table
        segment = Segment.create(
            self._path, self._log_end_offset, self.handles, self.config.index_interval_bytes, now_ms
        )
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        if len(self._segments) > 1:
            # Where a crash recovery of the new segment will replay from (Kafka
            # snapshots at every roll too).
            self._take_snapshot()
        return segment

    @_tells_directory
    def maybe_roll(self, now_ms: int) -> bool:
        """Roll an idle non-empty active segment older than ``segment.ms`` (lets retention act)."""
        self._load()
        if not self._segments:
            return False
        active = self._segments[-1]
        if active.size > 0 and active.time_waited_for_roll(now_ms, now_ms) > self.config.roll_ms:
            self._roll(now_ms)
            return True
        return False

    # -- read -----------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, isolation: Isolation, min_one_batch: bool
    ) -> ReadResult:
        """A file slice starting at the batch that holds ``offset``.

        LOG_END (followers) reads to the log end; HIGH_WATERMARK
        (read_uncommitted) never returns a byte of a batch at or past the high
        watermark, TXN_COMMITTED (read_committed) none at or past the last
        stable offset, and lists the aborted transactions overlapping what it
        returns (the consumer filters them: the records stay zero-copy). Any
        offset in [log start, log end] is legal, as in Kafka: at or past the
        readable end it reads nothing, since a consumer may have seen a higher
        high watermark from a previous leader. Outside that range raises
        OffsetOutOfRangeError.
        """
        self._check_online()
        try:
            return self._read(offset, max_bytes, isolation, min_one_batch)
        except OSError as exc:
            raise self._storage_error(exc) from None

    def _read(
        self, offset: int, max_bytes: int, isolation: Isolation, min_one_batch: bool
    ) -> ReadResult:
        self._load()
        leo = self._log_end_offset
        if offset < self._log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._log_start_offset}, {leo}] of {self._path}"
            )
        hw = self._high_watermark if self._replicated else leo
        lso = self.last_stable_offset
        if isolation is Isolation.LOG_END:
            end = leo
        elif isolation is Isolation.TXN_COMMITTED:
            end = lso
        else:
            end = hw
        records = None
        aborted: list[AbortedTransaction] | None = None
        upper = end
        if offset < end:
            capped = end < leo
            cap_base, cap_position = self._read_boundary(end) if capped else (leo, 0)
            first = max(bisect_right(self._bases, offset) - 1, 0)
            for i in range(first, len(self._segments)):
                segment = self._segments[i]
                max_position = segment.size
                if capped and segment.base_offset >= cap_base:
                    if segment.base_offset > cap_base:
                        break
                    max_position = cap_position
                found = segment.read(
                    offset, max_bytes, max_position, min_one_batch, self._on_read_error
                )
                if found is not None and self.corrupt:
                    found = self._without_corrupt(segment, found)
                if found is not None:
                    records = found if found.size > 0 else None
                    if records is not None and isolation is Isolation.TXN_COMMITTED:
                        upper = self._upper_bound_after(i, records.position + records.size, end)
                    break
        if isolation is Isolation.TXN_COMMITTED:
            aborted = [] if records is None else self.aborted_transactions(offset, upper)
        return ReadResult(records, hw, lso, self._log_start_offset, leo, aborted)

    def _without_corrupt(self, segment: Segment, found: FileSlice) -> FileSlice:
        """``found`` cut before the first corrupt batch in it; CorruptRecordError when it
        starts in one (CORRUPT_MESSAGE: the reader is told, never given the bytes)."""
        stop = found.position + found.size
        for bad in self.corrupt:
            if bad.segment is not segment or bad.position >= stop:
                continue
            if bad.position <= found.position < bad.position + bad.size:
                raise CorruptRecordError(
                    f"{self._path}: offsets {bad.base_offset}-{bad.last_offset} are corrupt "
                    f"on this broker ({bad.reason})"
                )
            if bad.position > found.position:
                stop = min(stop, bad.position)
        if stop == found.position + found.size:
            return found
        return FileSlice(found.file, found.position, stop - found.position, found.on_read_error)

    def mark_corrupt(self, bad: CorruptBatch) -> bool:
        """Remember a corrupt batch (any thread); False if it was known already."""
        known = self.corrupt
        if any(c.segment is bad.segment and c.position == bad.position for c in known):
            return False
        self.corrupt = (*known, bad)
        return True

    def corrupt_ranges(self) -> list[tuple[int, int]]:
        """(first, last) offsets of the corrupt batches still in the log."""
        live = {id(s) for s in self._segments}
        return sorted((c.base_offset, c.last_offset) for c in self.corrupt if id(c.segment) in live)

    def _upper_bound_after(self, index: int, position: int, end: int) -> int:
        """An offset at or after the end of data read up to ``position`` of segment ``index``.

        Kafka's ``fetchUpperBoundOffset``: the first indexed batch past the
        data, else the next segment's base, never beyond ``end``. It bounds
        the aborted-transaction search to what the response can hold.
        """
        segment = self._segments[index]
        entry = segment.offset_index.entry_at_or_after_position(position)
        if entry is not None:
            return min(entry[0], end)
        if index + 1 < len(self._segments):
            return min(self._bases[index + 1], end)
        return end

    @_tells_directory
    def offset_for_timestamp(
        self, timestamp: int, isolation: Isolation = Isolation.HIGH_WATERMARK
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record stamped at or after ``timestamp``.

        ListOffsets comes from consumers, hence the default: on a replicated
        log a record at or past the high watermark is not answered (None), as
        in Kafka, since the consumer could not read it yet. LOG_END looks at
        the whole log.
        """
        self._load()
        for segment in self._segments:
            if segment.max_timestamp >= timestamp:
                found = segment.find_offset_for_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    if isolation is Isolation.LOG_END:
                        return found
                    end = (
                        self.last_stable_offset
                        if isolation is Isolation.TXN_COMMITTED
                        else self.high_watermark
                    )
                    return None if found[0] >= end else found
        return None

    # -- log compaction (the cleaner itself is headwater.log.cleaner) ----------------------

    def _read_cleaner_checkpoint(self) -> int:
        try:
            with open(os.path.join(self._path, CLEANER_OFFSET_FILE)) as f:
                return int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _write_cleaner_checkpoint(self, offset: int) -> None:
        """Not fsynced: a checkpoint lost to a power cut only means cleaning again."""
        path = os.path.join(self._path, CLEANER_OFFSET_FILE)
        with open(path + ".tmp", "w") as f:
            f.write(f"{offset}\n")
        os.replace(path + ".tmp", path)

    def cleanable_state(self, now_ms: int) -> CleanableState | None:
        """How dirty the cleanable part of the log is (Kafka's ``cleanableOffsets``).

        Cleanable: whole rolled segments below the first uncleanable offset,
        the least of the active segment's base, the last stable offset and
        the base of the first segment newer than ``min.compaction.lag.ms``.
        None when the log has no such segment or is not compacted.
        """
        if not self.config.compact or (not self._loaded and not os.path.isdir(self._path)):
            return None
        self._load()
        if len(self._segments) < 2:
            return None
        limit = min(self._bases[-1], self.last_stable_offset)
        first_dirty = self._read_cleaner_checkpoint()
        if first_dirty < self._log_start_offset or first_dirty > self._log_end_offset:
            first_dirty = self._log_start_offset
        lag = self.config.min_compaction_lag_ms
        if lag > 0:
            for i in range(len(self._segments) - 1):
                if self._bases[i + 1] > first_dirty and (
                    self._segments[i].max_timestamp > now_ms - lag
                ):
                    limit = min(limit, self._bases[i])
                    break
        end = bisect_right(self._bases, limit) - 1  # segments[:end] lie wholly below limit
        if end <= 0:
            return None
        clean = dirty = 0
        first_dirty_timestamp = -1
        for i in range(end):
            size = self._segments[i].size
            if self._bases[i + 1] <= first_dirty:
                clean += size
            else:
                if dirty == 0 and first_dirty_timestamp < 0:
                    first_dirty_timestamp = self._segments[i].first_batch_timestamp
                dirty += size
        max_lag = self.config.max_compaction_lag_ms
        overdue = dirty > 0 and max_lag < LONG_MAX and 0 <= first_dirty_timestamp < now_ms - max_lag
        return CleanableState(first_dirty, self._bases[end], end, clean, dirty, overdue)

    def begin_clean(self, now_ms: int, state: CleanableState) -> PendingClean:
        """What the cleaner needs, taken on the log's own thread; retention waits until the end."""
        self._load()
        end = state.segment_count
        sources = []
        for i in range(end):
            segment = self._segments[i]
            sources.append(
                SourceSegment(
                    segment.base_offset,
                    segment.log_path,
                    segment.size,
                    self._bases[i + 1],
                    segment.last_modified_ms,
                    tuple(segment.txn_index.entries),
                )
            )
        later = tuple(
            txn
            for segment in self._segments[end:]
            for txn in segment.txn_index.entries
            if txn.first_offset < state.end_offset
        )
        task = CleanTask(
            self._path,
            tuple(sources),
            state.first_dirty_offset,
            now_ms,
            self.config.delete_retention_ms,
            self.config.segment_bytes,
            self.config.index_interval_bytes,
            self._producer_state().last_data_offsets(),
            later,
        )
        self._cleaning = True
        return PendingClean(
            task, self._generation, {s.base_offset: s for s in self._segments[:end]}
        )

    def finish_clean(
        self, pending: PendingClean, result: CleanResult, doomed: list[str] | None = None
    ) -> bool:
        """Swap the cleaned segments in (a few renames, on the log's thread); False: discarded.

        A log truncated, trimmed or closed since ``begin_clean`` keeps what it
        has: the cleaned files are thrown away. The replaced files are renamed
        ``.deleted``: added to ``doomed`` for the caller to unlink off the loop,
        unlinked here when no list is given.
        """
        deleted: list[str] = []
        self._cleaning = False
        directory = pending.task.directory
        if pending.generation != self._generation or not self._loaded:
            for group in result.groups:
                discard_cleaned(directory, group.base_offset)
            return False
        for group in result.groups:
            first = bisect_right(self._bases, group.base_offset) - 1
            olds = self._segments[first : first + len(group.replaces)]
            if [s.base_offset for s in olds] != list(group.replaces) or any(
                pending.segments.get(s.base_offset) is not s for s in olds
            ):
                discard_cleaned(directory, group.base_offset)
                continue
            for old in olds:
                for path in (
                    old.log_path,
                    old.offset_index.path,
                    old.time_index.path,
                    old.txn_index.path,
                ):
                    self.handles.forget(path)
            deleted += commit_swap(directory, group.base_offset, group.replaces)
            new = Segment.open(
                directory,
                group.base_offset,
                self.handles,
                self.config.index_interval_bytes,
                has_txn_index=True,
            )
            self._segments[first : first + len(olds)] = [new]
            self._bases[first : first + len(olds)] = [group.base_offset]
        self._boundaries.clear()
        self._write_cleaner_checkpoint(result.end_offset)
        if doomed is None:
            delete_files(deleted)
        else:
            doomed += deleted
        return True

    # -- retention and truncation ---------------------------------------------------------

    @_tells_directory
    def apply_retention(self, now_ms: int) -> int:
        """Delete old whole segments by time, size and log start; returns how many.

        The active segment is never deleted. Time counts from a segment's
        largest timestamp (its file time when it has none), as in Kafka.
        """
        if not self._loaded and not os.path.isdir(self._path):
            return 0
        self._load()
        if self._producers is not None:
            self._producers.remove_expired(now_ms, self.config.producer_id_expiration_ms)
        candidates = self._segments[:-1]
        if self._replicated:
            # Only segments wholly below the high watermark: uncommitted data may
            # still be needed by a follower or be truncated, never expired (Kafka).
            candidates = candidates[: max(0, bisect_right(self._bases, self._high_watermark) - 1)]
        if self._cleaning:
            return 0  # the cleaner is reading these segments: next time
        count = 0
        while count < len(candidates) and self._bases[count + 1] <= self._log_start_offset:
            count += 1
        if not self.config.delete:
            candidates = candidates[:count]  # compact only: nothing goes by time or size
        if self.config.retention_ms >= 0:
            while count < len(candidates):
                segment = candidates[count]
                newest = segment.max_timestamp
                if newest < 0:
                    newest = segment.last_modified_ms
                if now_ms - newest <= self.config.retention_ms:
                    break
                count += 1
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes - self.config.retention_bytes
            excess -= sum(segment.size for segment in candidates[:count])
            while count < len(candidates) and excess - candidates[count].size >= 0:
                excess -= candidates[count].size
                count += 1
        if count:
            # Nor a segment holding part of an open transaction: its records and
            # its first offset (the LSO) stay until a marker decides it. Asked
            # only now, so a pass with nothing to delete loads no producer state.
            unstable = self._producer_state().first_unstable_offset
            if unstable is not None:
                count = min(count, max(0, bisect_right(self._bases, unstable) - 1))
        if count:
            self._delete_oldest(count)
            self._notify(LogEvent.LOG_START_MOVED)
        return count

    def _delete_oldest(self, count: int) -> None:
        self._generation += 1
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        for segment in doomed:
            segment.delete()
        self._prune_snapshots()
        if self._epoch_cache is not None:
            self._epoch_cache.truncate_from_start(self._log_start_offset)
        self._boundaries.clear()
        self._clamp_high_watermark()

    @_tells_directory
    def delete_records(self, offset: int) -> int:
        """Advance the log start to ``offset`` (Kafka's DeleteRecords); returns the new start.

        Not past the high watermark (the log end when not replicated): records
        not yet on every in-sync replica cannot be deleted, as in Kafka.
        """
        self._load()
        limit = self.high_watermark
        if offset > limit or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: the high watermark is {limit}"
            )
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        self._write_log_start_checkpoint()
        if self._epoch_cache is not None:
            self._epoch_cache.truncate_from_start(offset)
        count = 0
        while count < len(self._segments) - 1 and self._bases[count + 1] <= offset:
            count += 1
        if count:
            unstable = self._producer_state().first_unstable_offset
            if unstable is not None:  # an open transaction's segments stay
                count = min(count, max(0, bisect_right(self._bases, unstable) - 1))
        if count:
            self._delete_oldest(count)
        self._notify(LogEvent.LOG_START_MOVED)
        return self._log_start_offset

    @_tells_directory
    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (the whole batch holding it).

        At the log end no record goes, but leader-epoch entries starting there
        do: a replica that led an epoch without writing in it must not keep
        claiming that epoch once it follows, or the leader's next batch of an
        older epoch would wipe the entries before it.
        """
        self._load()
        if offset >= self._log_end_offset:
            if offset == self._log_end_offset and self._epoch_cache is not None:
                self._epoch_cache.truncate_from_end(offset)
            return
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        self.corrupt = tuple(c for c in self.corrupt if c.last_offset < offset)
        self._generation += 1
        if offset <= self._log_start_offset or offset <= self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return
        while self._bases[-1] >= offset:
            self._segments.pop().delete()
            self._bases.pop()
        active = self._segments[-1]
        active.truncate_to(offset)
        self._log_end_offset = active.next_offset
        if self._epoch_cache is not None:
            self._epoch_cache.truncate_from_end(self._log_end_offset)
        self._boundaries.clear()
        self._clamp_high_watermark()
        self._drop_snapshots_after(self._log_end_offset)
        self._producers = None  # rebuilt from a snapshot and what is left, on next use
        self._notify(LogEvent.TRUNCATED)

    @_tells_directory
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (log start = log end = ``offset``).

        A follower whose fetch offset is out of the leader's range (the leader
        deleted what the follower still needs) starts over at the leader's log
        start; ``truncate_to`` below the log start lands here too.
        """
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        self.corrupt = ()
        self._generation += 1
        self._load()
        os.makedirs(self._path, exist_ok=True)
        for segment in self._segments:
            segment.delete()
        self._segments.clear()
        self._bases.clear()
        for snap in list(self._snapshots):
            self._drop_snapshot(snap)
        self._txn_index_rebuild_from = None
        self._log_start_offset = self._log_end_offset = offset
        self._segments.append(
            Segment.create(
                self._path,
                offset,
                self.handles,
                self.config.index_interval_bytes,
                int(time.time() * 1000),
            )
        )
        self._bases.append(offset)
        if offset > 0 or os.path.exists(os.path.join(self._path, LOG_START_OFFSET_FILE)):
            self._write_log_start_checkpoint()
        # Nothing is left: the epochs of the next batches are all that will count.
        self.leader_epoch_cache.clear()
        self._boundaries.clear()
        self._clamp_high_watermark()
        self._producers = None
        self._notify(LogEvent.TRUNCATED)

    # -- durability and lifecycle ---------------------------------------------------------

    def flush(self) -> None:
        """fsync the active segment (rolled segments were flushed when they rolled).

        A failing fsync tells the directory (it goes offline) and raises
        KafkaStorageError; an offline log is not flushed (its disk failed).
        """
        if self._loaded and self._segments and self.offline is None:
            try:
                self._segments[-1].flush()
            except OSError as exc:
                raise self._storage_error(exc) from None
        self._unflushed_messages = 0
        self._unflushed_since_ms = None

    @property
    def has_unflushed_data(self) -> bool:
        """Appended since the last fsync (what a clean stop must flush)."""
        return self._loaded and self._unflushed_since_ms is not None

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush when data has waited ``flush.ms``; returns whether it flushed."""
        interval = self.config.flush_interval_ms
        since = self._unflushed_since_ms
        if interval is None or since is None or now_ms - since < interval:
            return False
        if self.offline is not None:
            return False
        self.flush()
        return True

    def close(self) -> None:
        """Finish the active segment, flush, and let go of every file and cached state.

        The object stays usable: the next call loads the log again.
        """
        if self._loaded and self._segments and self.offline is None:
            self._segments[-1].on_become_inactive()
            if self._unflushed_since_ms is not None:
                # Only logs written since their last fsync pay for one: a clean
                # stop of a broker with thousands of quiet partitions stays quick.
                self.flush()
            if self._producers is not None and (
                self._producers.changed or self._log_end_offset not in self._snapshots
            ):
                # The next start loads this instead of replaying the segment.
                self._take_snapshot()
        self.handles.forget_under(self._path)
        self._generation += 1
        self._loaded = False
        self._recover = False
        self._segments = []
        self._bases = []
        self._producers = None
        self._epoch_cache = None
        self._boundaries.clear()

    @property
    def cleaning(self) -> bool:
        """A clean is under way (its thread writes files into the directory)."""
        return self._cleaning

    @property
    def generation(self) -> int:
        """Bumped by every change that is not an append (truncation, retention, close):
        a copier that relies on segments only growing starts over when it moves."""
        return self._generation

    def relocate(self, directory: Path) -> None:
        """Point a closed log at its new directory (a replica moved between data
        directories): the next use loads it from there. Offsets in memory (the high
        watermark, the leader epoch stamped on appends) and listeners are kept."""
        if self._loaded:
            raise RuntimeError(f"{self!r} must be closed before it moves")
        self.handles.forget_under(self._path)
        self._path = os.fspath(directory)

    def delete(self) -> None:
        """Remove the partition directory and everything in it."""
        self._generation += 1
        self.handles.forget_under(self._path)
        shutil.rmtree(self._path, ignore_errors=True)
        self._loaded = False
        self._recover = False
        self._segments = []
        self._bases = []
        self._producers = None
        self._epoch_cache = None
        self._boundaries.clear()
        self._unflushed_messages = 0
        self._unflushed_since_ms = None
        self._replicated = False
        self._high_watermark = 0
        self._notify(LogEvent.TRUNCATED)
