"""Log compaction on segment files (Kafka's ``Cleaner``): keep the latest record per key.

A pure function of files: it is given a description of a log's rolled
segments (never the active one), reads them with descriptors of its own and
writes cleaned segments as ``<base>.log.cleaned`` (+ indexes) next to them.
It knows nothing of brokers, and nothing of the live ``Log`` object: the
swap into a live log is :func:`headwater.log.cleaner_swap.commit_swap`, run
by whoever owns the log.

One clean, as in Kafka:

1. **Map** the dirty segments (from the first dirty offset to the first
   uncleanable one) into the bounded :class:`OffsetMap`, key hash -> latest
   offset, skipping control batches and aborted transactions. When the map
   is full it stops at a batch boundary: the next clean continues there.
2. **Clean** every segment from the log start up to the map's reach, in
   groups that fit ``segment.bytes``: a record survives if no later offset
   of its key is mapped (or it is past the map); a tombstone (null value)
   only until ``delete.retention.ms`` after the clean that first kept it
   (KIP-534: that clean writes the horizon into the batch); records
   without a key go. Batches keep their base offset, last
   offset delta, producer fields and timestamps, so offsets stay (gaps are
   allowed) and the log end never moves; a batch that keeps every record is
   copied byte for byte.
3. **Transactions**: records of aborted transactions go; a COMMIT/ABORT
   marker goes only past the delete horizon and once no data of its
   transaction is left before it; the last batch of each live producer id
   is kept (empty if need be) so idempotent producers keep their sequence.

A segment that cannot be parsed is logged and left exactly as it is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from headwater.log.index import MAX_RELATIVE_OFFSET
from headwater.log.offset_map import OffsetMap
from headwater.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file_name
from headwater.log.txn_index import ENTRY, TXN_INDEX_SUFFIX, VERSION, AbortedTxn
from headwater.records.batch import (
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    batch_crc_is_valid,
    iter_batch_headers,
    parse_batch_header,
    write_batch_crc,
)
from headwater.records.compression import compress, decompress
from headwater.records.control import ABORT, COMMIT, parse_control_batch
from headwater.records.errors import CorruptRecordError
from headwater.records.record import decode_varint, encode_varint

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
#: Lists the base offsets of the segments a swapped-in segment replaces.
REPLACES_SUFFIX = ".replaces"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

DELETE_HORIZON_MASK = 0x40  # batch attribute: base timestamp is the delete horizon (KIP-534)
READ_CHUNK = 8 << 20  # bytes read per pread while walking a segment
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")

Throttle = Callable[[int], None]  # called with bytes about to be read or written


class UnreadableSegmentError(Exception):
    """A segment the cleaner cannot parse: it is skipped, never changed."""


@dataclass(frozen=True, slots=True)
class SourceSegment:
    """What the cleaner needs of one rolled segment (taken from the live log on its loop)."""

    base_offset: int
    path: str  # the .log file
    size: int
    next_offset: int  # the base offset of the segment after it (its end, gaps included)
    mtime_ms: int
    aborted: tuple[AbortedTxn, ...] = ()  # its .txnindex


@dataclass(frozen=True, slots=True)
class CleanTask:
    """One log to clean: segments from the log start up to the first uncleanable offset."""

    directory: str
    segments: tuple[SourceSegment, ...]
    first_dirty_offset: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    #: producer id -> last offset of its last batch, for every live producer
    producer_last_offsets: Mapping[int, int] = field(default_factory=dict)
    #: aborted transactions whose markers lie past ``segments`` (data may be in them)
    later_aborted: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """A ``<base>.log.cleaned`` (and indexes) replacing the segments ``replaces``."""

    base_offset: int
    replaces: tuple[int, ...]
    size_before: int
    size_after: int


@dataclass(slots=True)
class CleanResult:
    groups: list[CleanedGroup]
    end_offset: int  # the new first dirty offset
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    skipped: list[int] = field(default_factory=list)  # unreadable segments' base offsets

    @property
    def size_before(self) -> int:
        return sum(g.size_before for g in self.groups)

    @property
    def size_after(self) -> int:
        return sum(g.size_after for g in self.groups)


def _no_throttle(_: int) -> None:
    return None


def _batches(path: str, size: int, throttle: Throttle) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every whole batch of a segment file, header and bytes, read in large chunks.

    Raises UnreadableSegmentError for anything that is not a run of sound v2
    batches ending exactly at ``size``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise UnreadableSegmentError(f"{path}: {exc}") from exc
    try:
        position = 0
        while position < size:
            want = min(READ_CHUNK, size - position)
            throttle(want)
            chunk = memoryview(os.pread(fd, want, position))
            if len(chunk) < HEADER_SIZE:
                raise UnreadableSegmentError(f"{path}: cut short at position {position}")
            consumed = 0
            try:
                for header in iter_batch_headers(chunk):
                    consumed = header.position + header.size
                    yield (
                        header._replace(position=position + header.position),
                        chunk[header.position : consumed],
                    )
                if consumed == 0:  # one batch larger than the chunk
                    header = parse_batch_header(chunk)
                    if position + header.size > size:
                        raise UnreadableSegmentError(f"{path}: torn batch at position {position}")
                    whole = memoryview(os.pread(fd, header.size, position))
                    if len(whole) < header.size:
                        raise UnreadableSegmentError(f"{path}: cut short at position {position}")
                    consumed = header.size
                    yield header._replace(position=position), whole
            except CorruptRecordError as exc:
                raise UnreadableSegmentError(f"{path}: {exc}") from exc
            position += consumed
    finally:
        os.close(fd)


def _check(header: BatchHeader, batch: memoryview, path: str) -> None:
    if header.magic != MAGIC_V2:
        raise UnreadableSegmentError(
            f"{path}: batch at offset {header.base_offset} has magic {header.magic}"
        )
    if not batch_crc_is_valid(batch, header._replace(position=0)):
        raise UnreadableSegmentError(
            f"{path}: batch at offset {header.base_offset} fails its CRC-32C check"
        )


def _records_of(header: BatchHeader, batch: memoryview) -> np.ndarray:
    body = batch[HEADER_SIZE:]
    if header.compression:
        body = memoryview(decompress(header.compression, body))
    return np.frombuffer(body, dtype=np.uint8)


def _control_type(header: BatchHeader, batch: memoryview) -> int:
    """ABORT or COMMIT of a control batch (-1 when it is neither)."""
    marker = parse_control_batch(batch, header._replace(position=0))
    if marker is None:
        return -1
    return COMMIT if marker.commit else ABORT


class _TxnTracker:
    """Kafka's CleanedTransactionMetadata: which batches belong to aborted transactions."""

    __slots__ = ("_aborted", "_next", "ongoing_aborted", "ongoing_committed")

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self.ongoing_aborted: dict[int, bool] = {}  # pid -> saw data of it in this pass
        self.ongoing_committed: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self._next < len(self._aborted) and self._aborted[self._next].first_offset <= offset:
            txn = self._aborted[self._next]
            self.ongoing_aborted.setdefault(txn.producer_id, False)
            self._next += 1

    def on_data_batch(self, header: BatchHeader) -> bool:
        """True when the batch belongs to an aborted transaction (its records go)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        pid = header.producer_id
        if pid in self.ongoing_aborted:
            self.ongoing_aborted[pid] = True
            return True
        self.ongoing_committed.add(pid)
        return False

    def on_control_batch(self, header: BatchHeader, kind: int) -> bool:
        """True when the marker may go (past the horizon): no data of its transaction is left."""
        self._consume_up_to(header.last_offset)
        pid = header.producer_id
        if kind == ABORT:
            saw_data = self.ongoing_aborted.pop(pid, None)
            return not saw_data
        if kind == COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False


class _SegmentWriter:
    """Writes one cleaned segment and its indexes as ``.cleaned`` files."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self._interval = index_interval_bytes
        self.paths = {
            suffix: os.path.join(directory, segment_file_name(base_offset, suffix) + CLEANED_SUFFIX)
            for suffix in SEGMENT_SUFFIXES
        }
        self._fd = os.open(
            self.paths[LOG_SUFFIX], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644
        )
        self._buffer = bytearray()
        self.size = 0
        self._offset_index = bytearray()
        self._time_index = bytearray()
        self._since_entry = 0
        self._max_timestamp = -1
        self._offset_of_max = base_offset
        self._last_time_entry = -1
        self.aborted: list[AbortedTxn] = []

    def write(self, header: BatchHeader, data: bytes | bytearray | memoryview) -> None:
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp = header.max_timestamp
            self._offset_of_max = header.base_offset
        if self._since_entry > self._interval:
            self._offset_index += _OFFSET_ENTRY.pack(
                header.base_offset - self.base_offset, self.size
            )
            self._add_time_entry()
            self._since_entry = 0
        self._since_entry += len(data)
        self._buffer += data
        self.size += len(data)
        if len(self._buffer) >= READ_CHUNK:
            self._drain()

    def _add_time_entry(self) -> None:
        if self._max_timestamp > self._last_time_entry:
            self._time_index += _TIME_ENTRY.pack(
                self._max_timestamp, self._offset_of_max - self.base_offset
            )
            self._last_time_entry = self._max_timestamp

    def _drain(self) -> None:
        with memoryview(self._buffer) as whole:
            view = whole
            while view:
                view = view[os.write(self._fd, view) :]
            view.release()
        self._buffer.clear()

    def finish(self, mtime_ms: int) -> None:
        """Write everything, fsync, and give the log file its sources' newest mtime (Kafka)."""
        self._drain()
        os.fsync(self._fd)
        os.close(self._fd)
        self._add_time_entry()
        files = {  # every file, the .txnindex too (empty): the swap relies on it
            INDEX_SUFFIX: bytes(self._offset_index),
            TIME_INDEX_SUFFIX: bytes(self._time_index),
            TXN_INDEX_SUFFIX: b"".join(ENTRY.pack(VERSION, *t) for t in self.aborted),
        }
        for suffix, data in files.items():
            with open(self.paths[suffix], "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        seconds = mtime_ms / 1000
        os.utime(self.paths[LOG_SUFFIX], (seconds, seconds))

    def abandon(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        for path in self.paths.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _rebuilt_batch(header: BatchHeader, batch: memoryview, records: bytes, kept: int) -> bytes:
    """The batch with only ``records`` (already in the batch's codec): same offsets, new CRC."""
    out = bytearray(HEADER_SIZE + len(records))
    out[:HEADER_SIZE] = batch[:HEADER_SIZE]
    out[HEADER_SIZE:] = records
    fields = list(HEADER_STRUCT.unpack_from(out, 0))
    fields[1] = len(out) - LOG_OVERHEAD  # batch length
    fields[12] = kept  # record count; last offset delta stays (Kafka keeps the last offset)
    HEADER_STRUCT.pack_into(out, 0, *fields)
    write_batch_crc(out, 0, len(out))
    return bytes(out)


def _with_delete_horizon(
    header: BatchHeader, batch: memoryview, records: bytes, kept: int, horizon_ms: int
) -> bytes:
    """The batch with ``records`` (uncompressed), its delete horizon as base timestamp.

    KIP-534: the first clean that keeps a tombstone or a transaction marker
    stamps the batch (attribute bit 6, base timestamp = when it may go), so
    later cleans know when delete.retention.ms has passed for this very
    batch, whatever segment it was merged into. Record timestamps are deltas
    from the base timestamp, so each record's delta is rewritten: readers
    see the same timestamps.
    """
    out = bytearray()
    shift = header.base_timestamp - horizon_ms
    pos = 0
    for _ in range(kept):
        length, body = _varint(records, pos)
        end = body + length
        delta, after = _varint(records, body + 1)
        record = records[body : body + 1] + encode_varint(delta + shift) + records[after:end]
        out += encode_varint(len(record))
        out += record
        pos = end
    data = compress(header.compression, bytes(out)) if header.compression else bytes(out)
    rebuilt = bytearray(_rebuilt_batch(header, batch, data, kept))
    fields = list(HEADER_STRUCT.unpack_from(rebuilt, 0))
    fields[5] = header.attributes | DELETE_HORIZON_MASK
    fields[7] = horizon_ms
    HEADER_STRUCT.pack_into(rebuilt, 0, *fields)
    write_batch_crc(rebuilt, 0, len(rebuilt))
    return bytes(rebuilt)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return decode_varint(data, pos)
    except IndexError as exc:
        raise CorruptRecordError(f"record cut short at {pos}") from exc


def _group(segments: Sequence[SourceSegment], segment_bytes: int) -> list[list[SourceSegment]]:
    """Consecutive segments whose total size fits one segment and whose offsets fit its index."""
    groups: list[list[SourceSegment]] = []
    for segment in segments:
        if groups:
            current = groups[-1]
            size = sum(s.size for s in current)
            if (
                size + segment.size <= segment_bytes
                and segment.next_offset - 1 - current[0].base_offset <= MAX_RELATIVE_OFFSET
            ):
                current.append(segment)
                continue
        groups.append([segment])
    return groups


class Cleaner:
    """Cleans one log at a time with one bounded offset map (one per cleaner thread)."""

    def __init__(self, dedupe_buffer_bytes: int, throttle: Throttle = _no_throttle) -> None:
        self.offset_map = OffsetMap(dedupe_buffer_bytes)
        self.throttle = throttle

    def clean(self, task: CleanTask) -> CleanResult:
        segments = list(task.segments)
        limit = segments[-1].next_offset if segments else task.first_dirty_offset
        result = CleanResult([], task.first_dirty_offset)
        skipped: set[int] = set()
        aborted = [t for s in segments for t in s.aborted] + list(task.later_aborted)
        result.end_offset = self._build_map(task, segments, aborted, limit, skipped, result)
        if self.offset_map.size == 0 and result.end_offset <= task.first_dirty_offset:
            return result
        to_clean = [s for s in segments if s.base_offset < result.end_offset]
        runs: list[list[SourceSegment]] = [[]]
        for segment in to_clean:
            if segment.base_offset in skipped:
                runs.append([])
            else:
                runs[-1].append(segment)
        tracker = _TxnTracker(aborted)
        for run in runs:
            for group in _group(run, task.segment_bytes):
                cleaned = self._clean_group(task, group, tracker, result)
                if cleaned is None:
                    skipped.update(s.base_offset for s in group)
                    tracker = _TxnTracker(aborted)  # its state is unknown now
                else:
                    result.groups.append(cleaned)
        result.skipped = sorted(skipped)
        return result

    def _build_map(
        self,
        task: CleanTask,
        segments: list[SourceSegment],
        aborted: list[AbortedTxn],
        limit: int,
        skipped: set[int],
        result: CleanResult,
    ) -> int:
        """Map the dirty segments; returns the first offset the map does not cover."""
        offset_map = self.offset_map
        offset_map.clear()
        tracker = _TxnTracker(aborted)
        for segment in segments:
            if segment.next_offset <= task.first_dirty_offset:
                continue
            try:
                for header, batch in _batches(segment.path, segment.size, self.throttle):
                    if header.last_offset < task.first_dirty_offset:
                        continue
                    _check(header, batch, segment.path)
                    if header.is_control:
                        tracker.on_control_batch(header, _control_type(header, batch))
                        continue
                    if tracker.on_data_batch(header):
                        continue
                    if not offset_map.room_for(header.record_count):
                        if offset_map.size == 0:
                            raise UnreadableSegmentError(
                                f"{segment.path}: a batch of {header.record_count} records "
                                "does not fit the dedupe buffer"
                            )
                        return offset_map.latest_offset + 1
                    records = _records_of(header, batch)
                    if not offset_map.put_records(
                        records, header.record_count, header.base_offset, header.last_offset
                    ):
                        raise UnreadableSegmentError(
                            f"{segment.path}: malformed records in batch at offset "
                            f"{header.base_offset}"
                        )
            except (UnreadableSegmentError, CorruptRecordError) as exc:
                log.warning("log cleaner skips an unreadable segment: %s", exc)
                skipped.add(segment.base_offset)
                tracker = _TxnTracker(aborted)
        return limit

    def _clean_group(
        self,
        task: CleanTask,
        group: list[SourceSegment],
        tracker: _TxnTracker,
        result: CleanResult,
    ) -> CleanedGroup | None:
        writer = _SegmentWriter(task.directory, group[0].base_offset, task.index_interval_bytes)
        horizon_at = task.now_ms + task.delete_retention_ms
        live_last = task.producer_last_offsets
        scratch = np.empty(0, np.uint8)
        offset_map = self.offset_map
        read = records_read = records_kept = 0
        mtime = 0
        try:
            for segment in group:
                mtime = max(mtime, segment.mtime_ms)
                for header, batch in _batches(segment.path, segment.size, self.throttle):
                    read += header.size
                    records_read += header.record_count
                    _check(header, batch, segment.path)
                    last_of_producer = (
                        header.producer_id >= 0
                        and live_last.get(header.producer_id) == header.last_offset
                    )
                    dirty = header.last_offset >= task.first_dirty_offset
                    if header.attributes & DELETE_HORIZON_MASK:
                        retain_deletes = task.now_ms < header.base_timestamp
                    else:
                        retain_deletes = dirty  # first clean: the horizon starts now
                    if header.is_control:
                        kind = _control_type(header, batch)
                        discardable = tracker.on_control_batch(header, kind)
                        if discardable and not retain_deletes and not last_of_producer:
                            continue
                        if kind == ABORT:
                            writer.aborted.extend(
                                t
                                for t in segment.aborted
                                if t.last_offset == header.base_offset
                                and t.producer_id == header.producer_id
                            )
                        if dirty and not header.attributes & DELETE_HORIZON_MASK:
                            body = _records_of(header, batch).tobytes()
                            batch = memoryview(
                                _with_delete_horizon(header, batch, body, 1, horizon_at)
                            )
                        writer.write(header, batch)
                        records_kept += header.record_count
                        continue
                    if tracker.on_data_batch(header):
                        if last_of_producer:
                            writer.write(header, _rebuilt_batch(header, batch, b"", 0))
                        continue
                    records = _records_of(header, batch)
                    if scratch.shape[0] < records.shape[0]:
                        scratch = np.empty(max(records.shape[0], 1 << 20), np.uint8)
                    kept, size, tombstones, ok = offset_map.filter_records(
                        records, header.record_count, header.base_offset, retain_deletes, scratch
                    )
                    if not ok:
                        raise UnreadableSegmentError(
                            f"{segment.path}: malformed records in batch at offset "
                            f"{header.base_offset}"
                        )
                    records_kept += kept
                    if tombstones and not header.attributes & DELETE_HORIZON_MASK:
                        # Kafka's KIP-534: the batch carries when its tombstones may go
                        body = scratch[:size].tobytes()
                        writer.write(
                            header, _with_delete_horizon(header, batch, body, kept, horizon_at)
                        )
                    elif kept == header.record_count and (kept or last_of_producer):
                        writer.write(header, batch)  # untouched
                    elif kept or last_of_producer:
                        body = scratch[:size].tobytes()
                        if header.compression and kept:
                            body = compress(header.compression, body)
                        writer.write(header, _rebuilt_batch(header, batch, body, kept))
            writer.finish(mtime)
        except (UnreadableSegmentError, CorruptRecordError, OSError) as exc:
            writer.abandon()
            log.warning("log cleaner skips segments %s: %s", [s.base_offset for s in group], exc)
            return None
        except BaseException:
            writer.abandon()
            raise
        result.bytes_read += read
        result.bytes_written += writer.size
        result.records_read += records_read
        result.records_kept += records_kept
        self.throttle(writer.size)
        replaces_path = os.path.join(
            task.directory, segment_file_name(group[0].base_offset, REPLACES_SUFFIX)
        )
        with open(replaces_path + CLEANED_SUFFIX, "w") as f:
            f.write("".join(f"{s.base_offset}\n" for s in group))
            f.flush()
            os.fsync(f.fileno())
        return CleanedGroup(
            group[0].base_offset,
            tuple(s.base_offset for s in group),
            sum(s.size for s in group),
            writer.size,
        )
