"""The columnar decoder against the pure-Python reference, on valid and corrupt batches."""

from __future__ import annotations

import struct
from typing import Any

import cramjam
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from headwater.client.partitioner import partition_for_key
from headwater.records import columnar
from headwater.records.batch import (
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    iter_batch_headers,
    write_batch_crc,
)
from headwater.records.columnar_encode import encode_batches, key_partitions
from headwater.records.compression import Compression
from headwater.records.errors import CorruptRecordError
from headwater.records.record import RecordBatchBuilder, decode_batches

INT64 = (-(2**63), 2**63 - 1)

opt_bytes = st.none() | st.binary(max_size=40)
header = st.tuples(st.text(max_size=8), opt_bytes)
record = st.tuples(
    st.integers(-(2**40), 2**40),  # timestamp
    opt_bytes,  # key
    opt_bytes,  # value
    st.lists(header, max_size=3),
)
batch_spec = st.tuples(
    st.sampled_from(list(Compression)),
    st.integers(0, 1),  # timestamp type
    st.integers(0, 2**40),  # base offset
    st.lists(record, min_size=1, max_size=12),
    st.booleans(),  # control batch
)


def build(spec: tuple[Any, ...]) -> bytes:
    codec, ts_type, base_offset, records, control = spec
    builder = RecordBatchBuilder(
        codec, base_offset=base_offset, timestamp_type=ts_type, is_control=control
    )
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)
    return builder.build()


def reference(buf: bytes, include_headers: bool, check_crc: bool = True) -> list[dict[str, Any]]:
    """Rows by the pure decoder; control batches are skipped unread, as the columns do."""
    rows = []
    for h in iter_batch_headers(buf):
        if h.is_control:
            continue
        (batch,) = decode_batches(buf[h.position : h.position + h.size], check_crc=check_crc)
        for r in batch.records:
            row: dict[str, Any] = {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "timestampType": h.timestamp_type,
                "key": r.key,
                "value": r.value,
            }
            if include_headers:
                row["headers"] = [{"key": k, "value": v} for k, v in r.headers]
            rows.append(row)
    return rows


def outcome(fn: Any) -> Any:
    """The rows, or the fact of a CorruptRecordError; any other exception fails the test."""
    try:
        return fn()
    except CorruptRecordError as exc:
        return "not utf-8" if "UTF-8" in str(exc) else "corrupt"


@settings(max_examples=300, deadline=None)
@given(st.lists(batch_spec, min_size=1, max_size=4), st.booleans(), st.integers(0, 60))
def test_compiled_matches_reference(specs: list[Any], include_headers: bool, tail: int) -> None:
    buf = b"".join(build(s) for s in specs)
    # A partial batch at the end (the broker cuts at max_bytes) is skipped by both.
    buf += build(specs[0])[:tail]
    expected = reference(buf, include_headers)
    got = columnar.decode_columns(buf, include_headers=include_headers)
    assert got.schema == columnar.column_schema(include_headers)
    assert got.to_pylist() == expected
    fallback = columnar.decode_columns(buf, include_headers=include_headers, use_compiled=False)
    assert fallback.equals(got)


def test_empty_and_control_only_give_empty_columns() -> None:
    assert columnar.decode_columns(b"").num_rows == 0
    marker = RecordBatchBuilder(is_control=True)
    marker.append(0, b"\x00\x00\x00\x00", b"")
    assert columnar.decode_columns(marker.build(), include_headers=True).num_rows == 0


def test_only_the_batches_asked_for() -> None:
    bufs = [build((Compression.NONE, 0, i * 10, [(1, b"k", b"v", [])], False)) for i in range(3)]
    buf = b"".join(bufs)
    headers = list(iter_batch_headers(buf))
    got = columnar.decode_columns(buf, batches=[headers[0], headers[2]])
    assert got.column("offset").to_pylist() == [0, 20]


