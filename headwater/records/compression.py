"""The four Kafka batch codecs, as the real clients write them.

gzip comes from the standard library; snappy, LZ4 and zstd from ``cramjam``
(one Rust wheel for all three, also what aiokafka uses). Only the snappy
*framing* is ours: Kafka's Java and kafka-python producers wrap raw snappy
blocks in the xerial "snappy-java" stream format, which no library here
writes, while librdkafka writes plain raw snappy. We read both and write
xerial, which every client can read.

Decompression bombs: :func:`decompress_into` and :func:`decompress` with a
``limit`` never produce more than the limit. Every codec writes straight
into a fixed output buffer (cramjam's ``*_into`` functions stop with an
error as soon as it is full; raw snappy checks its declared length first),
so a 1 KiB zstd frame that claims 1 GiB is refused after at most ``limit``
bytes of output, instead of being inflated whole and measured afterwards.
The buffer is a ``numpy.empty`` array: pages that are never written are
never faulted in, so a large limit costs address space, not memory.
"""

from __future__ import annotations

import enum
import gzip
import struct
from collections.abc import Iterator
from typing import Any

import cramjam
import numpy as np

from headwater.records.errors import CorruptRecordError


class Compression(enum.IntEnum):
    """Bits 0-2 of a v2 batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# xerial framing: 8 magic bytes, version i32, compatible-version i32, then
# blocks of [i32 compressed length][raw snappy of up to 32 KiB of input].
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_SIZE = 32 * 1024  # what snappy-java uses
_BLOCK_LENGTH = struct.Struct(">i")

GZIP_LEVEL = 6  # java.util.zip.Deflater's default, which Kafka's producer uses
ZSTD_LEVEL = 3  # Kafka's default compression.zstd.level


def compress(codec: Compression | int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a batch's record bytes with ``codec``."""
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if codec is Compression.SNAPPY:
        return _xerial_snappy_compress(data)
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))


def decompress(
    codec: Compression | int, data: bytes | bytearray | memoryview, limit: int | None = None
) -> bytes:
    """Undo :func:`compress`, or what any real Kafka client wrote.

    Any codec failure is a :class:`CorruptRecordError`: to the broker and the
    consumer a batch that does not inflate is simply corrupt, whichever of
    gzip's, cramjam's or our framing errors caught it. With ``limit``, a
    payload that inflates to more than ``limit`` bytes is refused as soon as
    its output passes the limit (see the module docstring).
    """
    codec = _codec(codec)
    if limit is None:
        try:
            return _decompress(codec, data)
        except CorruptRecordError:
            raise
        except Exception as exc:  # the codecs raise unrelated types (OSError, zlib.error, ...)
            raise CorruptRecordError(f"{codec.name} payload does not decompress: {exc}") from exc
    return bytes(decompress_bounded(codec, data, limit))


_FIRST_TRY_RATIO = 8
_FIRST_TRY_EXTRA = 64 * 1024


def decompress_bounded(
    codec: Compression | int, data: bytes | bytearray | memoryview, limit: int
) -> memoryview:
    """The inflated bytes of ``data``, refused once they pass ``limit``.

    First into room for a typical ratio (8x): touching fresh pages of a
    limit-sized buffer costs more than the decompression of a small batch.
    Only a payload that does not fit (or does not inflate at all) is tried
    again with the full ``limit`` of room.
    """
    first = min(limit, _FIRST_TRY_RATIO * len(data) + _FIRST_TRY_EXTRA)
    if first < limit:
        out = np.empty(first + 1, np.uint8)
        try:
            return out[: decompress_into(codec, data, out)].data
        except CorruptRecordError:
            pass  # too little room, or corrupt: the full try below tells which
    out = np.empty(limit + 1, np.uint8)
    return out[: decompress_into(codec, data, out)].data


def decompress_into(
    codec: Compression | int, data: bytes | bytearray | memoryview, out: Any
) -> int:
    """Inflate ``data`` into the writable buffer ``out``; the number of bytes written.

    A payload that needs all of ``out`` or more is refused with
    :class:`CorruptRecordError` (pass one byte more room than the largest
    size allowed): no codec writes past ``out``, so that is all a bomb gets.
    """
    codec = _codec(codec)
    room = len(out)
    try:
        n = _decompress_into(codec, memoryview(data), out)
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam.DecompressionError, also when ``out`` is full
        raise CorruptRecordError(
            f"{codec.name} payload does not decompress within the limit of {room - 1} bytes: {exc}"
        ) from exc
    if n >= room:
        raise CorruptRecordError(
            f"{codec.name} payload inflates past the limit of {room - 1} bytes"
        )
    return n


def _codec(codec: Compression | int) -> Compression:
    try:
        return Compression(codec)
    except ValueError as exc:
        raise CorruptRecordError(f"unknown compression codec {codec}") from exc


def _decompress_into(codec: Compression, data: memoryview, out: Any) -> int:
    if codec is Compression.NONE:
        if len(data) >= len(out):
            raise CorruptRecordError(f"payload of {len(data)} bytes is over the limit")
        out[: len(data)] = data
        return len(data)
    if codec is Compression.GZIP:
        return int(cramjam.gzip.decompress_into(data, out))
    if codec is Compression.SNAPPY:
        if bytes(data[: len(_XERIAL_MAGIC)]) == _XERIAL_MAGIC:
            return _xerial_snappy_decompress_into(data, out)
        return int(cramjam.snappy.decompress_raw_into(data, out))
    if codec is Compression.LZ4:
        return int(cramjam.lz4.decompress_into(data, out))
    return int(cramjam.zstd.decompress_into(data, out))


def _decompress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes:
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return gzip.decompress(data)
    if codec is Compression.SNAPPY:
        if bytes(data[: len(_XERIAL_MAGIC)]) == _XERIAL_MAGIC:
            return _xerial_snappy_decompress(data)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.decompress(data))
    return bytes(cramjam.zstd.decompress(data))


def _xerial_snappy_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_blocks(data: bytes | bytearray | memoryview) -> Iterator[memoryview]:
    """The raw snappy blocks of an xerial stream, checked against its length."""
    view = memoryview(data)
    pos = len(_XERIAL_HEADER)
    while pos < len(view):
        if len(view) - pos < _BLOCK_LENGTH.size:
            raise CorruptRecordError(f"truncated xerial snappy block length at {pos}")
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError(f"xerial snappy block at {pos} overruns the stream")
        yield view[pos : pos + length]
        pos += length


def _xerial_snappy_decompress(data: bytes | bytearray | memoryview) -> bytes:
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in _xerial_blocks(data))


def _xerial_snappy_decompress_into(data: memoryview, out: Any) -> int:
    written = 0
    for block in _xerial_blocks(data):
        written += int(cramjam.snappy.decompress_raw_into(block, out[written:]))
    return written
