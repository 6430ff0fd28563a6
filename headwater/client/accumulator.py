"""The producer's per-partition batches: what to send, and when.

Sans-I/O and clock-free (callers pass ``now`` in seconds), so the
batching rules are tested without a broker:

* records of one partition collect into one batch until it would exceed
  ``batch.size`` (a record larger than that gets a batch of its own);
* a batch is ready when it is full, when ``linger.ms`` has passed since
  its first record, or when the producer flushes or closes;
* ``drain`` takes at most one batch per partition per request, oldest
  first, up to ``max.request.size``, so partitions take turns;
* a batch that failed with a retriable error goes back in front of
  younger batches of its partition, keeping the partition's order (and an
  idempotent producer's sequence numbers) intact.

Not thread-safe by itself: the blocking ``Producer`` appends from the
caller's thread and drains on its loop thread under one lock.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from headwater.client.types import Header, TopicPartition
from headwater.records.compression import Compression
from headwater.records.record import RecordBatchBuilder

RECORD_OVERHEAD: Final = 21  # upper bound of a record's varint framing without headers
HEADER_OVERHEAD: Final = 10


def estimate_record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """An upper bound of a record's encoded size, for batching decisions."""
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, header_value in headers:
        size += HEADER_OVERHEAD + len(name) * 4 + (len(header_value) if header_value else 0)
    return size


@dataclass(eq=False)
class ProducerBatch:
    """Records for one partition that travel in one RecordBatch.

    ``futures[i]`` and ``timestamps[i]`` belong to the record at offset
    delta ``i``; whoever owns the futures resolves them from the response.
    """

    tp: TopicPartition
    builder: RecordBatchBuilder
    created_at: float
    order: int
    futures: list[Any] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    base_sequence: int = -1
    attempts: int = 0
    payload: bytes | None = None  # built once, reused by retries
    full: bool = False
    reserved: int = 0  # estimated bytes of its records, for buffer.memory

    @property
    def record_count(self) -> int:
        return self.builder.record_count

    @property
    def estimated_size(self) -> int:
        return self.builder.estimated_size if self.payload is None else len(self.payload)

    def build(
        self, producer_id: int = -1, producer_epoch: int = -1, transactional: bool = False
    ) -> bytes:
        """The batch bytes; the sequence is fixed at the first build and kept for retries."""
        if self.payload is None:
            self.builder.is_transactional = transactional
            self.builder.producer_id = producer_id
            self.builder.producer_epoch = producer_epoch
            self.builder.base_sequence = self.base_sequence
            self.payload = self.builder.build()
        return self.payload


