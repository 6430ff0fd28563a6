"""Records inside a v2 batch: build a batch from records, decode batches into records.

The broker never decodes records on its hot paths (it works on batch
headers); this module serves producers, consumers, tools and the rare
broker path that needs one exact record (offset-for-timestamp).

The zig-zag varint codec is written here rather than taken from a library:
it is a dozen lines, and decoding the common one-byte case inline in the
record loop is what keeps record decoding fast in pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from headwater.records.batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Buffer,
    batch_crc_is_valid,
    iter_batch_headers,
    write_batch_crc,
)
from headwater.records.compression import Compression, compress, decompress
from headwater.records.errors import CorruptRecordError

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


class DecodedBatch(NamedTuple):
    header: BatchHeader
    records: list[Record]


_SMALL_VARINTS = [bytes((z,)) for z in range(0x80)]


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of a signed 64-bit value (Kafka's varint and varlong)."""
    z = (value << 1) ^ (value >> 63)
    if z < 0x80:
        return _SMALL_VARINTS[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode the zig-zag varint at ``pos``; return (value, next position)."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    z = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = data[pos]
        pos += 1
        if shift == 63 and b & 0x7F > 1:
            raise CorruptRecordError(f"varint at {pos} does not fit 64 bits")
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError(f"varint longer than 10 bytes at {pos}")


def _encode_bytes(data: bytes | None) -> bytes:
    if data is None:
        return _NULL_LENGTH
    return encode_varint(len(data)) + data


_NULL_LENGTH = encode_varint(-1)


class RecordBatchBuilder:
    """Accumulates records and writes one v2 batch with a valid CRC.

    Offsets start at ``base_offset`` and are consecutive; the broker rewrites
    the base offset on append, so producers leave it at 0.
    """

    def __init__(
        self,
        compression: Compression | int = Compression.NONE,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        timestamp_type: int = 0,
        partition_leader_epoch: int = -1,
        *,
        is_control: bool = False,
    ) -> None:
        self.compression = Compression(compression)
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.timestamp_type = timestamp_type
        self.partition_leader_epoch = partition_leader_epoch
        self.is_control = is_control
        self._records = bytearray()
        self._count = 0
        self._base_timestamp = 0
        self._max_timestamp = -1

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def estimated_size(self) -> int:
        """Size of the batch if nothing compresses: an upper bound for batching decisions."""
        return HEADER_SIZE + len(self._records)

    def append(
        self,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[Header] = (),
    ) -> None:
        if self._count == 0:
            self._base_timestamp = timestamp_ms
        if timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        headers = list(headers)
        parts = [
            b"\x00",  # record attributes: unused in v2
            encode_varint(timestamp_ms - self._base_timestamp),
            encode_varint(self._count),
            _encode_bytes(key),
            _encode_bytes(value),
            encode_varint(len(headers)),
        ]
        for header_key, header_value in headers:
            parts.append(_encode_bytes(header_key.encode()))
            parts.append(_encode_bytes(header_value))
        body = b"".join(parts)
        self._records += encode_varint(len(body))
        self._records += body
        self._count += 1

    def append_encoded(
        self,
        records: bytes | bytearray | memoryview | Any,
        count: int,
        base_timestamp: int,
        max_timestamp: int,
    ) -> None:
        """Take ``count`` records already encoded against ``base_timestamp`` and offset 0.

        For ``headwater.records.columnar_encode``, which writes a whole
        batch's records in one compiled call; only into an empty builder.
        """
        if self._count:
            raise ValueError("append_encoded needs an empty builder")
        self._records = bytearray(records)
        self._count = count
        self._base_timestamp = base_timestamp
        self._max_timestamp = max_timestamp

    def build(self) -> bytes:
        if self._count == 0:
            raise ValueError("a record batch needs at least one record")
        payload: bytes | bytearray = self._records
        if self.compression is not Compression.NONE:
            payload = compress(self.compression, self._records)
        attributes = int(self.compression)
        if self.timestamp_type:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_MASK
        if self.is_control:
            attributes |= CONTROL_MASK
        out = bytearray(
            HEADER_STRUCT.pack(
                self.base_offset,
                HEADER_SIZE - LOG_OVERHEAD + len(payload),
                self.partition_leader_epoch,
                MAGIC_V2,
                0,  # CRC, filled in below
                attributes,
                self._count - 1,
                self._base_timestamp,
                self._max_timestamp,
                self.producer_id,
                self.producer_epoch,
                self.base_sequence,
                self._count,
            )
        )
        out += payload
        write_batch_crc(out, 0, len(out))
        return bytes(out)


def decode_batches(buf: Buffer, *, check_crc: bool = True) -> Iterator[DecodedBatch]:
    """Every complete batch in ``buf`` with its records; a partial tail is skipped.

    Control batches are decoded like any other; callers that hand records to
    an application skip them by ``header.is_control``.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    for header in iter_batch_headers(view):
        if header.magic != MAGIC_V2:
            raise CorruptRecordError(
                f"batch at position {header.position} has magic {header.magic}; "
                "only v2 is supported"
            )
        if check_crc and not batch_crc_is_valid(view, header):
            raise CorruptRecordError(
                f"batch at offset {header.base_offset} fails its CRC-32C check"
            )
        body = view[header.position + HEADER_SIZE : header.position + header.size]
        data = decompress(header.compression, body) if header.compression else body.tobytes()
        yield DecodedBatch(header, decode_records(data, header))


def decode_records(data: bytes, header: BatchHeader) -> list[Record]:
    """The records of one batch from its (decompressed) record bytes."""
    try:
        records = _decode_records(
            data, header.record_count, header.base_offset, header.base_timestamp
        )
    except IndexError as exc:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} ends inside a record"
        ) from exc
    if header.timestamp_type == 1:
        # LogAppendTime: the broker stamped only the batch, every record shares it.
        stamped = header.max_timestamp
        records = [r._replace(timestamp=stamped) for r in records]
    return records


def _decode_records(data: bytes, count: int, base_offset: int, base_timestamp: int) -> list[Record]:
    # Hot loop: one-byte varints are decoded inline, longer ones by call.
    records: list[Record] = []
    append = records.append
    varint = decode_varint
    pos = 0
    for _ in range(count):
        length, pos = varint(data, pos)
        end = pos + length
        pos += 1  # attributes
        b = data[pos]
        if b < 0x80:
            timestamp_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            timestamp_delta, pos = varint(data, pos)
        b = data[pos]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            offset_delta, pos = varint(data, pos)
        b = data[pos]
        if b < 0x80:
            key_length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            key_length, pos = varint(data, pos)
        if key_length < 0:
            key = None
        else:
            key = data[pos : pos + key_length]
            pos += key_length
        value_length, pos = varint(data, pos)
        if value_length < 0:
            value = None
        else:
            value = data[pos : pos + value_length]
            pos += value_length
        header_count = data[pos]
        if header_count == 0:
            headers: list[Header] = []
            pos += 1
        else:
            header_count, pos = varint(data, pos)
            if header_count < 0:
                raise CorruptRecordError(f"record has header count {header_count}")
            headers = []
            for _h in range(header_count):
                name_length, pos = varint(data, pos)
                if name_length < 0 or pos + name_length > len(data):
                    raise CorruptRecordError(f"header key length {name_length} at {pos}")
                try:
                    name = data[pos : pos + name_length].decode()
                except UnicodeDecodeError as exc:
                    raise CorruptRecordError(f"header key at {pos} is not UTF-8") from exc
                pos += name_length
                header_value_length, pos = varint(data, pos)
                if header_value_length < 0:
                    header_value = None
                else:
                    header_value = data[pos : pos + header_value_length]
                    pos += header_value_length
                headers.append((name, header_value))
        if pos != end:
            raise CorruptRecordError(
                f"record at offset {base_offset + offset_delta} has length {length} "
                f"but its fields span {length + pos - end}"
            )
        append(
            Record(
                base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, headers
            )
        )
    if pos != len(data):
        raise CorruptRecordError(
            f"batch at offset {base_offset} has {len(data) - pos} bytes after its {count} records"
        )
    return records


def build_batch(
    records: Sequence[tuple[int, bytes | None, bytes | None]],
    compression: Compression | int = Compression.NONE,
) -> bytes:
    """A batch of (timestamp, key, value) records: a shorthand for tools and tests."""
    builder = RecordBatchBuilder(compression)
    for timestamp_ms, key, value in records:
        builder.append(timestamp_ms, key, value)
    return builder.build()
