"""One partition's records from one fetch response, decoded as the application asks.

Sans-I/O. The consumer needs only the batch *headers* to know where the
next fetch starts, so that is all the constructor reads: the next Fetch
can go on the wire before a single record is decoded. Records are decoded
when ``take`` / ``take_columns`` first asks for them, all batches at once
into Arrow columns (``headwater.records.columnar``), which is also where
the rules of handing records out live:

* a batch may start before the fetch position (the broker serves whole
  batches): records below the position are dropped;
* control batches (transaction markers) are never handed out;
* with read_committed, batches of aborted transactions are skipped, using
  the response's aborted-transaction list as Kafka's consumer does;
* a batch cut off at the end of the response (the broker stops at
  max_bytes) is left for the next fetch.
"""

from __future__ import annotations

import contextlib
import gc
import struct
from collections.abc import Iterator
from typing import Final

import numpy as np
import pyarrow as pa

from headwater.client.errors import KafkaError
from headwater.client.types import ConsumerRecord, TopicPartition
from headwater.protocol.fetch_types import AbortedTransaction
from headwater.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    batch_crc_is_valid,
    iter_batch_headers,
)
from headwater.records.columnar import decode_columns
from headwater.records.control import ABORT, parse_control_batch
from headwater.records.errors import CorruptRecordError
from headwater.records.record import decode_varint

CORRUPT_MESSAGE: Final = 2
READ_COMMITTED: Final = 1
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 = ABORT, 1 = COMMIT)

