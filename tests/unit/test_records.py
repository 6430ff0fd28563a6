"""RecordBatch v2 codec: round trips, cross-checks with kafka-python, corruption."""

from __future__ import annotations

import struct

import lz4.frame  # type: ignore[import-untyped]
import pytest
import snappy  # type: ignore[import-untyped]
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.codec import snappy_decode, snappy_encode
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import decode_varint as kafka_decode_varint
from kafka.record.util import encode_varint as kafka_encode_varint

from headwater.records import (
    Compression,
    CorruptRecordError,
    Record,
    RecordBatchBuilder,
    RecordTooLargeError,
    compress,
    decode_batches,
    decompress,
    iter_batch_headers,
    parse_batch_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    validate_batches,
)
from headwater.records.batch import write_batch_crc
from headwater.records.record import decode_varint, encode_varint

BIG = 1 << 30

SAMPLE: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (1_700_000_000_000, b"key-0", b"value-0", []),
    (1_700_000_000_005, None, b"no key", [("trace", b"abc")]),
    (1_699_999_999_990, b"tombstone", None, [("a", None), ("b", b"")]),
    (1_700_000_000_100, b"", b"x" * 5000, []),
]


def build(
    compression: Compression = Compression.NONE, base_offset: int = 0, **kwargs: int | bool
) -> bytes:
    builder = RecordBatchBuilder(compression, base_offset, **kwargs)  # type: ignore[arg-type]
    for ts, key, value, headers in SAMPLE:
        builder.append(ts, key, value, headers)
    return builder.build()