def refresh_crcs(buf: bytearray) -> None:
    pos = 0
    while len(buf) - pos >= HEADER_SIZE:
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        size = LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > len(buf):
            return
        write_batch_crc(buf, pos, size)
        pos += size


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(batch_spec, min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6),
    st.booleans(),
)
def test_fuzz_compiled_against_reference(
    specs: list[Any], flips: list[tuple[int, int]], include_headers: bool
) -> None:
    """Random byte changes (CRCs made valid again, so the record parser sees them).

    Both decoders must agree: the same rows, or both a CorruptRecordError.
    """
    buf = bytearray(b"".join(build(s) for s in specs))
    for where, value in flips:
        buf[where % len(buf)] = value
    refresh_crcs(buf)
    data = bytes(buf)
    expected = outcome(lambda: reference(data, include_headers))
    if expected == "not utf-8":
        # Header keys are only checked when headers are decoded: skipping them
        # need not look inside (Kafka's Java client does not reject them either).
        assume(include_headers)
        expected = "corrupt"
    if expected != "corrupt":
        for row in expected:
            assume(INT64[0] <= row["offset"] <= INT64[1])
            assume(INT64[0] <= row["timestamp"] <= INT64[1])
    got = outcome(
        lambda: columnar.decode_columns(data, include_headers=include_headers).to_pylist()
    )
    assert (got if got != "not utf-8" else "corrupt") == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(record, min_size=1, max_size=8), st.integers(1, 400), st.data())
def test_lying_lengths_and_truncated_records_are_corrupt(
    records: list[Any], cut: int, data: st.DataObject
) -> None:
    """The batch length and CRC are consistent, but records were cut or the count lies."""
    raw = bytearray(build((Compression.NONE, 0, 0, records, False)))
    body_len = len(raw) - HEADER_SIZE
    cut = min(cut, body_len)
    del raw[len(raw) - cut :]
    struct.pack_into(">i", raw, 8, len(raw) - LOG_OVERHEAD)
    if data.draw(st.booleans()):
        struct.pack_into(">i", raw, 57, data.draw(st.integers(len(records) + 1, 2**31 - 1)))
    write_batch_crc(raw, 0, len(raw))
    with pytest.raises(CorruptRecordError):
        columnar.decode_columns(bytes(raw))
    with pytest.raises(CorruptRecordError):
        reference(bytes(raw), False)


def test_bad_crc_is_corrupt_unless_crcs_are_not_checked() -> None:
    raw = bytearray(build((Compression.NONE, 0, 0, [(5, b"k", b"v", [])], False)))
    struct.pack_into(">I", raw, CRC_OFFSET, 12345)
    with pytest.raises(CorruptRecordError, match="CRC"):
        columnar.decode_columns(bytes(raw))
    assert columnar.decode_columns(bytes(raw), check_crcs=False).num_rows == 1


def test_varint_running_past_the_end_is_corrupt() -> None:
    raw = bytearray(build((Compression.NONE, 0, 0, [(5, b"k", b"v", [])], False)))
    raw[-1] = 0x80  # the header count's varint now continues past the batch
    write_batch_crc(raw, 0, len(raw))
    with pytest.raises(CorruptRecordError, match="ends inside a record"):
        columnar.decode_columns(bytes(raw))


def test_overlong_varint_is_corrupt() -> None:
    raw = bytearray(build((Compression.NONE, 0, 0, [(5, b"k", b"v" * 20, [])], False)))
    # the record's length varint becomes eleven continuation bytes
    raw[HEADER_SIZE : HEADER_SIZE + 11] = b"\xff" * 11
    write_batch_crc(raw, 0, len(raw))
    with pytest.raises(CorruptRecordError, match="varint"):
        columnar.decode_columns(bytes(raw))


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_decompression_bomb_stops_at_the_limit(codec: Compression) -> None:
    big = [(0, None, b"\x00" * 1_000_000, []) for _ in range(4)]
    raw = build((codec, 0, 0, big, False))
    assert len(raw) < 200_000
    with pytest.raises(CorruptRecordError, match="limit"):
        columnar.decode_columns(raw, max_batch_bytes=1_000_000)
    assert columnar.decode_columns(raw, max_batch_bytes=8_000_000).num_rows == 4


