"""FrameDecoder: the stream is split into frames however the bytes arrive."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.protocol.errors import FrameTooLargeError, InvalidFrameError
from headwater.protocol.frame import FrameDecoder, encode_frame


def feed_in_pieces(decoder: FrameDecoder, stream: bytes, cuts: list[int]) -> list[bytes]:
    frames: list[bytes] = []
    start = 0
    for cut in [*sorted(cuts), len(stream)]:
        frames.extend(bytes(f) for f in decoder.feed(stream[start:cut]))
        start = cut
    return frames


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=8, max_size=300), max_size=8),
    data=st.data(),
)
def test_frames_come_out_whole_however_the_stream_is_cut(
    payloads: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    decoder = FrameDecoder(max_frame_bytes=1000)
    assert feed_in_pieces(decoder, stream, cuts) == payloads
    assert decoder.buffered == 0


def test_several_frames_in_one_chunk_are_returned_as_views_of_it() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    frames = decoder.feed(encode_frame(b"a" * 8) + encode_frame(b"b" * 9) + b"\x00\x00")
    assert [bytes(f) for f in frames] == [b"a" * 8, b"b" * 9]
    assert all(f.readonly for f in frames)
    assert decoder.buffered == 2


def test_large_frame_in_small_chunks_is_assembled_once() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = encode_frame(payload)
    decoder = FrameDecoder(max_frame_bytes=2 << 20)
    chunk = 65536
    frames = []
    for start in range(0, len(stream), chunk):
        frames.extend(decoder.feed(stream[start : start + chunk]))
    assert len(frames) == 1
    assert frames[0].readonly
    assert frames[0] == payload


def test_length_prefix_split_across_three_feeds() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    stream = encode_frame(b"x" * 10)
    assert decoder.feed(stream[:1]) == []
    assert decoder.feed(stream[1:3]) == []
    assert decoder.feed(stream[3:5]) == []
    assert [bytes(f) for f in decoder.feed(stream[5:])] == [b"x" * 10]


def test_oversized_frame_is_refused_before_its_body_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameTooLargeError):
        decoder.feed((101).to_bytes(4, "big"))


@pytest.mark.parametrize("length", [0, 7, -1, -(2**31)])
def test_tiny_or_negative_frame_is_invalid(length: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(InvalidFrameError) as info:
        decoder.feed(length.to_bytes(4, "big", signed=True) + bytes(8))
    assert not isinstance(info.value, FrameTooLargeError)


def test_client_side_decoder_accepts_short_response_frames() -> None:
    decoder = FrameDecoder(max_frame_bytes=100, min_frame_bytes=4)
    assert [bytes(f) for f in decoder.feed(encode_frame(b"\x00\x00\x00\x01\x00\x00"))] == [
        b"\x00\x00\x00\x01\x00\x00"
    ]


def test_a_reused_receive_buffer_does_not_corrupt_returned_frames() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    buf = bytearray(encode_frame(b"y" * 8))
    (frame,) = decoder.feed(buf)
    buf[:] = bytes(len(buf))
    assert frame == b"y" * 8
