"""Idempotent-producer bookkeeping: the sequence rules Kafka applies on append.

A producer with an id numbers its batches per partition. The log remembers,
per producer id, its epoch and its last five batches, which is enough to
recognise a retry of any batch still in flight (a producer has at most five
unacknowledged requests per connection) and to reject a gap. The table is
derived from batch headers only, so it can be rebuilt from the log's tail.

A follower records the leader's batches with ``update`` but never ``check``s
them (the leader already did): so when it becomes leader it already knows
every producer's last batches, dedupes a retry of a batch the old leader
wrote, and refuses a gap, which is how idempotence survives a failover.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from headwater.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from headwater.records.batch import MAX_SEQUENCE, BatchHeader

MAX_CACHED_BATCHES = 5  # max.in.flight.requests.per.connection that idempotence allows


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata]
    last_append_ms: int

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.epoch:
            return None
        last_seq = header.last_sequence
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last_seq:
                return batch
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """True when ``next_seq`` directly follows ``last_seq`` (sequences wrap to 0)."""
    return next_seq == last_seq + 1 or (last_seq == MAX_SEQUENCE and next_seq == 0)


class ProducerStateTable:
    """Per producer id: epoch and the last batches, for duplicate and gap detection."""

    __slots__ = ("_producers",)

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def check(self, batches: Sequence[BatchHeader]) -> BatchMetadata | None:
        """Validate an append's batches in order before anything is written.

        Returns the cached metadata when the append is a retry of a batch
        already in the log (the caller answers with its offsets and writes
        nothing), None when it may be appended; raises on a gap or an old epoch.
        Batches without a producer id or sequence are not checked. A producer
        id the table does not know may start at any sequence: its state may
        have expired or been lost with old segments.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) so far
        for header in batches:
            if not header.has_producer_sequence:
                continue
            producer_id = header.producer_id
            if producer_id in pending:
                epoch, last_seq = pending[producer_id]
            else:
                entry = self._producers.get(producer_id)
                if entry is None:
                    pending[producer_id] = (header.producer_epoch, header.last_sequence)
                    continue
                duplicate = entry.find_duplicate(header)
                if duplicate is not None:
                    return duplicate
                epoch, last_seq = entry.epoch, entry.last_seq
            if header.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"producer {producer_id} epoch {header.producer_epoch} is older than {epoch}"
                )
            if header.producer_epoch > epoch:
                if header.base_sequence != 0:
                    raise OutOfOrderSequenceError(
                        f"producer {producer_id} new epoch {header.producer_epoch} starts at "
                        f"sequence {header.base_sequence}, not 0"
                    )
            elif not in_sequence(last_seq, header.base_sequence):
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} sent sequence {header.base_sequence} after {last_seq}"
                )
            pending[producer_id] = (header.producer_epoch, header.last_sequence)
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Refuse a COMMIT/ABORT marker from an epoch older than the producer's."""
        entry = self._producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} has epoch {producer_epoch}, "
                f"older than {entry.epoch}"
            )

    def update(self, header: BatchHeader, now_ms: int) -> None:
        """Remember a batch as written (its header carries the assigned offsets)."""
        if not header.has_producer_sequence:
            return
        batch = BatchMetadata(
            header.base_sequence, header.last_sequence, header.base_offset, header.last_offset
        )
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch != entry.epoch:
            self._producers[header.producer_id] = ProducerEntry(
                header.producer_epoch, deque([batch], maxlen=MAX_CACHED_BATCHES), now_ms
            )
        else:
            entry.batches.append(batch)
            entry.last_append_ms = now_ms

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for ``producer.id.expiration.ms``; returns how many."""
        expired = [
            pid
            for pid, entry in self._producers.items()
            if now_ms - entry.last_append_ms >= expiration_ms
        ]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def clear(self) -> None:
        self._producers.clear()
