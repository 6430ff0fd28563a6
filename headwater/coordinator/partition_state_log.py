"""Coordinator state: a partition of ``__consumer_offsets`` or ``__transaction_state``.

Committed offsets and group generations are key/value records in an
ordinary Headwater log, so they get the same CRC validation, torn-tail
recovery and ``kill -9`` guarantees as user data, and the coordinator
rebuilds the groups of a partition by replaying it when it becomes the
partition's coordinator (at start on a single broker), as Kafka does. The
replay reads to the log end, not the high watermark: a new leader's log is the
truth its followers will truncate to.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence

from kio.schema.errors import ErrorCode

from headwater.coordinator.state_log import AppendFailed, ReplayItem, TxnEnd, TxnLogEntry
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.records.errors import KafkaApiError
from headwater.records.record import RecordBatchBuilder, decode_batches

OFFSETS_TOPIC = "__consumer_offsets"
_READ_CHUNK = 8 << 20


class PartitionStateLog:
    """Adapts a partition ``Log`` to a coordinator's state-log protocol.

    The group coordinator keeps its offsets and generations in
    ``__consumer_offsets``, the transaction coordinator its transactional ids
    in ``__transaction_state``; both write key/value records through this one
    adapter and replay them on becoming coordinator.
    """

    def __init__(self, log: Log) -> None:
        self._log = log

    @property
    def log_end_offset(self) -> int:
        """The offset after the last record (what a load replays up to, at first)."""
        return self._log.log_end_offset

    def append(self, entries: Sequence[tuple[bytes, bytes | None]]) -> int:
        """One batch per call: a commit of many partitions is applied all or nothing.

        Returns the next offset after the batch, which the coordinator hands to
        ``wait_replicated`` before answering.
        """
        return self._append(entries, RecordBatchBuilder())

    def append_transactional(
        self, entries: Sequence[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int
    ) -> int:
        """A TxnOffsetCommit: a transactional batch of the producer, as Kafka writes
        it (no sequence: the coordinator, not the producer, appends it), so the
        log counts it as part of the producer's open transaction until its marker."""
        builder = RecordBatchBuilder(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=self._next_sequence(producer_id, producer_epoch),
            is_transactional=True,
        )
        return self._append(entries, builder)

    def _next_sequence(self, producer_id: int, producer_epoch: int) -> int:
        """The sequence that continues the producer's batches in this partition.

        Kafka appends TxnOffsetCommit records with the coordinator as origin,
        which skips sequence checks; Headwater's ``Log.append`` checks every
        producer batch, so the coordinator continues the producer's sequence
        here instead (0 for a new producer or epoch), read from the log's own
        producer state, which a restart rebuilds from the log.
        """
        entry = self._log._producer_state().get(producer_id)
        if entry is None or entry.epoch != producer_epoch or not entry.batches:
            return 0
        return (entry.last_seq + 1) % (2**31)

    def _append(
        self, entries: Sequence[tuple[bytes, bytes | None]], builder: RecordBatchBuilder
    ) -> int:
        if not entries:
            return self._log.log_end_offset
        now_ms = int(time.time() * 1000)
        for key, value in entries:
            builder.append(now_ms, key, value)
        try:
            return self._log.append(builder.build(), now_ms).last_offset + 1
        except KafkaApiError as exc:
            raise AppendFailed(_error_code(exc.kafka_error_code), str(exc)) from exc

    def replay(self) -> Iterator[ReplayItem]:
        """To the log end as it moves: while a partition loads (in steps), the
        only writes to it are transaction markers, and a marker appended during
        the load must still settle the TxnOffsetCommits it ends. A compacted log
        has gaps: reads step from batch to batch."""
        offset = self._log.log_start_offset
        while offset < self._log.log_end_offset:
            result = self._log.read(offset, _READ_CHUNK, Isolation.LOG_END, True)
            if result.records is None:
                return
            progressed = False
            for batch in decode_batches(result.records.read()):
                header = batch.header
                for record in batch.records:
                    if record.offset < offset:
                        continue
                    offset = record.offset + 1
                    progressed = True
                    if record.key is None:
                        continue
                    if header.is_control:
                        committed = _control_type(record.key)
                        if committed is not None:
                            yield TxnEnd(header.producer_id, committed)
                    elif header.is_transactional:
                        yield TxnLogEntry(header.producer_id, record.key, record.value)
                    else:
                        yield record.key, record.value
                # A compacted batch may end past its last record (or hold none):
                # the next read starts after the batch, not after its last record.
                if header.last_offset >= offset:
                    offset = header.last_offset + 1
                    progressed = True
            if not progressed:
                return


_CONTROL_KEY = struct.Struct(">hh")


def _control_type(key: bytes) -> bool | None:
    """A control record's key (version, type): True COMMIT (1), False ABORT (0)."""
    if len(key) < _CONTROL_KEY.size:
        return None
    _version, kind = _CONTROL_KEY.unpack_from(key)
    return {0: False, 1: True}.get(kind)


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error