def as_tuples(records: list[Record]) -> list[tuple[object, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


EXPECTED = [(100 + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(SAMPLE)]


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_every_codec_keeps_keys_headers_and_nulls(codec: Compression) -> None:
    data = build(codec, base_offset=100)
    [batch] = decode_batches(data)
    assert batch.header.compression == codec
    assert batch.header.record_count == 4
    assert batch.header.last_offset == 103
    assert batch.header.max_timestamp == 1_700_000_000_100
    assert as_tuples(batch.records) == EXPECTED


@pytest.mark.parametrize("codec", list(Compression))
def test_our_batches_decode_with_kafka_python_reader(codec: Compression) -> None:
    data = build(codec, base_offset=100, producer_id=7, producer_epoch=2, base_sequence=40)
    theirs = DefaultRecordBatch(bytearray(data))
    assert theirs.validate_crc()
    assert theirs.base_offset == 100
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (7, 2, 40)
    decoded = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert decoded == EXPECTED


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_batches_validate_and_decode_with_ours(codec: Compression) -> None:
    theirs = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
        batch_size=BIG,
    )
    for offset, (ts, key, value, headers) in enumerate(SAMPLE):
        theirs.append(offset, ts, key, value, headers)
    data = bytes(theirs.build())
    [header] = validate_batches(data, max_batch_size=BIG)
    assert header.producer_id == 9 and header.base_sequence == 0 and header.last_sequence == 3
    [batch] = decode_batches(data)
    assert as_tuples(batch.records) == [(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(SAMPLE)]


def test_builder_writes_a_batch_that_validates_with_header_fields() -> None:
    data = build(
        Compression.NONE,
        base_offset=5,
        producer_id=11,
        producer_epoch=3,
        base_sequence=2**31 - 2,
        is_transactional=True,
    )
    [header] = validate_batches(data, max_batch_size=len(data))
    assert header.size == len(data)
    assert header.base_offset == 5 and header.next_offset == 9
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type == 0
    assert header.last_sequence == 1  # 2**31-2 + 3 wraps past 2**31-1 to 0, 1


def test_corrupted_record_byte_fails_the_crc_check() -> None:
    data = bytearray(build())
    data[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batches(data, BIG)
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(decode_batches(data))


def test_patching_base_offset_and_leader_epoch_keeps_the_crc_valid() -> None:
    data = bytearray(build() + build())
    second = parse_batch_header(data, 0).size
    patch_base_offset(data, second, 1234)
    patch_partition_leader_epoch(data, second, 17)
    headers = validate_batches(data, BIG)
    assert [h.base_offset for h in headers] == [0, 1234]
    assert headers[1].partition_leader_epoch == 17
    assert [r.offset for r in list(decode_batches(data))[1].records] == [1234, 1235, 1236, 1237]


def test_partial_trailing_batch_is_skipped_by_readers() -> None:
    first, second = build(base_offset=0), build(base_offset=4)
    for cut in (1, 12, 60, 61, 100, len(second) - 1):
        buf = first + second[:cut]
        assert [h.base_offset for h in iter_batch_headers(buf)] == [0]
        assert [b.header.base_offset for b in decode_batches(buf)] == [0]


def test_validate_rejects_trailing_bytes_after_the_last_batch() -> None:
    with pytest.raises(CorruptRecordError, match="trailing"):
        validate_batches(build() + b"\x00" * 10, BIG)
    with pytest.raises(CorruptRecordError, match="remain"):
        validate_batches(build() + build()[:80], BIG)


def test_validate_rejects_an_empty_payload() -> None:
    with pytest.raises(CorruptRecordError, match="empty"):
        validate_batches(b"", BIG)


def test_validate_rejects_old_magic() -> None:
    data = bytearray(build())
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batches(data, BIG)


def test_validate_rejects_a_batch_over_the_size_limit() -> None:
    data = build()
    with pytest.raises(RecordTooLargeError) as info:
        validate_batches(data, max_batch_size=len(data) - 1)
    assert info.value.kafka_error_code == 10


def test_validate_rejects_inconsistent_record_count() -> None:
    data = bytearray(build())
    struct.pack_into(">i", data, 57, 0)  # record count, covered by the CRC: fix it up
    write_batch_crc(data, 0, len(data))
    with pytest.raises(CorruptRecordError, match="record count"):
        validate_batches(data, BIG)


def test_validate_rejects_control_batches_from_producers() -> None:
    builder = RecordBatchBuilder(is_control=True)
    builder.append(0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    data = builder.build()
    with pytest.raises(CorruptRecordError, match="control"):
        validate_batches(data, BIG)
    [header] = validate_batches(data, BIG, allow_control=True)
    [batch] = decode_batches(data)
    assert header.is_control and batch.header.is_control


def test_building_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        RecordBatchBuilder().build()


def test_truncated_record_inside_a_valid_crc_is_corrupt() -> None:
    data = bytearray(build())
    struct.pack_into(">i", data, 57, 5)  # claim one record more than present
    struct.pack_into(">i", data, 23, 4)
    write_batch_crc(data, 0, len(data))
    with pytest.raises(CorruptRecordError):
        list(decode_batches(data))


def test_estimated_size_bounds_an_uncompressed_batch() -> None:
    builder = RecordBatchBuilder()
    for ts, key, value, headers in SAMPLE:
        builder.append(ts, key, value, headers)
    assert builder.record_count == 4
    assert builder.estimated_size == len(builder.build())


PAYLOAD = b"".join(b"record %d with some repetition " % i for i in range(5000))


def test_snappy_writes_xerial_framing_that_kafka_python_reads() -> None:
    framed = compress(Compression.SNAPPY, PAYLOAD)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert snappy_decode(framed) == PAYLOAD


def test_snappy_reads_xerial_from_kafka_python_and_raw_from_librdkafka() -> None:
    assert decompress(Compression.SNAPPY, snappy_encode(PAYLOAD, xerial_compatible=True)) == PAYLOAD
    assert decompress(Compression.SNAPPY, snappy.compress(PAYLOAD)) == PAYLOAD


def test_lz4_is_the_frame_format() -> None:
    assert lz4.frame.decompress(compress(Compression.LZ4, PAYLOAD)) == PAYLOAD
    assert decompress(Compression.LZ4, lz4.frame.compress(PAYLOAD)) == PAYLOAD


def test_zstd_reads_frames_with_and_without_content_size() -> None:
    assert zstandard.ZstdDecompressor().decompress(compress(Compression.ZSTD, PAYLOAD)) == PAYLOAD
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = streamed.compress(PAYLOAD) + streamed.flush()
    assert decompress(Compression.ZSTD, frame) == PAYLOAD


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_garbage_does_not_decompress_and_is_reported_as_corrupt(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\xff\xff junk")


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_matches_kafka_python(value: int) -> None:
    theirs = bytearray()
    kafka_encode_varint(value, theirs.append)
    assert encode_varint(value) == bytes(theirs)
    assert decode_varint(bytes(theirs), 0) == (value, len(theirs))
    assert kafka_decode_varint(bytearray(encode_varint(value)), 0)[0] == value


header_strategy = st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20)))
record_strategy = st.tuples(
    st.integers(min_value=0, max_value=2**45),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(header_strategy, max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(record_strategy, min_size=1, max_size=30),
    st.sampled_from(list(Compression)),
    st.integers(min_value=0, max_value=2**62),
)
def test_any_records_round_trip(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: Compression,
    base_offset: int,
) -> None:
    builder = RecordBatchBuilder(codec, base_offset)
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)
    data = builder.build()
    [header] = validate_batches(data, BIG)
    [batch] = decode_batches(data)
    assert header == batch.header
    assert header.max_timestamp == max(r[0] for r in records)
    assert as_tuples(batch.records) == [
        (base_offset + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(records)
    ]


def test_log_append_time_batches_give_every_record_the_batch_timestamp() -> None:
    builder = RecordBatchBuilder(timestamp_type=1)
    builder.append(10, b"a", b"1")
    builder.append(20, b"b", b"2")
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 35, 999)  # the broker's append time in maxTimestamp
    write_batch_crc(data, 0, len(data))
    [batch] = decode_batches(data)
    assert batch.header.timestamp_type == 1
    assert [r.timestamp for r in batch.records] == [999, 999]
