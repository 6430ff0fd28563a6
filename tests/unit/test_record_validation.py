"""Record validation on append: what LogValidator refuses, and what it corrects."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import cramjam
import pytest

import headwater.records.validation as validation
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.log import Log
from headwater.records.batch import (
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    batch_crc_is_valid,
    parse_batch_header,
    write_batch_crc,
)
from headwater.records.compiled_walk import compiled_walk
from headwater.records.compression import Compression, compress
from headwater.records.errors import CorruptRecordError
from headwater.records.record import RecordBatchBuilder, decode_batches, encode_varint
from headwater.records.validation import (
    LOG_APPEND_TIME,
    InvalidRecordError,
    InvalidTimestampError,
    RecordValidationError,
    TimestampPolicy,
    validate_append,
)

NOW = 1_700_000_000_000
MAX = 1 << 20


@pytest.fixture(autouse=True, params=["compiled", "pure"])
def walk_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every rule holds for the numba walk and for the pure-Python reference walk."""
    if request.param == "pure":
        monkeypatch.setattr(validation, "compiled_walk", lambda **_: None)
    else:
        assert compiled_walk() is not None, "numba is a dependency: the compiled walk must load"
    return str(request.param)


def batch(
    n: int = 3, compression: Compression = Compression.NONE, ts: int = NOW, **kw: int
) -> bytes:
    b = RecordBatchBuilder(compression, **kw)  # type: ignore[arg-type]
    for i in range(n):
        b.append(ts + i, f"k{i}".encode(), f"value-{i}".encode() * 3)
    return b.build()


def rewrite(raw: bytes, body: bytes | None = None, **fields: int) -> bytes:
    """Change header fields and/or the record bytes, keeping the CRC valid."""
    names = [
        "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
        "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
        "base_sequence", "record_count",
    ]  # fmt: skip
    values = dict(zip(names, HEADER_STRUCT.unpack_from(raw, 0), strict=True))
    values.update(fields)
    body = raw[HEADER_SIZE:] if body is None else body
    values["batch_length"] = HEADER_SIZE - LOG_OVERHEAD + len(body)
    out = bytearray(HEADER_STRUCT.pack(*(values[n] for n in names)) + body)
    write_batch_crc(out, 0, len(out))
    return bytes(out)


def check(payload: bytes, policy: TimestampPolicy | None = None) -> None:
    validate_append(payload, MAX, policy or TimestampPolicy(), NOW)


@pytest.mark.parametrize("codec", list(Compression))
def test_well_formed_batches_of_every_codec_pass_unchanged(codec: Compression) -> None:
    raw = batch(50, codec)
    out = validate_append(raw, MAX, TimestampPolicy(), NOW)
    assert out.payload is raw
    assert out.log_append_time_ms == -1
    assert [h.record_count for h in out.headers] == [50]


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_garbage_inside_a_compressed_batch_with_a_valid_crc_is_corrupt(codec: Compression) -> None:
    raw = batch(5, codec)
    garbage = rewrite(raw, body=b"\x00garbage-not-a-stream" * 4)
    assert batch_crc_is_valid(garbage, parse_batch_header(garbage))
    with pytest.raises(CorruptRecordError):
        check(garbage)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.ZSTD])
def test_record_count_larger_than_the_records_is_invalid(codec: Compression) -> None:
    one = batch(1, codec)
    bad = rewrite(one, record_count=5, last_offset_delta=4)
    with pytest.raises(InvalidRecordError) as info:
        check(bad)
    assert info.value.kafka_error_code == 87
    assert info.value.record_errors[0].batch_index == 1


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_record_count_smaller_than_the_records_is_invalid(codec: Compression) -> None:
    three = batch(3, codec)
    bad = rewrite(three, record_count=1, last_offset_delta=0)
    with pytest.raises(InvalidRecordError, match="follow the 1 records"):
        check(bad)


def test_a_wrong_offset_delta_is_named_by_record_index() -> None:
    b = RecordBatchBuilder()
    b.append(NOW, b"k", b"v")
    b.append(NOW, b"k", b"v")
    raw = bytearray(b.build())
    # second record: [len][attr][ts delta][offset delta=1] -> offset delta 7
    first_len = raw[HEADER_SIZE] >> 1
    second = HEADER_SIZE + 1 + first_len
    assert raw[second + 3] == encode_varint(1)[0]
    raw[second + 3] = encode_varint(7)[0]
    write_batch_crc(raw, 0, len(raw))
    with pytest.raises(InvalidRecordError) as info:
        check(bytes(raw))
    assert info.value.record_errors[0].batch_index == 1
    assert "offset delta 7" in info.value.record_errors[0].message


