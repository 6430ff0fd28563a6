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


@settings(max_examples=100, deadline=None)
@given(
    frames=st.lists(st.binary(min_size=4, max_size=3000), min_size=1, max_size=6),
    chunk=st.integers(min_value=1, max_value=900),
    direct=st.integers(min_value=1, max_value=900),
)
def test_a_client_receiving_straight_into_its_frames_gets_them_whole(
    frames: list[bytes], chunk: int, direct: int
) -> None:
    """What the client connection does: chunks while no frame is open, then the
    socket writes into the rest of the open frame (``BufferedProtocol``)."""
    stream = memoryview(b"".join(INT32.pack(len(f)) + f for f in frames))
    decoder = FrameDecoder(1 << 20, min_frame_bytes=4, preallocate=True)
    got: list[bytes] = []
    pos = 0
    straight = 0
    while pos < len(stream):
        target = decoder.receive_buffer()
        if target is None:
            n = min(chunk, len(stream) - pos)
            got += [bytes(f) for f in decoder.feed(stream[pos : pos + n])]
        else:
            assert len(target) > 0
            n = min(direct, len(target), len(stream) - pos)
            target[:n] = stream[pos : pos + n]  # what recv_into does
            got += [bytes(f) for f in decoder.received(n)]
            straight += n
        pos += n
    assert got == frames and decoder.buffered == 0
    # Only the chunks that open frames (length prefix split over chunks at worst) are copied.
    assert len(stream) - straight <= len(frames) * (chunk + 4)


def test_a_broker_side_decoder_never_offers_its_buffer_to_the_socket() -> None:
    decoder = FrameDecoder(100 << 20)
    decoder.feed(INT32.pack(1000) + b"x" * 10)
    assert decoder.receive_buffer() is None