def test_snappy_raw_and_xerial_both_read() -> None:
    inner = bytearray(build((Compression.NONE, 0, 7, [(1, b"a", b"b" * 50, [])], False)))
    records = bytes(inner[HEADER_SIZE:])
    raw = bytes(cramjam.snappy.compress_raw(records))
    out = bytearray(inner[:HEADER_SIZE]) + raw
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    out[22] = (out[22] & ~0x07) | Compression.SNAPPY  # attributes' low byte
    write_batch_crc(out, 0, len(out))
    assert columnar.decode_columns(bytes(out)).to_pylist() == reference(bytes(out), False)
    xerial = build((Compression.SNAPPY, 0, 7, [(1, b"a", b"b" * 50, [])], False))
    assert columnar.decode_columns(xerial).column("value").to_pylist() == [b"b" * 50]


def test_header_key_that_is_not_utf8_is_corrupt() -> None:
    raw = bytearray(build((Compression.NONE, 0, 0, [(5, None, None, [("ab", None)])], False)))
    at = bytes(raw).rindex(b"ab")
    raw[at] = 0xFF
    write_batch_crc(raw, 0, len(raw))
    with pytest.raises(CorruptRecordError):
        columnar.decode_columns(bytes(raw), include_headers=True)
    with pytest.raises(CorruptRecordError):
        reference(bytes(raw), True)


def test_columns_are_arrow_without_copies_of_offsets() -> None:
    raw = build((Compression.LZ4, 1, 100, [(5, b"k", b"v", []), (9, None, b"w", [])], False))
    got = columnar.decode_columns(raw)
    assert got.column("key").null_count == 1
    assert isinstance(got.column("value"), pa.BinaryArray)
    # LogAppendTime: every record carries the batch's max timestamp.
    assert got.column("timestamp").to_pylist() == [9, 9]
    assert got.column("timestampType").to_pylist() == [1, 1]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(opt_bytes, opt_bytes), min_size=1, max_size=60),
    st.sampled_from(list(Compression)),
    st.integers(1, 400),
    st.integers(0, 5),
    st.booleans(),
)
def test_encoded_arrow_rows_decode_to_the_same_rows(
    rows: list[tuple[bytes | None, bytes | None]],
    codec: Compression,
    target: int,
    skip: int,
    as_string: bool,
) -> None:
    keys = pa.array([k for k, _ in rows], pa.binary())
    values = pa.array([v for _, v in rows], pa.binary())
    if as_string:  # string columns are encoded as their UTF-8 bytes
        keys = pa.array([None if k is None else k.hex() for k, _ in rows], pa.string())
    skip = min(skip, len(rows) - 1)  # sliced arrays carry an offset into their buffers
    keys, values = keys.slice(skip), values.slice(skip)
    builders = encode_batches(
        values, keys, timestamp_ms=1_700_000_000_000, compression=codec, target_bytes=target
    )
    buf = b"".join(b.build() for b in builders)
    decoded = reference(buf, include_headers=True)
    expected_keys = [
        None if k is None else k.encode() if as_string else k for k in keys.to_pylist()
    ]
    assert [r["key"] for r in decoded] == expected_keys
    assert [r["value"] for r in decoded] == values.to_pylist()
    assert {r["timestamp"] for r in decoded} == {1_700_000_000_000}
    assert all(r["headers"] == [] for r in decoded)
    assert sum(b.record_count for b in builders) == len(values)


def test_encoded_rows_with_headers_keep_them() -> None:
    values = pa.array([b"a", b"b", None])
    builders = encode_batches(
        values, None, timestamp_ms=5, headers=[None, [("h", b"x")], [("n", None)]]
    )
    decoded = reference(b"".join(b.build() for b in builders), include_headers=True)
    assert [r["headers"] for r in decoded] == [
        [],
        [{"key": "h", "value": b"x"}],
        [{"key": "n", "value": None}],
    ]
    assert [r["key"] for r in decoded] == [None, None, None]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30), st.integers(1, 100))
def test_vectorised_key_partitions_match_the_partitioner(keys: list[bytes], count: int) -> None:
    got = key_partitions(pa.array(keys, pa.binary()), count).tolist()
    assert got == [partition_for_key(key, count) for key in keys]


def test_warm_up_leaves_one_compiled_specialisation_per_kernel() -> None:
    columnar.warm_up()
    kernels = columnar.kernels()
    assert columnar.compiled()
    for kernel in (kernels.decode_records, kernels.encode_records, kernels.key_partitions):
        assert len(kernel.signatures) == 1