def test_a_record_length_that_overruns_the_batch_is_invalid() -> None:
    raw = batch(1)
    body = bytearray(raw[HEADER_SIZE:])
    body[0] = encode_varint(120)[0]
    with pytest.raises(InvalidRecordError, match="length"):
        check(rewrite(raw, body=bytes(body)))


def test_an_overlong_varint_is_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        validation.fast_walk(b"\xff" * 11 + b"\x00", 1)


def test_negative_key_length_below_null_is_invalid() -> None:
    body = b"".join(
        [encode_varint(6), b"\x00", encode_varint(0), encode_varint(0), encode_varint(-5), b"\0\0"]
    )
    with pytest.raises(InvalidRecordError, match="key length -5"):
        validation.fast_walk(body, 1)


def test_control_batches_from_clients_are_invalid_records() -> None:
    b = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0, is_control=True)
    b.append(NOW, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")
    with pytest.raises(InvalidRecordError, match="control"):
        check(b.build())


def test_a_producer_id_without_a_sequence_is_invalid() -> None:
    raw = batch(2, producer_id=9, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="sequence"):
        check(raw)


def test_timestamps_outside_the_window_are_rejected_per_record() -> None:
    b = RecordBatchBuilder()
    b.append(NOW, None, b"ok")
    b.append(NOW - 10 * 3_600_000, None, b"too old")
    b.append(NOW + 5, None, b"ok")
    policy = TimestampPolicy(before_max_ms=3_600_000, after_max_ms=3_600_000)
    with pytest.raises(InvalidTimestampError) as info:
        check(b.build(), policy)
    assert info.value.kafka_error_code == 32
    assert [e.batch_index for e in info.value.record_errors] == [1]


def test_log_append_time_stamps_every_batch_and_keeps_the_crc_valid() -> None:
    raw = batch(3, Compression.GZIP, ts=12345)
    out = validate_append(raw, MAX, TimestampPolicy(LOG_APPEND_TIME), NOW)
    assert out.log_append_time_ms == NOW
    [decoded] = list(decode_batches(out.payload))
    assert decoded.header.timestamp_type == 1
    assert [r.timestamp for r in decoded.records] == [NOW] * 3
    assert out.headers[0].max_timestamp == NOW


def test_a_lying_max_timestamp_is_corrected_as_kafka_does() -> None:
    raw = rewrite(batch(3), max_timestamp=NOW + 999_999)
    out = validate_append(raw, MAX, TimestampPolicy(), NOW)
    header = parse_batch_header(out.payload)
    assert header.max_timestamp == NOW + 2
    assert batch_crc_is_valid(out.payload, header)


def test_log_append_refuses_a_bad_batch_among_good_ones_and_appends_nothing(
    tmp_path: Path,
) -> None:
    log = Log(tmp_path / "t-0", LogConfig(), FileHandleCache(8))
    log.append(batch(2), NOW)
    bad = rewrite(batch(1), record_count=3, last_offset_delta=2)
    with pytest.raises(RecordValidationError):
        log.append(batch(2) + bad, NOW)
    assert log.log_end_offset == 2
    log.append(batch(1), NOW)
    assert log.log_end_offset == 3


def test_log_applies_the_topic_timestamp_window(tmp_path: Path) -> None:
    config = LogConfig.from_properties({"message.timestamp.difference.max.ms": "1000"})
    assert config.message_timestamp_before_max_ms == config.message_timestamp_after_max_ms == 1000
    log = Log(tmp_path / "t-0", config, FileHandleCache(8))
    now = int(time.time() * 1000)
    with pytest.raises(InvalidTimestampError):
        log.append(batch(1, ts=now - 5000), now)
    assert log.append(batch(1, ts=now), now).base_offset == 0


def test_the_finer_window_keys_win_over_the_deprecated_difference() -> None:
    config = LogConfig.from_properties(
        {
            "message.timestamp.difference.max.ms": "1000",
            "message.timestamp.after.max.ms": "50",
            "message.timestamp.type": "LogAppendTime",
        }
    )
    assert config.message_timestamp_before_max_ms == 1000
    assert config.message_timestamp_after_max_ms == 50
    assert config.message_timestamp_type == LOG_APPEND_TIME


BOMB_INFLATED = 32 << 20
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def bomb(codec: Compression, inflated: int = BOMB_INFLATED, *, xerial: bool = True) -> bytes:
    """A valid batch (CRC and all) of one record whose value is ``inflated`` zero bytes."""
    b = RecordBatchBuilder(Compression.NONE)
    b.append(NOW, None, bytes(inflated))
    raw = b.build()
    records = raw[HEADER_SIZE:]
    if codec is Compression.SNAPPY and not xerial:  # librdkafka writes raw snappy
        body = bytes(cramjam.snappy.compress_raw(records))
    else:
        body = compress(codec, records)
    attributes = HEADER_STRUCT.unpack_from(raw, 0)[5] | codec
    return rewrite(raw, body, attributes=attributes)


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    # Snappy inflates at most ~21x (its copies are short), so its bomb is smaller.
    made = {codec.name: bomb(codec) for codec in CODECS if codec is not Compression.SNAPPY}
    made["SNAPPY"] = bomb(Compression.SNAPPY, BOMB_INFLATED // 2)
    made["SNAPPY-raw"] = bomb(Compression.SNAPPY, BOMB_INFLATED // 2, xerial=False)
    return made


@pytest.mark.parametrize("name", ["GZIP", "SNAPPY", "SNAPPY-raw", "LZ4", "ZSTD"])
def test_a_decompression_bomb_is_refused_as_corrupt_message(
    name: str, bombs: dict[str, bytes]
) -> None:
    payload = bombs[name]
    assert len(payload) < MAX  # a real bomb: it passes message.max.bytes on the wire
    with pytest.raises(CorruptRecordError, match="1048576 bytes"):
        validate_append(payload, MAX, TimestampPolicy(), NOW, max_decompressed_bytes=1 << 20)


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_that_inflates_to_exactly_the_limit_passes(codec: Compression) -> None:
    payload = bomb(codec, 100_000)
    inflated = len(bomb(Compression.NONE, 100_000)) - HEADER_SIZE
    validate_append(payload, MAX, TimestampPolicy(), NOW, max_decompressed_bytes=inflated)
    with pytest.raises(CorruptRecordError):
        validate_append(payload, MAX, TimestampPolicy(), NOW, max_decompressed_bytes=inflated - 1)


_MEASURE_PEAK = """
import sys
from pathlib import Path
from headwater.records.errors import CorruptRecordError
from headwater.records.validation import TimestampPolicy, validate_append, walk_records

def peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")

payload = Path(sys.argv[1]).read_bytes()
before = peak_kib()
try:
    validate_append(payload, 1 << 30, TimestampPolicy(), int(sys.argv[2]), walk_records,
                    max_decompressed_bytes=1 << 20)
except CorruptRecordError:
    print(peak_kib() - before)
"""


@pytest.mark.parametrize("name", ["GZIP", "SNAPPY", "SNAPPY-raw", "LZ4", "ZSTD"])
def test_a_bomb_costs_about_the_limit_in_memory_not_what_it_inflates_to(
    name: str, bombs: dict[str, bytes], tmp_path: Path, walk_mode: str
) -> None:
    if walk_mode == "compiled":
        pytest.skip("the walk never runs: one measurement per codec is enough")
    path = tmp_path / "bomb"
    path.write_bytes(bombs[name])
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE_PEAK, str(path), str(NOW)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    grown_kib = int(done.stdout.strip())  # empty (ValueError) if the bomb was accepted
    # 16-32 MiB inflated whole would raise the peak by as much; bounded
    # decompression stops at 1 MiB of output (plus codec window buffers).
    assert grown_kib < 12 * 1024, f"peak RSS grew by {grown_kib} KiB"


def test_header_keys_must_be_utf8_for_consumers_to_decode_them() -> None:
    good = RecordBatchBuilder()
    good.append(NOW, b"k", b"v", [("trace-id", b"1"), ("ünïcode", None)])
    check(good.build())
    raw = good.build()
    bad = raw.replace(b"trace-id", b"trace\xff\xfeX")
    with pytest.raises(InvalidRecordError, match="UTF-8"):
        check(rewrite(bad))


def test_the_log_refuses_a_bomb_past_its_configured_limit_and_appends_nothing(
    tmp_path: Path, bombs: dict[str, bytes]
) -> None:
    config = LogConfig.from_properties(
        {"headwater.log.message.max.decompressed.bytes": str(1 << 20)}
    )
    assert config.max_decompressed_bytes == 1 << 20
    log = Log(tmp_path / "t-0", config, FileHandleCache(8))
    log.append(batch(2, Compression.ZSTD), NOW)  # a normal compressed batch passes
    with pytest.raises(CorruptRecordError, match="1048576 bytes"):
        log.append(bombs["ZSTD"], NOW)
    assert log.log_end_offset == 2
