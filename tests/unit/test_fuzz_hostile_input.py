"""Hypothesis fuzzing of what a hostile client controls: frames, produce payloads, fetch requests.

Each target must either accept its input or raise its own clear error,
never crash with an unrelated exception. The budget is fixed
(``max_examples``) so CI time stays bounded; ``HEADWATER_FUZZ_EXAMPLES``
raises it for a longer local run.
"""

from __future__ import annotations

import contextlib
import os
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.protocol.errors import FrameTooLargeError, InvalidFrameError, ProtocolError
from headwater.protocol.fetch_codec import decode_fetch_request, encode_fetch_request
from headwater.protocol.fetch_types import FetchRequestData, PartitionFetch
from headwater.protocol.frame import FrameDecoder
from headwater.records.batch import HEADER_SIZE, write_batch_crc
from headwater.records.compiled_walk import compiled_walk
from headwater.records.compression import Compression
from headwater.records.errors import CorruptRecordError, KafkaApiError
from headwater.records.record import RecordBatchBuilder, decode_batches
from headwater.records.validation import (
    RecordWalk,
    TimestampPolicy,
    validate_append,
    walk_records,
)

EXAMPLES = int(os.environ.get("HEADWATER_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

records = st.lists(
    st.tuples(
        st.integers(-(2**40), 2**40),
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
    ),
    min_size=1,
    max_size=30,
)


def build(
    recs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]], codec: int
) -> bytes:
    b = RecordBatchBuilder(codec)
    for ts, key, value, headers in recs:
        b.append(ts, key, value, headers)
    return b.build()


def pure(data: bytes, count: int) -> RecordWalk | None:
    try:
        return walk_records(data, count)
    except KafkaApiError:
        return None


@FUZZ
@given(records, st.data())
def test_compiled_and_pure_walks_agree_on_mutated_records(recs: list, data: st.DataObject) -> None:  # type: ignore[type-arg]
    compiled = compiled_walk()
    assert compiled is not None
    body = bytearray(build(recs, 0)[HEADER_SIZE:])
    for _ in range(data.draw(st.integers(0, 4))):
        if body:
            at = data.draw(st.integers(0, len(body) - 1))
            body[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()) and body:
        del body[data.draw(st.integers(0, len(body) - 1)) :]
    count = len(recs) + data.draw(st.integers(-1, 1))
    expected = pure(bytes(body), count)
    ok, lo, hi = compiled(bytes(body), count)
    # The compiled walk may defer to the pure one ("look closer"), never pass what it refuses.
    if ok:
        assert expected is not None
        assert (lo, hi) == tuple(expected)


@FUZZ
@given(records, st.sampled_from(list(Compression)), st.data())
def test_validator_accepts_what_it_passes_and_consumers_can_read_it(
    recs: list,
    codec: Compression,
    data: st.DataObject,  # type: ignore[type-arg]
) -> None:
    raw = bytearray(build(recs, codec))
    if data.draw(st.booleans()):
        # Flip bytes after the CRC field and fix the CRC: the hostile case.
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(21, len(raw) - 1))
            raw[at] = data.draw(st.integers(0, 255))
        write_batch_crc(raw, 0, len(raw))
    try:
        out = validate_append(bytes(raw), 1 << 20, TimestampPolicy(), 0)
    except KafkaApiError:
        return
    # Whatever passes must decode for a consumer, with the count it declares.
    [batch] = list(decode_batches(out.payload))
    assert len(batch.records) == batch.header.record_count


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_frame_decoder_yields_frames_or_raises_its_own_errors(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(1 << 16)
    try:
        for chunk in chunks:
            for frame in decoder.feed(chunk):
                assert 8 <= len(frame) <= 1 << 16
    except (FrameTooLargeError, InvalidFrameError):
        pass
    assert decoder.buffered <= 1 << 16


@FUZZ
@given(st.binary(max_size=300), st.integers(4, 16))
def test_fetch_decoder_raises_protocol_errors_on_garbage(body: bytes, version: int) -> None:
    with contextlib.suppress(ProtocolError, CorruptRecordError):
        decode_fetch_request(body, 0, version)


@FUZZ
@given(st.data(), st.integers(4, 16))
def test_fetch_decoder_on_truncated_and_flipped_requests(data: st.DataObject, version: int) -> None:
    topic_id = uuid.UUID(int=7)
    req = FetchRequestData(
        version,
        max_wait_ms=100,
        min_bytes=1,
        partitions=[PartitionFetch(topic_id, "t", p, 5, -1, 1024) for p in range(3)],
    )
    raw = bytearray(encode_fetch_request(req, version))
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    with contextlib.suppress(ProtocolError):
        decode_fetch_request(bytes(raw), 0, version)
