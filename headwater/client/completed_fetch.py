"""One partition's records from one fetch response, decoded as the application asks.

Sans-I/O. The consumer needs only the batch *headers* to know where the
next fetch starts, so that is all the constructor reads: the next Fetch
can go on the wire before a single record is decoded. Records are decoded
batch by batch when ``take`` asks for them, which is also where the rules
of handing records out live:

* a batch may start before the fetch position (the broker serves whole
  batches): records below the position are dropped;
* control batches (transaction markers) are never handed out;
* with read_committed, batches of aborted transactions are skipped, using
  the response's aborted-transaction list as Kafka's consumer does;
* a batch cut off at the end of the response (the broker stops at
  max_bytes) is left for the next fetch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

from headwater.client.errors import KafkaError
from headwater.client.types import ConsumerRecord, TopicPartition
from headwater.fetch.types import AbortedTransaction
from headwater.records.batch import iter_batch_headers
from headwater.records.errors import CorruptRecordError
from headwater.records.record import DecodedBatch, decode_batches

CORRUPT_MESSAGE: Final = 2
READ_COMMITTED: Final = 1
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 = ABORT, 1 = COMMIT)
_ABORT_MARKER: Final = 0

# tuple.__new__ skips the NamedTuple's Python-level __new__: ~15% of the
# per-record cost on the consumer's hot path.
_new_tuple = tuple.__new__


def next_fetch_offset(records: bytes | memoryview, fetch_offset: int) -> int:
    """Where the next fetch starts: after the last complete batch, never before ``fetch_offset``."""
    last = fetch_offset
    for header in iter_batch_headers(records):
        last = header.next_offset
    return max(last, fetch_offset)


class CompletedFetch:
    """Records of ``tp`` from one response, starting at ``fetch_offset``."""

    __slots__ = (
        "_aborted",
        "_aborted_producers",
        "_batches",
        "_pending",
        "_pending_index",
        "check_crcs",
        "fetch_offset",
        "high_watermark",
        "isolation_level",
        "next_fetch_offset",
        "records",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        records: bytes,
        fetch_offset: int,
        *,
        high_watermark: int = -1,
        isolation_level: int = 0,
        aborted_transactions: list[AbortedTransaction] | None = None,
        check_crcs: bool = True,
    ) -> None:
        self.tp = tp
        self.records = records
        self.fetch_offset = fetch_offset
        self.high_watermark = high_watermark
        self.isolation_level = isolation_level
        self.check_crcs = check_crcs
        try:
            self.next_fetch_offset = next_fetch_offset(records, fetch_offset)
        except CorruptRecordError as exc:
            raise KafkaError(CORRUPT_MESSAGE, f"{tp.topic}-{tp.partition}: {exc}") from exc
        self._aborted = sorted(aborted_transactions or (), key=lambda t: t.first_offset)
        self._aborted_producers: set[int] = set()
        self._batches: Iterator[DecodedBatch] | None = None
        self._pending: list[ConsumerRecord] = []
        self._pending_index = 0

    @property
    def has_records(self) -> bool:
        """Whether the response carried at least one complete batch."""
        return self.next_fetch_offset > self.fetch_offset

    def take(self, position: int, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to ``max_records`` records at or after ``position``, in offset order.

        Fewer than ``max_records`` (or an empty list) means this fetch is used up.
        """
        out: list[ConsumerRecord] = []
        limit = max_records if max_records is not None else 1 << 62
        while len(out) < limit:
            if self._pending_index >= len(self._pending) and self._fill() == 0:
                break
            start = self._pending_index
            pending = self._pending
            if pending[start].offset < position:
                while start < len(pending) and pending[start].offset < position:
                    start += 1
                self._pending_index = start
                continue
            stop = min(len(pending), start + limit - len(out))
            out.extend(pending[start:stop])
            self._pending_index = stop
        return out

    def _fill(self) -> int:
        """Decode the next batch that has records for the application; 0 at the end."""
        if self._batches is None:
            self._batches = decode_batches(self.records, check_crc=self.check_crcs)
        topic, partition = self.tp
        while True:
            try:
                batch = next(self._batches, None)
            except CorruptRecordError as exc:
                raise KafkaError(CORRUPT_MESSAGE, f"{topic}-{partition}: {exc}") from exc
            if batch is None:
                self._pending, self._pending_index = [], 0
                return 0
            header = batch.header
            if (
                self.isolation_level == READ_COMMITTED
                and header.producer_id >= 0
                and self._skip_for_read_committed(batch)
            ):
                continue
            if header.is_control:
                continue
            ts_type = header.timestamp_type
            # Hot loop: build the tuples directly, no per-record keyword handling.
            self._pending = [
                _new_tuple(ConsumerRecord, (topic, partition, offset, ts, ts_type, key, value, hs))
                for offset, ts, key, value, hs in batch.records
            ]
            self._pending_index = 0
            if self._pending:
                return len(self._pending)

    def _skip_for_read_committed(self, batch: DecodedBatch) -> bool:
        """Kafka's read_committed filter: aborted data and control markers are dropped."""
        header = batch.header
        aborted = self._aborted
        while aborted and aborted[0].first_offset <= header.last_offset:
            self._aborted_producers.add(aborted.pop(0).producer_id)
        if header.is_control:
            for record in batch.records:
                key = record.key
                if key is not None and len(key) >= _CONTROL_KEY.size:
                    _, kind = _CONTROL_KEY.unpack_from(key)
                    if kind == _ABORT_MARKER:
                        self._aborted_producers.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborted_producers
