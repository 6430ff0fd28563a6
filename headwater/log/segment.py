"""One segment of a partition log: a ``.log`` file of batches plus its two sparse indexes.

The segment finds a batch by index lookup and then a short scan of batch
headers (one ``pread`` of a small window), and returns a FileSlice over the
file: the record bytes are never read into Python on the fetch path. What it
must know to append (size, next offset, max timestamp) is kept in memory,
computed on first use from the index's last entry and a scan of the bytes
after it, so opening a segment costs a ``stat`` and nothing more.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Callable, Iterator, Sequence

from headwater.log import disk_io
from headwater.log.handles import FileHandleCache
from headwater.log.index import MAX_RELATIVE_OFFSET, OffsetIndex, TimeIndex
from headwater.log.txn_index import TXN_INDEX_SUFFIX, TransactionIndex
from headwater.protocol.file_slice import FileSlice
from headwater.records.batch import (
    HEADER_SIZE,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    BatchHeader,
    batch_crc_is_valid,
    iter_batch_headers,
    parse_batch_header,
)
from headwater.records.errors import CorruptRecordError
from headwater.records.record import decode_batches

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

# A fetch lands within one index interval (4 KiB by default) of its batch, so
# a window this size usually finds it in one pread; recovery reads in big chunks.
READ_WINDOW = 16 * 1024
_BASE_AND_LENGTH = struct.Struct(">qi")  # baseOffset @0, batchLength @8
_LAST_OFFSET_DELTA = struct.Struct(">i")  # lastOffsetDelta @23
SCAN_WINDOW = 1 << 20


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's naming: the base offset as 20 digits, so names sort as offsets do."""
    return f"{base_offset:020d}{suffix}"


