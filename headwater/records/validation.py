"""Validate a producer's batches record by record before they reach the log (Kafka's LogValidator).

The batch header and its CRC only prove that the bytes arrived as the
producer sent them, not that they make sense: a producer bug (or a hostile
client) can send a correct CRC over a gzip stream that does not inflate,
or a record count of 1 over three records. Stored as is, such a batch
poisons the partition for every consumer (librdkafka stops at it for good,
kafka-python raises ``CorruptRecordError``). So every batch is decompressed
and every record walked once: lengths, varints, offset deltas, header
counts and timestamps. Nothing is appended unless every batch passes.

Errors follow Kafka: a payload that does not decompress is CORRUPT_MESSAGE
(2); a record whose structure is wrong is INVALID_RECORD (87); a timestamp
out of the allowed window is INVALID_TIMESTAMP (32). The last two carry
per-record errors (Produce v8+ ``record_errors``, indexed by the record's
position in its batch, as Kafka does).

The record walk is hand-written (no library validates v2 records without
building objects for them). :func:`walk_records` is the reference, in pure
Python; the broker runs the same walk compiled with numba
(:mod:`headwater.records.compiled_walk`) when it is installed, and falls
back to the pure one to name the record that failed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from headwater.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Buffer,
    compute_batch_crc,
    validate_batches,
)
from headwater.records.compiled_walk import compiled_walk, load_in_background
from headwater.records.compression import decompress_bounded
from headwater.records.errors import CorruptRecordError, KafkaApiError

CREATE_TIME = 0
LOG_APPEND_TIME = 1
LONG_MAX = 2**63 - 1
#: Default most bytes one compressed batch may inflate to
#: (``headwater.log.message.max.decompressed.bytes``). Decompression stops as soon
#: as the output passes it, so a bomb costs at most this much memory.
MAX_DECOMPRESSED_BYTES = 64 << 20

_MAX_TIMESTAMP_OFFSET = 35  # position of maxTimestamp in the batch header
_INT64 = struct.Struct(">q")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")


class RecordError(NamedTuple):
    """One rejected record: its index inside its batch and why."""

    batch_index: int
    message: str


class RecordValidationError(KafkaApiError):
    """A batch failed record validation; ``record_errors`` say which records and why."""

    def __init__(self, message: str, record_errors: list[RecordError] | None = None) -> None:
        super().__init__(message)
        self.record_errors: list[RecordError] = record_errors or []


class InvalidRecordError(RecordValidationError):
    """A record's structure is wrong (INVALID_RECORD)."""

    kafka_error_code: ClassVar[int] = 87


class InvalidTimestampError(RecordValidationError):
    """A CreateTime timestamp outside the allowed window (INVALID_TIMESTAMP)."""

    kafka_error_code: ClassVar[int] = 32


@dataclass(frozen=True, slots=True)
class TimestampPolicy:
    """``message.timestamp.type`` and the KIP-937 window around the broker's clock."""

    timestamp_type: int = CREATE_TIME
    before_max_ms: int = LONG_MAX  # message.timestamp.before.max.ms
    after_max_ms: int = LONG_MAX  # message.timestamp.after.max.ms


class ValidatedAppend(NamedTuple):
    """What the log appends: the checked headers, the (maybe restamped) payload."""

    headers: list[BatchHeader]
    payload: Buffer
    log_append_time_ms: int  # -1 unless the topic stamps LogAppendTime


class RecordWalk(NamedTuple):
    """What one pass over a batch's records learned."""

    min_timestamp_delta: int
    max_timestamp_delta: int


RecordWalker = Callable[[Buffer, int], RecordWalk]


