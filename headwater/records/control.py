"""Control batches: the COMMIT/ABORT markers that end a transaction in a partition.

A control batch (attributes bit 5, always transactional too) holds one
record whose key is ``version int16, type int16`` (type 0 ABORT, 1 COMMIT)
and whose value is Kafka's EndTransactionMarker ``version int16,
coordinator_epoch int32``. Only brokers write them (WriteTxnMarkers);
consumers never see them as records, and the log reads them to close a
producer's open transaction.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from headwater.records.batch import HEADER_SIZE, BatchHeader, Buffer
from headwater.records.compression import decompress
from headwater.records.errors import CorruptRecordError
from headwater.records.record import RecordBatchBuilder, decode_records

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlMarker(NamedTuple):
    """What a COMMIT/ABORT control record says."""

    commit: bool
    coordinator_epoch: int


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch holding one COMMIT or ABORT marker for ``producer_id``."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        partition_leader_epoch=partition_leader_epoch,
        is_control=True,
    )
    builder.append(
        timestamp_ms,
        _KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT),
        _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch),
    )
    return builder.build()


def parse_control_batch(buf: Buffer, header: BatchHeader) -> ControlMarker | None:
    """The marker of the control batch ``header`` (in ``buf``); None when it is no marker.

    Kafka has other control types (e.g. KRaft's); only ABORT and COMMIT end a
    transaction, anything else is left alone as Kafka's log does.
    """
    if not header.is_control:
        raise ValueError("not a control batch")
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    body = view[header.position + HEADER_SIZE : header.position + header.size]
    data = decompress(header.compression, body) if header.compression else body.tobytes()
    records = decode_records(data, header)
    if not records:
        raise CorruptRecordError(f"control batch at offset {header.base_offset} has no record")
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control record at offset {header.base_offset} has no type")
    _version, kind = _KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(
            f"transaction marker at offset {header.base_offset} has no coordinator epoch"
        )
    _value_version, coordinator_epoch = _VALUE.unpack_from(value)
    return ControlMarker(kind == COMMIT, coordinator_epoch)
