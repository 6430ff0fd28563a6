"""What a follower receives reaches its log without extra copies (issue 21), and still intact."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.protocol.fetch_codec import decode_fetch_response, encode_fetch_response
from headwater.protocol.fetch_types import FetchResponseData, PartitionData
from headwater.protocol.frame import FrameDecoder
from headwater.protocol.wire import INT32


def response(records: list[bytes | None]) -> FetchResponseData:
    topic_id = uuid.uuid4()
    return FetchResponseData(
        session_id=7,
        partitions=[
            PartitionData(topic_id, "t", p, high_watermark=10, records=r)
            for p, r in enumerate(records)
        ],
    )


@settings(max_examples=50, deadline=None)
@given(
    records=st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=4),
    version=st.sampled_from([4, 11, 12]),
)
def test_record_views_decode_to_the_same_bytes_as_copies(
    records: list[bytes | None], version: int
) -> None:
    body = b"head" + encode_fetch_response(response(records), version).to_bytes()
    copied = decode_fetch_response(body, 4, version)
    viewed = decode_fetch_response(body, 4, version, record_views=True)
    for c, v in zip(copied.partitions, viewed.partitions, strict=True):
        assert (c.records is None) == (v.records is None)
        if v.records is not None:
            assert isinstance(v.records, memoryview) and v.records.readonly
            assert bytes(v.records) == c.records


@settings(max_examples=50, deadline=None)
@given(
    frames=st.lists(st.binary(min_size=4, max_size=2000), min_size=1, max_size=5),
    chunk=st.integers(min_value=1, max_value=700),
    preallocate=st.booleans(),
)
def test_a_frame_arriving_in_chunks_is_assembled_whole_either_way(
    frames: list[bytes], chunk: int, preallocate: bool
) -> None:
    stream = b"".join(INT32.pack(len(f)) + f for f in frames)
    decoder = FrameDecoder(1 << 20, min_frame_bytes=4, preallocate=preallocate)
    got: list[bytes] = []
    for i in range(0, len(stream), chunk):
        got += [bytes(f) for f in decoder.feed(stream[i : i + chunk])]
        assert decoder.buffered <= len(stream)
    assert got == frames and decoder.buffered == 0


def test_a_broker_side_decoder_does_not_allocate_what_a_peer_only_claims() -> None:
    decoder = FrameDecoder(100 << 20)
    decoder.feed(INT32.pack(100 << 20) + b"x" * 10)
    assert decoder.buffered == 10
    assert decoder._body is not None and len(decoder._body) == 10
