"""One partition's log: an ordered run of segments (Kafka's UnifiedLog, single replica).

A broker may host 100,000 partitions of which few are busy, so a ``Log`` is
lazy: constructing one touches nothing on disk, the first use lists the
directory and stats the segment files, and files are opened through the
shared handle cache only when read or written. A log whose directory does
not exist is simply empty at offset 0 until its first append creates it.

Offsets: ``log_start_offset`` (first readable), ``log_end_offset`` (next to
be assigned). With one replica and no transactions the high watermark and
the last stable offset equal the log end offset.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from headwater.fetch.types import Isolation
from headwater.log.config import LogConfig
from headwater.log.errors import OffsetOutOfRangeError, RecordBatchTooLargeError
from headwater.log.handles import FileHandleCache
from headwater.log.producer_state import ProducerStateTable
from headwater.log.segment import LOG_SUFFIX, Segment
from headwater.log.slice import FileSlice
from headwater.records.batch import patch_base_offset, patch_partition_leader_epoch
from headwater.records.validation import TimestampPolicy, validate_append

LOG_START_OFFSET_FILE = "log-start-offset"
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


LogListener = Callable[["Log"], None]


class Log:
    """The segments of one partition, with append, read, retention and recovery."""

    __slots__ = (
        "_bases",
        "_listeners",
        "_loaded",
        "_log_end_offset",
        "_log_start_offset",
        "_path",
        "_producers",
        "_recover",
        "_segments",
        "_unflushed_messages",
        "_unflushed_since_ms",
        "config",
        "directory",
        "handles",
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
        self.directory = directory
        self.config = config
        self.handles = handles
        self.topic_id = topic_id
        self.partition_leader_epoch = 0  # stamped on appended batches
        self.recovered_bytes = 0  # torn tail removed by recovery, for logging
        self._path = os.fspath(directory)
        self._recover = recover
        self._loaded = False
        self._segments: list[Segment] = []
        self._bases: list[int] = []  # base offsets of _segments, for bisect
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._producers: ProducerStateTable | None = None
        self._listeners: list[LogListener] | None = None
        self._unflushed_messages = 0
        self._unflushed_since_ms: int | None = None

    def __repr__(self) -> str:
        return f"Log({self._path!r})"

    # -- loading --------------------------------------------------------------------------

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        try:
            names = os.listdir(self._path)
        except FileNotFoundError:
            names = []
        bases = sorted(
            int(name[:-4])
            for name in names
            if name.endswith(LOG_SUFFIX) and len(name) == 24 and name[:20].isdigit()
        )
        interval = self.config.index_interval_bytes
        self._segments = [Segment.open(self._path, base, self.handles, interval) for base in bases]
        self._bases = bases
        if not self._segments:
            self._log_start_offset = self._log_end_offset = 0
            return
        active = self._segments[-1]
        if self._recover:
            self.recovered_bytes = active.recover()
        self._log_end_offset = active.next_offset
        self._log_start_offset = min(
            max(self._segments[0].base_offset, self._read_log_start_checkpoint()),
            self._log_end_offset,
        )

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
        """The producer table, rebuilt on first need from the last batches' headers."""
        if self._producers is None:
            table = ProducerStateTable()
            budget = PRODUCER_STATE_SCAN_BYTES
            first = len(self._segments)
            while first > 0 and budget > 0:
                first -= 1
                budget -= self._segments[first].size
            for i, segment in enumerate(self._segments[first:]):
                start = segment.batch_position_at_or_after(-budget) if i == 0 and budget < 0 else 0
                for header in segment.iter_headers(start):
                    table.update(header, header.max_timestamp)
            self._producers = table
        return self._producers

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
        """Single replica: everything appended is committed."""
        self._load()
        return self._log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """No transactions yet: nothing is pending, so it is the high watermark."""
        self._load()
        return self._log_end_offset

    @property
    def size_bytes(self) -> int:
        self._load()
        return sum(segment.size for segment in self._segments)

    @property
    def segments(self) -> tuple[Segment, ...]:
        self._load()
        return tuple(self._segments)

    def _isolation_end(self, isolation: Isolation) -> int:
        if isolation is Isolation.LOG_END:
            return self._log_end_offset
        if isolation is Isolation.TXN_COMMITTED:
            return self.last_stable_offset
        return self.high_watermark

    # -- listeners ------------------------------------------------------------------------

    def add_listener(self, listener: LogListener) -> None:
        """Call ``listener(log)`` after every append, log-start change or truncation."""
        if self._listeners is None:
            self._listeners = []
        self._listeners.append(listener)

    def remove_listener(self, listener: LogListener) -> None:
        if self._listeners is not None:
            self._listeners.remove(listener)
            if not self._listeners:
                self._listeners = None

    def _notify(self) -> None:
        if self._listeners is not None:
            for listener in tuple(self._listeners):
                listener(self)

    # -- append ---------------------------------------------------------------------------

    def append(self, payload: bytes | bytearray | memoryview, now_ms: int) -> AppendResult:
        """Validate, assign offsets and write a producer's batches; all or nothing."""
        checked = validate_append(payload, self.config.max_message_bytes, self._policy(), now_ms)
        headers, payload = checked.headers, checked.payload
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
        newest = max(header.max_timestamp for header in assigned)
        segment = self._segment_for_append(len(buf), offset - 1, newest, now_ms)
        segment.append(buf, assigned)
        self._log_end_offset = offset
        messages = 0
        for header in assigned:
            producers.update(header, now_ms)
            messages += header.record_count
        self._unflushed_messages += messages
        if self._unflushed_since_ms is None:
            self._unflushed_since_ms = now_ms
        if self._unflushed_messages >= self.config.flush_interval_messages:
            self.flush()
        self._notify()
        return AppendResult(
            assigned[0].base_offset, offset - 1, checked.log_append_time_ms, self._log_start_offset
        )

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
            or active.time_waited_for_roll(now_ms, max_timestamp) > self.config.segment_ms
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
        segment = Segment.create(
            self._path, self._log_end_offset, self.handles, self.config.index_interval_bytes, now_ms
        )
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    def maybe_roll(self, now_ms: int) -> bool:
        """Roll an idle non-empty active segment older than ``segment.ms`` (lets retention act)."""
        self._load()
        if not self._segments:
            return False
        active = self._segments[-1]
        if active.size > 0 and active.time_waited_for_roll(now_ms, now_ms) > self.config.segment_ms:
            self._roll(now_ms)
            return True
        return False

    # -- read -----------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, isolation: Isolation, min_one_batch: bool
    ) -> ReadResult:
        """A file slice starting at the batch that holds ``offset``.

        ``offset`` equal to the readable end is legal and reads nothing (a
        consumer that is caught up); outside [log start, end] raises.
        """
        self._load()
        end = self._isolation_end(isolation)
        if offset < self._log_start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._log_start_offset}, {end}] of {self._path}"
            )
        records = None
        if offset < end:
            first = max(bisect_right(self._bases, offset) - 1, 0)
            for segment in self._segments[first:]:
                # Every isolation ends at the log end for now, so each segment can be
                # read to its committed size; a lower high watermark would cap it here.
                found = segment.read(offset, max_bytes, segment.size, min_one_batch)
                if found is not None:
                    records = found if found.size > 0 else None
                    break
        hw = self._log_end_offset
        return ReadResult(records, hw, hw, self._log_start_offset, self._log_end_offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record stamped at or after ``timestamp``."""
        self._load()
        for segment in self._segments:
            if segment.max_timestamp >= timestamp:
                found = segment.find_offset_for_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found
        return None

    # -- retention and truncation ---------------------------------------------------------

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
        count = 0
        while count < len(candidates) and self._bases[count + 1] <= self._log_start_offset:
            count += 1
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
            self._delete_oldest(count)
            self._notify()
        return count

    def _delete_oldest(self, count: int) -> None:
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        for segment in doomed:
            segment.delete()

    def delete_records(self, offset: int) -> int:
        """Advance the log start to ``offset`` (Kafka's DeleteRecords); returns the new start."""
        self._load()
        if offset > self._log_end_offset or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: log end is {self._log_end_offset}"
            )
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        self._write_log_start_checkpoint()
        count = 0
        while count < len(self._segments) - 1 and self._bases[count + 1] <= offset:
            count += 1
        if count:
            self._delete_oldest(count)
        self._notify()
        return self._log_start_offset

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (the whole batch holding it)."""
        self._load()
        if offset >= self._log_end_offset:
            return
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset <= self._log_start_offset or offset <= self._bases[0]:
            for segment in self._segments:
                segment.delete()
            self._segments.clear()
            self._bases.clear()
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
            if os.path.exists(os.path.join(self._path, LOG_START_OFFSET_FILE)):
                self._write_log_start_checkpoint()
        else:
            while self._bases[-1] >= offset:
                self._segments.pop().delete()
                self._bases.pop()
            active = self._segments[-1]
            active.truncate_to(offset)
            self._log_end_offset = active.next_offset
        self._producers = None  # rebuilt from what is left, on next append
        self._notify()

    # -- durability and lifecycle ---------------------------------------------------------

    def flush(self) -> None:
        """fsync the active segment (rolled segments were flushed when they rolled)."""
        if self._loaded and self._segments:
            self._segments[-1].flush()
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
        self.flush()
        return True

    def close(self) -> None:
        """Finish the active segment, flush, and let go of every file and cached state.

        The object stays usable: the next call loads the log again.
        """
        if self._loaded and self._segments:
            self._segments[-1].on_become_inactive()
            if self._unflushed_since_ms is not None:
                # Only logs written since their last fsync pay for one: a clean
                # stop of a broker with thousands of quiet partitions stays quick.
                self.flush()
        self.handles.forget_under(self._path)
        self._loaded = False
        self._recover = False
        self._segments = []
        self._bases = []
        self._producers = None

    def delete(self) -> None:
        """Remove the partition directory and everything in it."""
        self.handles.forget_under(self._path)
        shutil.rmtree(self._path, ignore_errors=True)
        self._loaded = False
        self._recover = False
        self._segments = []
        self._bases = []
        self._producers = None
        self._unflushed_messages = 0
        self._unflushed_since_ms = None
        self._notify()
