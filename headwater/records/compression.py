"""The four Kafka batch codecs, as the real clients write them.

gzip comes from the standard library; snappy, LZ4 and zstd from ``cramjam``
(one Rust wheel for all three, also what aiokafka uses). Only the snappy
*framing* is ours: Kafka's Java and kafka-python producers wrap raw snappy
blocks in the xerial "snappy-java" stream format, which no library here
writes, while librdkafka writes plain raw snappy. We read both and write
xerial, which every client can read.
"""

from __future__ import annotations

import enum
import gzip
import struct

import cramjam

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


def decompress(codec: Compression | int, data: bytes | bytearray | memoryview) -> bytes:
    """Undo :func:`compress`, or what any real Kafka client wrote.

    Any codec failure is a :class:`CorruptRecordError`: to the broker and the
    consumer a batch that does not inflate is simply corrupt, whichever of
    gzip's, cramjam's or our framing errors caught it.
    """
    try:
        codec = Compression(codec)
    except ValueError as exc:
        raise CorruptRecordError(f"unknown compression codec {codec}") from exc
    try:
        return _decompress(codec, data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # the codecs raise unrelated types (OSError, zlib.error, ...)
        raise CorruptRecordError(f"{codec.name} payload does not decompress: {exc}") from exc


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


def _xerial_snappy_decompress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    pos = len(_XERIAL_HEADER)
    parts: list[bytes] = []
    while pos < len(view):
        if len(view) - pos < _BLOCK_LENGTH.size:
            raise CorruptRecordError(f"truncated xerial snappy block length at {pos}")
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError(f"xerial snappy block at {pos} overruns the stream")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)
