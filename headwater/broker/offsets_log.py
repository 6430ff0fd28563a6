"""The group coordinator's durable store: the partitions of ``__consumer_offsets``.

Committed offsets and group generations are key/value records in an
ordinary Headwater log, so they get the same CRC validation, torn-tail
recovery and ``kill -9`` guarantees as user data, and the coordinator
rebuilds the groups of a partition by replaying it when it becomes the
partition's coordinator (at start on a single broker), as Kafka does. The
replay reads to the log end, not the high watermark: a new leader's log is the
truth its followers will truncate to.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from kio.schema.errors import ErrorCode

from headwater.group.storage import AppendFailed
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.records.errors import KafkaApiError
from headwater.records.record import RecordBatchBuilder, decode_batches

OFFSETS_TOPIC = "__consumer_offsets"
_READ_CHUNK = 8 << 20


class PartitionOffsetsLog:
    """Adapts a partition ``Log`` to the coordinator's ``OffsetsLog`` protocol."""

    def __init__(self, log: Log) -> None:
        self._log = log

    def append(self, entries: Sequence[tuple[bytes, bytes | None]]) -> int:
        """One batch per call: a commit of many partitions is applied all or nothing.

        Returns the next offset after the batch, which the coordinator hands to
        ``wait_replicated`` before answering.
        """
        if not entries:
            return self._log.log_end_offset
        now_ms = int(time.time() * 1000)
        builder = RecordBatchBuilder()
        for key, value in entries:
            builder.append(now_ms, key, value)
        try:
            return self._log.append(builder.build(), now_ms).last_offset + 1
        except KafkaApiError as exc:
            raise AppendFailed(_error_code(exc.kafka_error_code), str(exc)) from exc

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        offset = self._log.log_start_offset
        end = self._log.log_end_offset
        while offset < end:
            result = self._log.read(offset, _READ_CHUNK, Isolation.LOG_END, True)
            if result.records is None:
                return
            progressed = False
            for batch in decode_batches(result.records.read()):
                if batch.header.is_control:
                    # A transaction marker (TxnOffsetCommit): no group record.
                    offset = max(offset, batch.header.next_offset)
                    progressed = True
                    continue
                for record in batch.records:
                    if record.offset < offset:
                        continue
                    if record.key is not None:
                        yield record.key, record.value
                    offset = record.offset + 1
                    progressed = True
            if not progressed:
                return


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error