# tuple.__new__ skips the NamedTuple's Python-level __new__: ~15% of the
# per-record cost on the consumer's hot path.
_new_tuple = tuple.__new__


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic GC while a fetch's records are built.

    Each record is a tracked tuple holding a tracked list, so building tens
    of thousands of them sets off generation-2 collections that walk every
    live object of the application: measured 5-6x the cost of building the
    records themselves in a process with ~300k live objects. None of these
    objects can form a cycle, so there is nothing for the collector to find.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def control_is_abort(records: bytes, header: BatchHeader, check_crc: bool = True) -> bool:
    """Whether the control batch ``header`` is an ABORT marker.

    Read straight from the batch's one record (length, attributes, timestamp
    and offset deltas, key length, then the key's version and type): a
    read_committed consumer meets one marker per transaction and partition,
    and a full record decode per marker showed in its profile. Compressed
    control batches (Kafka never writes them) take the general decoder.
    """
    if check_crc and not batch_crc_is_valid(records, header):
        raise CorruptRecordError(f"batch at offset {header.base_offset} fails its CRC-32C check")
    if header.compression:
        marker = parse_control_batch(records, header)
        return marker is not None and not marker.commit
    end = header.position + header.size
    pos = header.position + HEADER_SIZE
    try:
        _, pos = decode_varint(records, pos)  # record length
        pos += 1  # attributes (int8, unused in v2)
        _, pos = decode_varint(records, pos)  # timestamp delta
        _, pos = decode_varint(records, pos)  # offset delta
        key_length, pos = decode_varint(records, pos)
    except (IndexError, ValueError) as exc:
        raise CorruptRecordError(f"control batch at offset {header.base_offset}: {exc}") from exc
    if key_length < _CONTROL_KEY.size or pos + _CONTROL_KEY.size > end:
        raise CorruptRecordError(f"control record at offset {header.base_offset} has no type")
    _version, kind = _CONTROL_KEY.unpack_from(records, pos)
    return bool(kind == ABORT)


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
        "_columns",
        "_columns_have_headers",
        "_deliverable",
        "_offsets",
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
        self._columns: pa.RecordBatch | None = None
        self._columns_have_headers = False
        self._deliverable: list[BatchHeader] | None = None
        self._offsets: np.ndarray | None = None

    @property
    def has_records(self) -> bool:
        """Whether the response carried at least one complete batch."""
        return self.next_fetch_offset > self.fetch_offset

    def take(self, position: int, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to ``max_records`` records at or after ``position``, in offset order.

        Fewer than ``max_records`` (or an empty list) means this fetch is used up.
        Built from the columnar decode: columns to Python lists is a handful of
        C loops, which beats decoding record by record in Python 2-6x
        (docs/benchmarks.md, "Columnar fast path").
        """
        columns = self.take_columns(position, max_records, include_headers=True)
        n = columns.num_rows
        if n == 0:
            return []
        topic, partition = self.tp
        offsets = columns.column("offset").to_numpy().tolist()
        timestamps = columns.column("timestamp").to_numpy().tolist()
        ts_types = columns.column("timestampType").to_numpy().tolist()
        keys = columns.column("key").to_pylist()
        values = columns.column("value").to_pylist()
        headers = columns.column("headers")
        new = _new_tuple
        cls = ConsumerRecord
        with _collector_paused():
            if len(headers.flatten()) == 0:
                return [
                    new(cls, (topic, partition, o, t, y, k, v, []))
                    for o, t, y, k, v in zip(
                        offsets, timestamps, ts_types, keys, values, strict=True
                    )
                ]
            return [
                new(cls, (topic, partition, o, t, y, k, v, [(h["key"], h["value"]) for h in hs]))
                for o, t, y, k, v, hs in zip(
                    offsets, timestamps, ts_types, keys, values, headers.to_pylist(), strict=True
                )
            ]

    def take_columns(
        self, position: int, max_records: int | None = None, include_headers: bool = False
    ) -> pa.RecordBatch:
        """Up to ``max_records`` rows at or after ``position`` as decoder columns.

        The whole response is decoded by one call of the columnar decoder
        the first time (only the batches the application may see: no control
        batches, no aborted transactions); later calls slice it without a
        copy. Fewer rows than ``max_records`` means this fetch is used up.
        """
        if self._columns is None or (include_headers and not self._columns_have_headers):
            try:
                self._columns = decode_columns(
                    self.records,
                    check_crcs=self.check_crcs,
                    include_headers=include_headers,
                    batches=self.deliverable_batches(),
                )
            except CorruptRecordError as exc:
                topic, partition = self.tp
                raise KafkaError(CORRUPT_MESSAGE, f"{topic}-{partition}: {exc}") from exc
            self._columns_have_headers = include_headers
            self._offsets = self._columns.column("offset").to_numpy()
        columns = self._columns
        assert self._offsets is not None
        # Offsets rise through a partition's batches: the position is a binary search away.
        start = int(np.searchsorted(self._offsets, position))
        stop = (
            columns.num_rows if max_records is None else min(columns.num_rows, start + max_records)
        )
        out = columns.slice(start, max(0, stop - start))
        if self._columns_have_headers and not include_headers:
            out = out.drop_columns(["headers"])
        return out

    def deliverable_batches(self) -> list[BatchHeader]:
        """Headers of the batches whose records the application sees.

        Decided once per fetch: the read_committed filter walks the aborted
        list as it goes, so a second walk (a re-decode with headers) must not
        run it again. Whole batches are skipped from their headers; only a
        control batch's one tiny record is read, for its ABORT/COMMIT type.
        """
        if self._deliverable is None:
            self._deliverable = self._filter_batches()
        return self._deliverable

    def _filter_batches(self) -> list[BatchHeader]:
        out = []
        read_committed = self.isolation_level == READ_COMMITTED
        for header in iter_batch_headers(self.records):
            if read_committed and header.producer_id >= 0:
                try:
                    aborts = header.is_control and control_is_abort(
                        self.records, header, self.check_crcs
                    )
                except CorruptRecordError as exc:
                    topic, partition = self.tp
                    raise KafkaError(CORRUPT_MESSAGE, f"{topic}-{partition}: {exc}") from exc
                if self._skip_for_read_committed(header, aborts):
                    continue
            if not header.is_control:
                out.append(header)
        return out

    def _skip_for_read_committed(self, header: BatchHeader, aborts: bool) -> bool:
        """Kafka's read_committed filter (Java's CompletedFetch): a producer enters the
        aborted set when its aborted transaction's first offset is reached and leaves
        it at its ABORT marker; its transactional batches in between are dropped."""
        aborted = self._aborted
        while aborted and aborted[0].first_offset <= header.last_offset:
            self._aborted_producers.add(aborted.pop(0).producer_id)
        if header.is_control:
            if aborts:
                self._aborted_producers.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborted_producers