class Segment:
    """A ``<base>.log`` with ``.index`` and ``.timeindex``; opens no file until used."""

    __slots__ = (
        "_bytes_since_index_entry",
        "_created_ms",
        "_first_timestamp",
        "_handles",
        "_index_interval_bytes",
        "_indexes_checked",
        "_last_appended",
        "_max_timestamp",
        "_next_offset",
        "_offset_of_max_timestamp",
        "_tail_loaded",
        "base_offset",
        "log_path",
        "offset_index",
        "recovery_reason",
        "size",
        "time_index",
        "txn_index",
    )

    def __init__(
        self,
        directory: str,
        base_offset: int,
        handles: FileHandleCache,
        index_interval_bytes: int,
        size: int,
        created_ms: int,
        has_txn_index: bool | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.log_path = os.path.join(directory, segment_file_name(base_offset, LOG_SUFFIX))
        self.offset_index = OffsetIndex(
            os.path.join(directory, segment_file_name(base_offset, INDEX_SUFFIX)),
            base_offset,
            handles,
        )
        self.time_index = TimeIndex(
            os.path.join(directory, segment_file_name(base_offset, TIME_INDEX_SUFFIX)),
            base_offset,
            handles,
        )
        self.txn_index = TransactionIndex(
            os.path.join(directory, segment_file_name(base_offset, TXN_INDEX_SUFFIX)),
            handles,
            exists=has_txn_index,
        )
        self.size = size  # bytes of whole batches: the only bytes readers may see
        self.recovery_reason: str | None = None  # why the last rebuild cut the file
        self._handles = handles
        self._index_interval_bytes = index_interval_bytes
        self._created_ms = created_ms
        self._indexes_checked = False
        self._tail_loaded = False
        self._next_offset = base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_index_entry = 0
        self._first_timestamp: int | None = None
        #: (base offset, last offset, position, size) of the batch appended last, so
        #: that a follower or consumer reading at the tail finds it without a pread
        #: and a scan; None once anything but an append changed the file.
        self._last_appended: tuple[int, int, int, int] | None = None

    @classmethod
    def create(
        cls,
        directory: str,
        base_offset: int,
        handles: FileHandleCache,
        index_interval_bytes: int,
        now_ms: int,
    ) -> Segment:
        """A new empty segment with its three files on disk."""
        segment = cls(directory, base_offset, handles, index_interval_bytes, 0, now_ms)
        handle = handles.get(segment.log_path, create=True)
        os.ftruncate(handle.fileno(), 0)
        segment.offset_index.reset()
        segment.time_index.reset()
        segment.txn_index.reset()  # a leftover of an older segment at this offset
        segment._indexes_checked = True
        segment._tail_loaded = True
        return segment

    @classmethod
    def open(
        cls,
        directory: str,
        base_offset: int,
        handles: FileHandleCache,
        index_interval_bytes: int,
        *,
        has_txn_index: bool | None = None,
    ) -> Segment:
        """An existing segment: one ``stat``, everything else on first use.

        ``has_txn_index`` (known when the caller listed the directory) spares
        a failed open of a ``.txnindex`` that does not exist.
        """
        path = os.path.join(directory, segment_file_name(base_offset, LOG_SUFFIX))
        st = os.stat(path)
        return cls(
            directory,
            base_offset,
            handles,
            index_interval_bytes,
            st.st_size,
            int(st.st_mtime * 1000),
            has_txn_index,
        )

    # -- state derived from the file, loaded on first use --------------------------------

    def _ensure_indexes(self) -> None:
        if self._indexes_checked:
            return
        self._indexes_checked = True
        if not (self.offset_index.is_consistent(self.size) and self.time_index.is_consistent()):
            self.rebuild_indexes()

    def _load_tail(self) -> None:
        """Find next offset and max timestamp from the last index entries onward."""
        if self._tail_loaded:
            return
        self._ensure_indexes()
        if self._tail_loaded:  # a rebuild just computed it
            return
        self._tail_loaded = True
        if not self._load_tail_from_indexes():
            self.rebuild_indexes()

    def _load_tail_from_indexes(self) -> bool:
        """Scan from the last index entry; False when the tail or the time index is off.

        A tail that does not end on a batch boundary means the file was torn
        although nobody asked for recovery; a full rebuild then finds the
        last whole batch, which the index entries may point past.
        """
        entry = self.offset_index.last_entry()
        start = entry[1] if entry else 0
        time_entry = self.time_index.last_entry()
        if time_entry is not None:
            self._max_timestamp, self._offset_of_max_timestamp = time_entry
        self._next_offset = entry[0] if entry else self.base_offset
        end = start
        try:
            for header, _ in self._scan(start, self.size, READ_WINDOW, with_bytes=False):
                self._next_offset = header.next_offset
                if header.max_timestamp > self._max_timestamp:
                    self._max_timestamp = header.max_timestamp
                    self._offset_of_max_timestamp = header.base_offset
                end = header.position + header.size
        except CorruptRecordError:
            pass
        if end != self.size:
            return False
        self._bytes_since_index_entry = self.size - start
        return time_entry is None or time_entry[1] < self._next_offset

    @property
    def next_offset(self) -> int:
        """The offset the next appended batch gets (base offset when empty)."""
        self._load_tail()
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch max timestamp in the segment; -1 when it has none."""
        self._load_tail()
        return self._max_timestamp

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    def _first_batch_timestamp(self) -> int:
        """The first batch's max timestamp (-1 when empty or unstamped), read once."""
        if self._first_timestamp is None:
            timestamp = -1
            if self.size >= HEADER_SIZE:
                fd = self._handles.get(self.log_path).fileno()
                timestamp = parse_batch_header(
                    disk_io.pread(fd, HEADER_SIZE, 0, self.log_path)
                ).max_timestamp
            self._first_timestamp = timestamp
        return self._first_timestamp

    @property
    def first_batch_timestamp(self) -> int:
        """The first batch's max timestamp; -1 when empty or unstamped (max.compaction.lag.ms)."""
        return self._first_batch_timestamp()

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """How old the segment is for ``segment.ms``, measured as Kafka does.

        Kafka compares the incoming batch's timestamp with the segment's first
        batch, not the wall clock, so replaying old data does not roll a
        segment per append; only unstamped segments fall back to file time.
        """
        first = self._first_batch_timestamp()
        if first >= 0:
            return message_timestamp - first
        return now_ms - self._created_ms

    # -- writing --------------------------------------------------------------------------

    def can_hold_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def append(self, data: bytes | bytearray | memoryview, batches: Sequence[BatchHeader]) -> None:
        """Write whole batches whose headers (positions relative to ``data``) are given.

        The bytes are written first and the size advanced last, so a failed
        write leaves nothing visible. A write that fails part way (ENOSPC, EIO)
        is undone before the error goes on: the file is cut back to the old
        size and index entries added for it are removed, so that a clean stop
        after a full disk leaves no bytes past the last whole batch.
        """
        self._load_tail()
        if self.size == 0:
            self._first_timestamp = None
        position = self.size
        saved = (
            self._max_timestamp,
            self._offset_of_max_timestamp,
            self._bytes_since_index_entry,
            self._first_timestamp,
        )
        try:
            disk_io.pwrite_all(
                self._handles.get(self.log_path).fileno(), data, position, self.log_path
            )
            for header in batches:
                self._track(header, position + header.position)
        except OSError:
            self._undo_append(position, batches[0].base_offset, saved)
            raise
        self._next_offset = batches[-1].next_offset
        self.size = position + len(data)
        last = batches[-1]
        self._last_appended = (
            last.base_offset,
            last.last_offset,
            position + last.position,
            last.size,
        )

    def _undo_append(
        self, position: int, first_offset: int, saved: tuple[int, int, int, int | None]
    ) -> None:
        """Forget a failed append: cutting files needs no free space, but may fail too."""
        (
            self._max_timestamp,
            self._offset_of_max_timestamp,
            self._bytes_since_index_entry,
            self._first_timestamp,
        ) = saved
        with contextlib.suppress(OSError):
            self.offset_index.truncate_to(first_offset)
            self.time_index.truncate_to(first_offset)
        with contextlib.suppress(OSError):
            os.ftruncate(self._handles.get(self.log_path).fileno(), position)

    def _track(self, header: BatchHeader, position: int) -> None:
        """Kafka's index policy: an entry for the first batch after each interval of bytes."""
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = header.base_offset
        if self._bytes_since_index_entry > self._index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size

    def on_become_inactive(self) -> None:
        """Called when the log rolls past this segment: record its final max timestamp."""
        self._load_tail()
        if self.size > 0 and self._max_timestamp >= 0:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)

    def flush(self) -> None:
        disk_io.fsync(self._handles.get(self.log_path).fileno(), self.log_path)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def delete(self) -> None:
        self._handles.forget(self.log_path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.log_path)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.size = 0
        self._last_appended = None

    # -- reading --------------------------------------------------------------------------

    def _scan(
        self, start: int, end: int, window: int, *, with_bytes: bool
    ) -> Iterator[tuple[BatchHeader, memoryview | None]]:
        """Whole batches between two file positions, header first, reading ``window`` at a time.

        Batches larger than the window are stepped over by their header alone
        unless ``with_bytes`` asks for their contents (recovery checks CRCs).
        A header whose length is impossible raises CorruptRecordError.
        """
        fd = self._handles.get(self.log_path).fileno()
        position = start
        while end - position >= HEADER_SIZE:
            chunk = memoryview(
                disk_io.pread(fd, min(window, end - position), position, self.log_path)
            )
            if len(chunk) < HEADER_SIZE:
                return  # the file is shorter than we were told
            consumed = 0
            for header in iter_batch_headers(chunk):
                batch = (
                    chunk[header.position : header.position + header.size] if with_bytes else None
                )
                yield header._replace(position=position + header.position), batch
                consumed = header.position + header.size
            if consumed == 0:  # the first batch does not fit the window
                header = parse_batch_header(chunk)
                if header.batch_length < MIN_BATCH_LENGTH:
                    raise CorruptRecordError(f"impossible batch length at position {position}")
                if position + header.size > end:
                    return
                batch = None
                if with_bytes:
                    batch = memoryview(disk_io.pread(fd, header.size, position, self.log_path))
                    if len(batch) < header.size:
                        return
                yield header._replace(position=position), batch
                consumed = header.size
            position += consumed

    def scrub(self, window: int = SCAN_WINDOW) -> Iterator[tuple[BatchHeader, bool]]:
        """Every whole batch of the file with whether its CRC-32C holds (the scrubber's
        read, off the event loop; nothing is written). CorruptRecordError when a batch
        header's length is impossible: nothing past it can be parsed."""
        for header, data in self._scan(0, self.size, window, with_bytes=True):
            assert data is not None
            yield header, batch_crc_is_valid(data, header._replace(position=0))

    def iter_headers(self, start: int = 0) -> Iterator[BatchHeader]:
        """Headers of the whole batches from file position ``start`` (a batch start)."""
        self._ensure_indexes()
        for header, _ in self._scan(start, self.size, SCAN_WINDOW, with_bytes=False):
            yield header

    def read_batch(self, header: BatchHeader) -> bytes:
        """The whole batch ``header`` (from this segment) as bytes: for control batches."""
        fd = self._handles.get(self.log_path).fileno()
        data = disk_io.pread(fd, header.size, header.position, self.log_path)
        if len(data) < header.size:
            raise CorruptRecordError(f"batch at offset {header.base_offset} is cut short")
        return data

    def batch_position_at_or_after(self, position: int) -> int:
        """A batch start at or after ``position``, found by index (``size`` if none)."""
        self._ensure_indexes()
        entry = self.offset_index.entry_at_or_after_position(position)
        return self.size if entry is None else entry[1]

    def batch_boundary_before(self, offset: int) -> int:
        """The file position where the batch holding ``offset`` starts (``size`` if none here).

        Every byte before it belongs to offsets below ``offset``: a reader capped
        at the high watermark stops there, so it never sees a batch that is only
        partly committed.
        """
        found = self._locate(offset, self.size)
        return self.size if found is None else found[0]

    def find_batch(self, offset: int, max_position: int | None = None) -> BatchHeader | None:
        """The first batch ending at or after ``offset``: index lookup, then a short scan."""
        found = self._locate(offset, self.size if max_position is None else max_position)
        if found is None:
            return None
        position, _ = found
        fd = self._handles.get(self.log_path).fileno()
        return parse_batch_header(disk_io.pread(fd, HEADER_SIZE, position, self.log_path))._replace(
            position=position
        )

    def _locate(self, offset: int, end: int) -> tuple[int, int] | None:
        """(position, size) of the first whole batch ending at or after ``offset``.

        The fetch hot path: it reads only the three header fields it needs
        with ``struct`` instead of building a ``BatchHeader`` per scanned
        batch, which was most of an incremental fetch over many small batches.
        A read of the batch appended last (a follower or consumer at the
        tail, one batch behind) needs neither the index nor the file.
        """
        last = self._last_appended
        if last is not None and last[0] <= offset <= last[1] and last[2] + last[3] <= end:
            # Every earlier batch ends before ``last[0]``: this is the first ending at
            # or after ``offset``.
            return last[2], last[3]
        self._ensure_indexes()
        _, position = self.offset_index.lookup(offset)
        fd = self._handles.get(self.log_path).fileno()
        while end - position >= HEADER_SIZE:
            chunk = disk_io.pread(fd, min(READ_WINDOW, end - position), position, self.log_path)
            available = len(chunk)
            if available < HEADER_SIZE:
                return None  # the file is shorter than we were told
            at = 0
            while available - at >= HEADER_SIZE:
                base_offset, batch_length = _BASE_AND_LENGTH.unpack_from(chunk, at)
                if batch_length < MIN_BATCH_LENGTH:
                    raise CorruptRecordError(f"impossible batch length at {position + at}")
                size = batch_length + 12
                if position + at + size > end:
                    return None  # not a whole, visible batch yet
                if base_offset + _LAST_OFFSET_DELTA.unpack_from(chunk, at + 23)[0] >= offset:
                    return position + at, size
                at += size
            position += at
        return None

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int,
        min_one_batch: bool,
        on_read_error: Callable[[OSError], None] | None = None,
    ) -> FileSlice | None:
        """A slice from the batch holding ``start_offset``; None if no batch here holds it.

        The slice is cut at ``max_bytes`` and may end inside a batch (clients
        skip a partial tail, as with Kafka); with ``min_one_batch`` it covers
        at least the whole first batch so a consumer always makes progress.
        """
        found = self._locate(start_offset, max_position)
        if found is None:
            return None
        position, batch_size = found
        limit = max(max_bytes, batch_size) if min_one_batch else max_bytes
        size = max(0, min(max_position - position, limit))
        return FileSlice(self._handles.get(self.log_path), position, size, on_read_error)

    def find_offset_for_timestamp(
        self, timestamp: int, start_offset: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after both ``timestamp`` and offset."""
        self._ensure_indexes()
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        fd = self._handles.get(self.log_path).fileno()
        for header, _ in self._scan(position, self.size, READ_WINDOW, with_bytes=False):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            for batch in decode_batches(
                disk_io.pread(fd, header.size, header.position, self.log_path)
            ):
                for record in batch.records:
                    if record.timestamp >= timestamp and record.offset >= start_offset:
                        return record.offset, record.timestamp
        return None

    # -- repair ---------------------------------------------------------------------------

    def recover(self) -> int:
        """Check every batch from the start (CRC included), cut at the first bad one.

        Returns the number of bytes truncated. Both indexes are rebuilt on the way.
        """
        file_size = os.fstat(self._handles.get(self.log_path).fileno()).st_size
        self.size = file_size
        self._last_appended = None
        truncated = self._rebuild(validate=True)
        if truncated:
            # Acknowledged bytes may be among them: an operator must be able to see it.
            log.warning(
                "recovery of %s truncated %d bytes at position %d (offset %d): %s",
                self.log_path,
                truncated,
                self.size,
                self._next_offset,
                self.recovery_reason,
            )
        return truncated

    def rebuild_indexes(self) -> int:
        """Rebuild both indexes from the batch headers; returns bytes of torn tail dropped."""
        return self._rebuild(validate=False)

    def _rebuild(self, *, validate: bool) -> int:
        self._indexes_checked = True
        self._tail_loaded = True
        self.offset_index.reset()
        self.time_index.reset()
        self._next_offset = self.base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_index_entry = 0
        self._first_timestamp = None
        end = 0
        self.recovery_reason = "an incomplete batch at the end (a torn write)"
        try:
            for header, batch in self._scan(0, self.size, SCAN_WINDOW, with_bytes=validate):
                reason = self._unsound(header, batch) if validate else None
                if reason is not None:
                    self.recovery_reason = f"batch at offset {header.base_offset} {reason}"
                    break
                self._track(header, header.position)
                self._next_offset = header.next_offset
                end = header.position + header.size
        except CorruptRecordError as exc:
            self.recovery_reason = str(exc)
        truncated = self.size - end
        if truncated:
            self._truncate_file(end)
        return truncated

    def _unsound(self, header: BatchHeader, batch: memoryview | None) -> str | None:
        """Why recovery must cut at this batch, or None when it is sound."""
        if batch is None:
            return "is incomplete"
        if header.magic != MAGIC_V2:
            return f"has magic {header.magic}"
        # A cleaned batch keeps its last offset with fewer records (none for a
        # producer's retained last batch), as Kafka's cleaner writes it.
        if header.record_count < 0 or header.last_offset_delta < header.record_count - 1:
            return (
                f"has record count {header.record_count} "
                f"and last offset delta {header.last_offset_delta}"
            )
        if header.base_offset < self._next_offset:
            return f"goes back from offset {self._next_offset}"
        if not self.can_hold_offset(header.last_offset):
            return "has offsets this segment cannot index"
        if not batch_crc_is_valid(batch, header._replace(position=0)):
            return "fails its CRC-32C check"
        return None

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding ``offset`` and everything after; returns bytes removed."""
        header = self.find_batch(offset)
        if header is None:
            return 0
        removed = self.size - header.position
        self.offset_index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self._truncate_file(header.position)
        self._tail_loaded = False
        self._first_timestamp = None
        self._max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        return removed

    def _truncate_file(self, size: int) -> None:
        os.ftruncate(self._handles.get(self.log_path).fileno(), size)
        self.size = size
        self._last_appended = None
