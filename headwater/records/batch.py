"""RecordBatch v2 headers: parse, validate and patch without touching the records.

The broker never needs the records inside a batch to append or serve it:
the 61-byte header says where the batch ends, which offsets it covers and
whether its CRC holds. Keeping this separate from record decoding lets the
produce path stay O(batches), not O(records).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from headwater.records.errors import CorruptRecordError, RecordTooLargeError

Buffer = bytes | bytearray | memoryview

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordCount
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER_STRUCT.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part batchLength does not count
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers from here to the end of the batch
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
MAGIC_V2 = 2
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # a batch with no record bytes at all

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

MAX_SEQUENCE = 0x7FFFFFFF  # sequences wrap from here to 0

_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


class BatchHeader(NamedTuple):
    """The fixed header of one batch plus where it sits in the buffer it came from."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int
    size: int  # LOG_OVERHEAD + batch_length: the whole batch on the wire

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record, wrapping like Kafka's producer does."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (MAX_SEQUENCE + 1)

    @property
    def has_producer_sequence(self) -> bool:
        return self.producer_id >= 0 and self.base_sequence >= 0


def parse_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Read the header at ``pos``; the batch body need not be in ``buf``."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated batch header at position {pos}: {len(buf) - pos} bytes, need {HEADER_SIZE}"
        )
    fields = HEADER_STRUCT.unpack_from(buf, pos)
    return BatchHeader._make((*fields, pos, LOG_OVERHEAD + fields[1]))


def iter_batch_headers(buf: Buffer, pos: int = 0) -> Iterator[BatchHeader]:
    """Headers of the complete batches in ``buf``, stopping quietly at a partial tail.

    A fetch response may end inside a batch (the broker cuts at max_bytes);
    readers skip that tail, so this does too. A header whose length cannot be
    right is corruption, not truncation, and raises.
    """
    end = len(buf)
    unpack_from = HEADER_STRUCT.unpack_from
    make = BatchHeader._make
    while end - pos >= HEADER_SIZE:
        fields = unpack_from(buf, pos)
        batch_length = fields[1]
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch at position {pos} has length {batch_length} < {MIN_BATCH_LENGTH}"
            )
        size = LOG_OVERHEAD + batch_length
        if pos + size > end:
            return
        yield make((*fields, pos, size))
        pos += size


def batch_crc_is_valid(buf: Buffer, header: BatchHeader) -> bool:
    """True when the stored CRC-32C matches the bytes it covers."""
    start = header.position + ATTRIBUTES_OFFSET
    stop = header.position + header.size
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c.crc32c(view[start:stop]) == header.crc


def validate_batches(
    buf: Buffer, max_batch_size: int, *, allow_control: bool = False, compacted: bool = False
) -> list[BatchHeader]:
    """Check a Produce payload batch by batch and return the headers.

    Only the header is inspected plus one CRC over each batch: the CRC covers
    the records, so a producer bug or a torn payload is caught without
    decompressing anything. Control batches are written by the transaction
    coordinator, never by producers, hence ``allow_control``. ``compacted``
    accepts what the log cleaner writes (a leader's log, for a follower): fewer
    records than the offsets a batch spans, or none.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(view)
    if end == 0:
        raise CorruptRecordError("empty record set")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptRecordError(
                f"trailing {end - pos} bytes at position {pos} are not a whole batch header"
            )
        header = parse_batch_header(view, pos)
        if header.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch at position {pos} has length {header.batch_length} < {MIN_BATCH_LENGTH}"
            )
        if header.magic != MAGIC_V2:
            raise CorruptRecordError(
                f"batch at position {pos} has magic {header.magic}; only v2 is supported"
            )
        if pos + header.size > end:
            raise CorruptRecordError(
                f"batch at position {pos} claims {header.size} bytes but only {end - pos} remain"
            )
        if header.size > max_batch_size:
            raise RecordTooLargeError(
                f"batch at position {pos} is {header.size} bytes, "
                f"larger than the limit of {max_batch_size}"
            )
        if not batch_crc_is_valid(view, header):
            raise CorruptRecordError(f"batch at position {pos} fails its CRC-32C check")
        if header.record_count < (0 if compacted else 1):
            raise CorruptRecordError(
                f"batch at position {pos} has record count {header.record_count}"
            )
        if header.last_offset_delta != header.record_count - 1 and not (
            compacted and header.last_offset_delta > header.record_count - 1
        ):
            raise CorruptRecordError(
                f"batch at position {pos} has last offset delta {header.last_offset_delta} "
                f"but {header.record_count} records"
            )
        if header.compression > 4:
            raise CorruptRecordError(
                f"batch at position {pos} uses unknown compression {header.compression}"
            )
        if header.is_control and not allow_control:
            raise CorruptRecordError(f"batch at position {pos} is a control batch")
        headers.append(header)
        pos += header.size
    return headers


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign the batch's offsets in place: the CRC starts after this field."""
    _OFFSET.pack_into(buf, pos, base_offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the leader epoch in place: the CRC starts after this field too."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def compute_batch_crc(buf: Buffer, pos: int, size: int) -> int:
    """CRC-32C of a batch's covered bytes, for writers that fill in the header last."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return int(crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]))


def write_batch_crc(buf: bytearray | memoryview, pos: int, size: int) -> None:
    """Fill in the CRC field of a batch whose other bytes are final."""
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_batch_crc(buf, pos, size))
