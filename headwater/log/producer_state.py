"""Producer bookkeeping: idempotent sequences and open transactions (Kafka's ProducerStateManager).

A producer with an id numbers its batches per partition. The log remembers,
per producer id, its epoch and its last five batches, which is enough to
recognise a retry of any batch still in flight (a producer has at most five
unacknowledged requests per connection) and to reject a gap.

Transactions (KIP-98): a transactional data batch (attributes bit 4) opens a
transaction for its producer at the batch's first offset, unless one is open;
a COMMIT/ABORT control batch (a marker) closes it. The oldest open
transaction's first offset bounds the *last stable offset*, which
read_committed consumers never read past. As in Kafka, a closed transaction
keeps bounding it ("unreplicated") until the high watermark passes its
marker, so that no consumer reads a decision a new leader might not have.

A follower records the leader's batches with ``update`` but never ``check``s
them (the leader already did): so when it becomes leader it already knows
every producer's last batches and open transactions, dedupes a retry of a
batch the old leader wrote, and refuses a gap.

The table is derived from batch headers plus the markers' coordinator
epochs, so it can be rebuilt from the log; ``producer_snapshot`` saves it so
that a rebuild replays only the tail.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from headwater.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from headwater.log.producer_snapshot import SnapshotEntry
from headwater.records.batch import MAX_SEQUENCE, BatchHeader
from headwater.records.control import ControlMarker

MAX_CACHED_BATCHES = 5  # max.in.flight.requests.per.connection that idempotence allows


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker just closed, as the transaction index needs it."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool
    last_stable_offset: int  # the first offset still undecided once this one is closed


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata]
    last_append_ms: int
    coordinator_epoch: int = -1  # of the last marker written for this producer
    current_txn_first_offset: int = -1  # -1: no open transaction

    @property
    def last_seq(self) -> int:
        """The last sequence written in this epoch; -1 when none (the next must be 0)."""
        return self.batches[-1].last_seq if self.batches else -1

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
    """Per producer id: epoch, last batches and open transaction; the partition's open ones."""

    __slots__ = ("_ongoing", "_producers", "_unreplicated", "changed")

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        # first offset -> producer id of each open transaction. Transactions
        # open in offset order, so insertion order is ascending: the first key
        # is the oldest (a snapshot load inserts them sorted).
        self._ongoing: dict[int, int] = {}
        # first offset -> closed transaction whose marker the HW has not passed yet
        self._unreplicated: dict[int, CompletedTxn] = {}
        self.changed = False  # since the last snapshot

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    # -- checks before an append (leaders) ---------------------------------------------------

    def check(self, batches: Sequence[BatchHeader]) -> BatchMetadata | None:
        """Validate an append's batches in order before anything is written.

        Returns the cached metadata when the append is a retry of a batch
        already in the log (the caller answers with its offsets and writes
        nothing), None when it may be appended; raises on a gap, an old epoch,
        or a non-transactional batch from a producer with an open transaction
        (INVALID_TXN_STATE, as Kafka). Batches without a producer id or
        sequence are not checked. A producer id the table does not know may
        start at any sequence: its state may have expired or been lost with
        old segments.
        """
        # producer id -> (epoch, last seq, in a transaction) so far in this append
        pending: dict[int, tuple[int, int, bool]] = {}
        for header in batches:
            if not header.has_producer_sequence:
                continue
            producer_id = header.producer_id
            if producer_id in pending:
                epoch, last_seq, in_txn = pending[producer_id]
                known = True
            else:
                entry = self._producers.get(producer_id)
                known = entry is not None and bool(entry.batches)
                if entry is None:
                    epoch, last_seq, in_txn = header.producer_epoch, -1, False
                else:
                    duplicate = entry.find_duplicate(header)
                    if duplicate is not None:
                        return duplicate
                    epoch, last_seq = entry.epoch, entry.last_seq
                    in_txn = entry.current_txn_first_offset >= 0
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
            elif known and not in_sequence(last_seq, header.base_sequence):
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} sent sequence {header.base_sequence} after {last_seq}"
                )
            if in_txn and not header.is_transactional:
                raise InvalidTxnStateError(
                    f"producer {producer_id} has an open transaction but sent a "
                    "non-transactional batch"
                )
            pending[producer_id] = (
                header.producer_epoch,
                header.last_sequence,
                in_txn or header.is_transactional,
            )
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Refuse a COMMIT/ABORT marker from a fenced producer epoch or coordinator.

        A marker for a producer the table does not know is accepted, as in
        Kafka: its state may have expired, and the marker closes nothing.
        """
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} has epoch {producer_epoch}, "
                f"older than {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} comes from coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}"
            )

    # -- recording what was written (leaders, followers, recovery) ---------------------------

    def _entry_for_epoch(self, producer_id: int, epoch: int, now_ms: int) -> ProducerEntry:
        """The producer's entry, its batches forgotten when ``epoch`` is a new one."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(epoch, deque(maxlen=MAX_CACHED_BATCHES), now_ms)
            self._producers[producer_id] = entry
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        return entry

    def update(
        self, header: BatchHeader, now_ms: int, marker: ControlMarker | None = None
    ) -> CompletedTxn | None:
        """Remember a batch as written (its header carries the assigned offsets).

        A control batch needs its ``marker`` (None for one that is no
        COMMIT/ABORT, which changes nothing). Returns the transaction a marker
        closed, or None (a marker for a producer with no open transaction
        closes nothing, as in Kafka).
        """
        if header.producer_id < 0:
            return None
        if header.is_control:
            if marker is None:
                return None
            return self._end_transaction(header, marker, now_ms)
        if header.base_sequence < 0:
            return None
        self.changed = True
        entry = self._entry_for_epoch(header.producer_id, header.producer_epoch, now_ms)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence, header.base_offset, header.last_offset
            )
        )
        entry.last_append_ms = now_ms
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = header.base_offset
            self._ongoing[header.base_offset] = header.producer_id
        return None

    def _end_transaction(
        self, header: BatchHeader, marker: ControlMarker, now_ms: int
    ) -> CompletedTxn | None:
        self.changed = True
        producer_id = header.producer_id
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._entry_for_epoch(producer_id, header.producer_epoch, now_ms)
        elif header.producer_epoch > entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_append_ms = now_ms
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        entry.current_txn_first_offset = -1
        if self._ongoing.get(first) == producer_id:
            del self._ongoing[first]
        last = header.base_offset
        lso = next(iter(self._ongoing), last + 1)
        completed = CompletedTxn(producer_id, first, last, not marker.commit, lso)
        self._unreplicated[first] = completed
        return completed

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its last data batch: what the log cleaner must keep."""
        return {
            pid: entry.batches[-1].last_offset
            for pid, entry in self._producers.items()
            if entry.batches
        }

    def on_high_watermark(self, high_watermark: int) -> None:
        """Closed transactions whose marker is below the HW stop bounding the LSO."""
        if self._unreplicated:
            done = [k for k, t in self._unreplicated.items() if t.last_offset < high_watermark]
            for first in done:
                del self._unreplicated[first]

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not yet decided-and-replicated."""
        first = next(iter(self._ongoing), None)
        if self._unreplicated:
            oldest = min(self._unreplicated)
            first = oldest if first is None else min(first, oldest)
        return first

    def ongoing_transactions(self) -> dict[int, int]:
        """Open transactions: first offset -> producer id, oldest first."""
        return dict(self._ongoing)

    def producers(self) -> dict[int, ProducerEntry]:
        """Every producer id the partition remembers (DescribeProducers); a copy."""
        return dict(self._producers)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for ``producer.id.expiration.ms``; returns how many.

        A producer with an open transaction never expires (Kafka): only its
        coordinator's marker may close the transaction.
        """
        expired = [
            pid
            for pid, entry in self._producers.items()
            if entry.current_txn_first_offset < 0 and now_ms - entry.last_append_ms >= expiration_ms
        ]
        for pid in expired:
            del self._producers[pid]
        if expired:
            self.changed = True
        return len(expired)

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self.changed = True

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot_entries(self) -> list[SnapshotEntry]:
        """The table as snapshot rows: one per cached batch, oldest first (producer_snapshot)."""
        rows: list[SnapshotEntry] = []
        for pid, entry in self._producers.items():
            common = (entry.last_append_ms, entry.coordinator_epoch, entry.current_txn_first_offset)
            if not entry.batches:
                rows.append(SnapshotEntry(pid, entry.epoch, -1, -1, 0, *common))
            for batch in entry.batches:
                delta = batch.last_offset - batch.base_offset
                rows.append(
                    SnapshotEntry(
                        pid, entry.epoch, batch.last_seq, batch.last_offset, delta, *common
                    )
                )
        return rows

    @classmethod
    def from_snapshot(cls, rows: Sequence[SnapshotEntry]) -> ProducerStateTable:
        """A table from snapshot rows.

        Expired producers are left to ``remove_expired`` (the retention timer),
        as producers replayed from the log are.
        """
        table = cls()
        ongoing: dict[int, int] = {}
        for row in rows:
            entry = table._producers.get(row.producer_id)
            if entry is None or entry.epoch != row.epoch:
                entry = ProducerEntry(row.epoch, deque(maxlen=MAX_CACHED_BATCHES), row.timestamp)
                table._producers[row.producer_id] = entry
            entry.last_append_ms = row.timestamp
            entry.coordinator_epoch = row.coordinator_epoch
            entry.current_txn_first_offset = row.current_txn_first_offset
            if row.last_offset >= 0:
                first_seq = (row.last_sequence - row.offset_delta) % (MAX_SEQUENCE + 1)
                entry.batches.append(
                    BatchMetadata(
                        first_seq,
                        row.last_sequence,
                        row.last_offset - row.offset_delta,
                        row.last_offset,
                    )
                )
        for pid, entry in table._producers.items():
            if entry.current_txn_first_offset >= 0:
                ongoing[entry.current_txn_first_offset] = pid
        table._ongoing = dict(sorted(ongoing.items()))
        return table