def walk_records(data: Buffer, count: int) -> RecordWalk:
    """Check ``count`` records fill ``data`` exactly; return their timestamp-delta range.

    Raises :class:`InvalidRecordError` naming the first bad record.
    """
    end_of_data = len(data)
    pos = 0
    i = 0
    lo = LONG_MAX
    hi = -LONG_MAX - 1
    try:
        while i < count:
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = _varint(data, pos)
            end = pos + length
            if length < 6 or end > end_of_data:
                raise InvalidRecordError(
                    f"record {i} declares length {length} with {end_of_data - pos} bytes left",
                    [RecordError(i, f"invalid record length {length}")],
                )
            pos += 1  # attributes: unused in v2
            b = data[pos]
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                delta, pos = _varint(data, pos)
            if delta < lo:
                lo = delta
            if delta > hi:
                hi = delta
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = _varint(data, pos)
            if offset_delta != i:
                raise InvalidRecordError(
                    f"record {i} has offset delta {offset_delta}",
                    [RecordError(i, f"offset delta {offset_delta}, expected {i}")],
                )
            b = data[pos]
            if b < 0x80:
                key_length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                key_length, pos = _varint(data, pos)
            if key_length > 0:
                pos += key_length
            elif key_length < -1:
                raise InvalidRecordError(
                    f"record {i} has key length {key_length}",
                    [RecordError(i, f"invalid key length {key_length}")],
                )
            b = data[pos]
            if b < 0x80:
                value_length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                value_length, pos = _varint(data, pos)
            if value_length > 0:
                pos += value_length
            elif value_length < -1:
                raise InvalidRecordError(
                    f"record {i} has value length {value_length}",
                    [RecordError(i, f"invalid value length {value_length}")],
                )
            b = data[pos]
            if b == 0:
                pos += 1
            else:
                pos = _skip_headers(data, pos, i)
            if pos != end:
                raise InvalidRecordError(
                    f"record {i} declares {length} bytes but its fields span {length + pos - end}",
                    [RecordError(i, "record length does not match its fields")],
                )
            i += 1
    except IndexError:
        raise InvalidRecordError(
            f"batch ends inside record {i} of the {count} it declares",
            [RecordError(i, "premature end of batch")],
        ) from None
    if pos != end_of_data:
        raise InvalidRecordError(
            f"{end_of_data - pos} bytes follow the {count} records the batch declares",
            [RecordError(count, "bytes after the declared records")],
        )
    return RecordWalk(lo, hi)


def _varint(data: Buffer, pos: int) -> tuple[int, int]:
    """A multi-byte zig-zag varint (at most 10 bytes); IndexError at the end of data."""
    z = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidRecordError(f"varint longer than 10 bytes at position {pos}")


def _skip_headers(data: Buffer, pos: int, index: int) -> int:
    count, pos = _varint(data, pos)
    if count < 0:
        raise InvalidRecordError(
            f"record {index} has header count {count}",
            [RecordError(index, f"invalid header count {count}")],
        )
    for _ in range(count):
        key_length, pos = _varint(data, pos)
        if key_length < 0:
            raise InvalidRecordError(
                f"record {index} has a header key of length {key_length}",
                [RecordError(index, f"invalid header key length {key_length}")],
            )
        try:
            bytes(data[pos : pos + key_length]).decode()
        except UnicodeDecodeError:
            # Header keys are strings: consumers decode them and would fail.
            raise InvalidRecordError(
                f"record {index} has a header key that is not UTF-8",
                [RecordError(index, "header key is not UTF-8")],
            ) from None
        pos += key_length
        value_length, pos = _varint(data, pos)
        if value_length < -1:
            raise InvalidRecordError(
                f"record {index} has a header value of length {value_length}",
                [RecordError(index, f"invalid header value length {value_length}")],
            )
        if value_length > 0:
            pos += value_length
    return pos


def _records_of(view: memoryview, header: BatchHeader, limit: int) -> Buffer:
    body = view[header.position + HEADER_SIZE : header.position + header.size]
    if not header.compression:
        return body
    try:
        return decompress_bounded(header.compression, body, limit)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"batch at offset {header.base_offset}: {exc}") from exc


def _check_batch_fields(header: BatchHeader) -> None:
    """Header rules LogValidator applies to client batches beyond the CRC checks."""
    if header.is_control:
        raise InvalidRecordError("clients may not write control batches")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"producer id {header.producer_id} with invalid base sequence {header.base_sequence}"
        )
    if header.is_transactional and header.producer_id < 0:
        raise InvalidRecordError("a transactional batch without a producer id")