@dataclass(slots=True)
class AppendResult:
    batch: ProducerBatch | None  # None: refused because it would need a new batch
    new_batch: bool = False  # this record opened a batch (the sender must arm linger)
    batch_full: bool = False  # the batch will take no more records (send it now)


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_size: int = 16_384,
        linger_ms: float = 5,
        compression: Compression | int = Compression.NONE,
    ) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.compression = Compression(compression)
        self._batches: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self._order = itertools.count()
        self._flushing = 0
        self.closing = False

    # -- appending ---------------------------------------------------------------

    def append(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        future: Any,
        now: float,
        *,
        abort_on_new_batch: bool = False,
        size: int | None = None,
    ) -> AppendResult:
        """Add one record to ``tp``'s open batch, or open a new one.

        With ``abort_on_new_batch`` nothing is appended when the record
        would open a new batch: the sticky partitioner then moves on to
        another partition (KIP-480), so each batch goes to a fresh one.
        """
        queue = self._batches.get(tp)
        if queue is None:
            queue = self._batches[tp] = collections.deque()
        if size is None:
            size = estimate_record_size(key, value, headers)
        last = queue[-1] if queue else None
        if last is not None and not last.full and last.payload is None:
            used = last.builder.estimated_size
            if used + size <= self.batch_size:
                self._add(last, timestamp_ms, key, value, headers, future, size)
                full = last.builder.estimated_size + RECORD_OVERHEAD >= self.batch_size
                last.full = full
                return AppendResult(last, batch_full=full)
            last.full = True
        if abort_on_new_batch:
            return AppendResult(None)
        batch = ProducerBatch(tp, RecordBatchBuilder(self.compression), now, next(self._order))
        self._add(batch, timestamp_ms, key, value, headers, future, size)
        batch.full = batch.estimated_size + RECORD_OVERHEAD >= self.batch_size
        queue.append(batch)
        return AppendResult(batch, new_batch=True, batch_full=batch.full or last is not None)

    def append_built(
        self,
        tp: TopicPartition,
        builder: RecordBatchBuilder,
        timestamp_ms: int,
        future: Any,
        now: float,
        size: int,
    ) -> ProducerBatch:
        """Queue a batch whose records are already encoded (``Producer.send_arrow``).

        It travels as it is (full from the start), after whatever ``tp``
        already has queued, so the partition's order holds; ``future``
        stands for all its records and resolves with the first one's offset.
        """
        queue = self._batches.get(tp)
        if queue is None:
            queue = self._batches[tp] = collections.deque()
        if queue:
            queue[-1].full = True  # later records must follow this batch
        batch = ProducerBatch(tp, builder, now, next(self._order), full=True, reserved=size)
        batch.futures.append(future)
        batch.timestamps.append(timestamp_ms)
        queue.append(batch)
        return batch

    @staticmethod
    def _add(
        batch: ProducerBatch,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        future: Any,
        size: int,
    ) -> None:
        batch.builder.append(timestamp_ms, key, value, headers)
        batch.reserved += size
        batch.futures.append(future)
        batch.timestamps.append(timestamp_ms)

    # -- sending -----------------------------------------------------------------

    def begin_flush(self) -> None:
        """Until ``end_flush``, every batch is ready regardless of linger."""
        self._flushing += 1

    def end_flush(self) -> None:
        self._flushing = max(0, self._flushing - 1)

    def ready(self, now: float) -> tuple[list[TopicPartition], float | None]:
        """Partitions with a batch to send now, and seconds until the next one is due."""
        ready: list[TopicPartition] = []
        next_due: float | None = None
        send_all = self._flushing > 0 or self.closing
        for tp, queue in self._batches.items():
            if not queue:
                continue
            head = queue[0]
            if send_all or head.full or len(queue) > 1 or head.attempts > 0:
                ready.append(tp)
                continue
            due = head.created_at + self.linger_s
            if due <= now:
                ready.append(tp)
            elif next_due is None or due - now < next_due:
                next_due = due - now
        return ready, next_due

    def drain(
        self, partitions: Iterable[TopicPartition], max_request_size: int
    ) -> list[ProducerBatch]:
        """The oldest batch of each of ``partitions``, up to ``max_request_size`` bytes.

        The first batch always goes, however large, so that nothing is stuck.
        """
        out: list[ProducerBatch] = []
        total = 0
        for tp in partitions:
            queue = self._batches.get(tp)
            if not queue:
                continue
            batch = queue[0]
            size = batch.estimated_size
            if out and total + size > max_request_size:
                continue
            queue.popleft()
            batch.full = True
            out.append(batch)
            total += size
        return out

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a batch back for a retry, ahead of every younger batch of its partition."""
        batch.attempts += 1
        queue = self._batches.setdefault(batch.tp, collections.deque())
        queue.append(batch)
        if len(queue) > 1:
            self._batches[batch.tp] = collections.deque(sorted(queue, key=lambda b: b.order))

    def expire(self, now: float, timeout_s: float) -> list[ProducerBatch]:
        """Remove and return batches waiting longer than ``timeout_s`` (delivery.timeout.ms)."""
        expired: list[ProducerBatch] = []
        for queue in self._batches.values():
            while queue and now - queue[0].created_at >= timeout_s:
                expired.append(queue.popleft())
        return expired

    def pending_batches(self) -> int:
        return sum(len(q) for q in self._batches.values())

    def has_pending(self) -> bool:
        return any(self._batches.values())

    def abort_all(self) -> list[ProducerBatch]:
        """Remove every waiting batch (the producer fails their futures)."""
        out = [b for q in self._batches.values() for b in q]
        self._batches.clear()
        return out
