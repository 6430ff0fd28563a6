"""The records of ``__transaction_state``: Kafka's TransactionLogKey and TransactionLogValue.

Byte-for-byte Kafka's schemas (transaction-coordinator/src/main/resources/
common/message/TransactionLog{Key,Value}.json), so a data directory and any
tool reading the topic agree with Kafka. kio generates only the client
protocol's messages, not these internal records, and they are a handful of
fixed fields, so this small hand-written codec is clearer than a generator:

    key   = int16 version (0), string transactional_id           (int16 length)
    value = int16 version, int64 producer_id, int16 producer_epoch,
            int32 timeout_ms, int8 status,
            v0: nullable array (int32 count) of {string topic, array of int32}
            v1: compact nullable array of {compact string, compact int32 array,
                tagged fields}  (flexible)
            int64 last_update_ms, int64 start_ms,
            v1: tagged fields: 0 PreviousProducerId int64, 1 NextProducerId
                int64, 2 ClientTransactionVersion int16

Headwater writes v1 (it carries the previous producer id that KIP-360 retries
after a producer-id rotation need) and reads both. A ``None`` value is a
tombstone: the id expired (Kafka writes no Dead status either).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from headwater.txn.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnState, TxnTransit

KEY_VERSION = 0
VALUE_VERSION = 1

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_B = struct.Struct(">b")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


class CorruptTxnRecord(ValueError):
    """A ``__transaction_state`` record that cannot be decoded: refuse to guess."""


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode("utf-8")
    return _H.pack(KEY_VERSION) + _H.pack(len(raw)) + raw


def encode_value(transit: TxnTransit, version: int = VALUE_VERSION) -> bytes | None:
    """The record of a state; None (a tombstone) for Dead."""
    if transit.state is TxnState.DEAD:
        return None
    if transit.state is TxnState.PREPARE_EPOCH_FENCE:
        raise ValueError("PrepareEpochFence is never written")
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version}")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(transit.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(
        _VALUE_HEAD.pack(
            version,
            transit.producer_id,
            transit.producer_epoch,
            transit.timeout_ms,
            int(transit.state),
        )
    )
    empty = transit.state is TxnState.EMPTY  # Kafka writes a null array for Empty
    if version == 0:
        if empty:
            out += _I.pack(-1)
        else:
            out += _I.pack(len(by_topic))
            for topic, parts in by_topic.items():
                raw = topic.encode("utf-8")
                out += _H.pack(len(raw)) + raw + _I.pack(len(parts))
                out += b"".join(_I.pack(p) for p in parts)
        out += _TIMES.pack(transit.update_ms, transit.start_ms)
        return bytes(out)
    if empty:
        out += _uvarint(0)
    else:
        out += _uvarint(len(by_topic) + 1)
        for topic, parts in by_topic.items():
            raw = topic.encode("utf-8")
            out += _uvarint(len(raw) + 1) + raw + _uvarint(len(parts) + 1)
            out += b"".join(_I.pack(p) for p in parts)
            out += _uvarint(0)  # the partition struct's tagged fields
    out += _TIMES.pack(transit.update_ms, transit.start_ms)
    tags: list[tuple[int, bytes]] = []
    if transit.previous_producer_id != NO_PRODUCER_ID:
        tags.append((_TAG_PREVIOUS_PRODUCER_ID, _Q.pack(transit.previous_producer_id)))
    out += _uvarint(len(tags))
    for tag, data in tags:
        out += _uvarint(tag) + _uvarint(len(data)) + data
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, fmt: struct.Struct) -> int:
        try:
            (value,) = fmt.unpack_from(self.data, self.pos)
        except struct.error as exc:
            raise CorruptTxnRecord(f"truncated at byte {self.pos}") from exc
        self.pos += fmt.size
        return int(value)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptTxnRecord(f"truncated field at byte {self.pos}")
        value = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise CorruptTxnRecord(f"bad varint at byte {self.pos}")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def text(self, n: int) -> str:
        try:
            return self.raw(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptTxnRecord("string is not UTF-8") from exc

    def done(self) -> None:
        if self.pos != len(self.data):
            raise CorruptTxnRecord(f"{len(self.data) - self.pos} trailing bytes")


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    version = reader.take(_H)
    if version != KEY_VERSION:
        raise CorruptTxnRecord(f"unknown TransactionLogKey version {version}")
    length = reader.take(_H)
    if length < 0:
        raise CorruptTxnRecord("null transactional id")
    transactional_id = reader.text(length)
    reader.done()
    return transactional_id


def decode_value(data: bytes) -> TxnTransit:
    reader = _Reader(data)
    version = reader.take(_H)
    if version not in (0, 1):
        raise CorruptTxnRecord(f"unknown TransactionLogValue version {version}")
    producer_id = reader.take(_Q)
    epoch = reader.take(_H)
    timeout_ms = reader.take(_I)
    status = reader.take(_B)
    try:
        state = TxnState(status)
    except ValueError as exc:
        raise CorruptTxnRecord(f"unknown transaction status {status}") from exc
    partitions: list[tuple[str, int]] = []
    if version == 0:
        count = reader.take(_I)
        for _ in range(max(count, 0)):
            topic = reader.text(reader.take(_H))
            n = reader.take(_I)
            partitions.extend((topic, reader.take(_I)) for _ in range(max(n, 0)))
    else:
        count = reader.uvarint() - 1
        for _ in range(max(count, 0)):
            topic = reader.text(reader.uvarint() - 1)
            n = reader.uvarint() - 1
            partitions.extend((topic, reader.take(_I)) for _ in range(max(n, 0)))
            _skip_tags(reader)
    update_ms = reader.take(_Q)
    start_ms = reader.take(_Q)
    previous = NO_PRODUCER_ID
    if version >= 1:
        for tag, payload in _read_tags(reader):
            if tag == _TAG_PREVIOUS_PRODUCER_ID and len(payload) == 8:
                previous = _Q.unpack(payload)[0]
    reader.done()
    return TxnTransit(
        producer_id=producer_id,
        previous_producer_id=previous,
        producer_epoch=epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        timeout_ms=timeout_ms,
        state=state,
        partitions=frozenset(partitions) if state is not TxnState.EMPTY else frozenset(),
        start_ms=start_ms,
        update_ms=update_ms,
    )


def _read_tags(reader: _Reader) -> Iterable[tuple[int, bytes]]:
    tags = []
    for _ in range(reader.uvarint()):
        tag = reader.uvarint()
        tags.append((tag, reader.raw(reader.uvarint())))
    return tags


def _skip_tags(reader: _Reader) -> None:
    _read_tags(reader)