def _check_timestamps(
    header: BatchHeader, walk: RecordWalk, data: Buffer, policy: TimestampPolicy, now_ms: int
) -> None:
    earliest = header.base_timestamp + walk.min_timestamp_delta
    latest = header.base_timestamp + walk.max_timestamp_delta
    floor = now_ms - policy.before_max_ms
    ceiling = now_ms + policy.after_max_ms
    if earliest >= floor and latest <= ceiling:
        return
    # Rare: find which records are out of the window, for record_errors.
    errors = [
        RecordError(i, f"timestamp {ts} is outside [{floor}, {ceiling}]")
        for i, ts in enumerate(_record_timestamps(data, header))
        if not floor <= ts <= ceiling
    ]
    raise InvalidTimestampError(
        f"{len(errors)} record(s) have timestamps outside the window "
        f"message.timestamp.before.max.ms={policy.before_max_ms} / "
        f"after.max.ms={policy.after_max_ms} around {now_ms}",
        errors,
    )


def _record_timestamps(data: Buffer, header: BatchHeader) -> list[int]:
    out = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = _varint(data, pos)
        end = pos + length
        delta, _next = _varint(data, pos + 1)
        out.append(header.base_timestamp + delta)
        pos = end
    return out


def fast_walk(data: Buffer, count: int) -> RecordWalk:
    """:func:`walk_records`, compiled when numba is available."""
    compiled = compiled_walk(wait=False)
    if compiled is None:
        return walk_records(data, count)
    ok, lo, hi = compiled(data, count)
    if ok:
        return RecordWalk(lo, hi)
    return walk_records(data, count)  # decides, and names the bad record


def prepare(*, background: bool = False) -> bool:
    """Compile (or load) the fast walk off the produce path; True when compiled now.

    ``background`` starts it on a thread and returns at once (False).
    """
    if background:
        load_in_background()
        return False
    return compiled_walk() is not None


def validate_append(
    payload: Buffer,
    max_batch_bytes: int,
    policy: TimestampPolicy,
    now_ms: int,
    walker: RecordWalker = fast_walk,
    *,
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
) -> ValidatedAppend:
    """Check every batch and record of a producer's payload; all or nothing.

    A compressed batch that inflates to more than ``max_decompressed_bytes``
    is CORRUPT_MESSAGE, refused once that much output is written.

    With CreateTime a batch whose header max timestamp disagrees with its
    records is corrected (and re-CRCed), as Kafka does, so the time index
    is built from true values. With LogAppendTime every batch is stamped
    with ``now_ms``.
    """
    headers = validate_batches(payload, max_batch_bytes, allow_control=True)
    view = payload if isinstance(payload, memoryview) else memoryview(payload)
    fixes: list[tuple[BatchHeader, int]] = []  # (batch, new max timestamp)
    for header in headers:
        _check_batch_fields(header)
        data = _records_of(view, header, max_decompressed_bytes)
        walk = walker(data, header.record_count)
        if policy.timestamp_type == LOG_APPEND_TIME:
            if header.max_timestamp != now_ms or header.timestamp_type != LOG_APPEND_TIME:
                fixes.append((header, now_ms))
            continue
        _check_timestamps(header, walk, data, policy, now_ms)
        true_max = header.base_timestamp + walk.max_timestamp_delta
        if header.max_timestamp != true_max or header.timestamp_type != CREATE_TIME:
            fixes.append((header, true_max))
    if not fixes:
        return ValidatedAppend(headers, payload, -1)
    buf = bytearray(payload)
    stamped = policy.timestamp_type
    by_position = {h.position: ts for h, ts in fixes}
    out: list[BatchHeader] = []
    for header in headers:
        ts = by_position.get(header.position)
        if ts is None:
            out.append(header)
            continue
        attributes = (header.attributes & ~TIMESTAMP_TYPE_MASK) | (stamped << 3)
        _INT16.pack_into(buf, header.position + ATTRIBUTES_OFFSET, attributes)
        _INT64.pack_into(buf, header.position + _MAX_TIMESTAMP_OFFSET, ts)
        crc = compute_batch_crc(buf, header.position, header.size)
        _UINT32.pack_into(buf, header.position + CRC_OFFSET, crc)
        out.append(header._replace(attributes=attributes, max_timestamp=ts, crc=crc))
    append_time = now_ms if stamped == LOG_APPEND_TIME else -1
    return ValidatedAppend(out, buf, append_time)
