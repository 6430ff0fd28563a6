"""Kafka's wire primitives for the hand-written codecs (headers, Fetch, Produce).

Hand-written rather than taken from kio because the hot paths need to read
straight from a ``memoryview`` at an offset and to write into one list of
fragments, without an entity object per field. Readers take ``(buf, pos)``
and return ``(value, new_pos)``; writers return ``bytes``.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from headwater.protocol.fetch_types import ZERO_UUID

Buffer = bytes | bytearray | memoryview

INT8: Final = struct.Struct(">b")
INT16: Final = struct.Struct(">h")
INT32: Final = struct.Struct(">i")
INT64: Final = struct.Struct(">q")

# uvarint(n) for small n, precomputed: array lengths and empty tag sections are
# almost always below 128 and are written once per partition.
_SMALL_UVARINTS: Final = tuple(bytes((n,)) for n in range(128))
EMPTY_TAGS: Final = b"\x00"


def write_uvarint(value: int) -> bytes:
    if value < 128:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    value = byte & 0x7F
    shift = 7
    while True:
        pos += 1
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 63:
            raise ValueError("varint is too long")


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """Skip a tagged-field section (KIP-482), known or not: each tag carries its size."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise ValueError("tagged field runs past the end of the buffer")
    return pos


def read_tagged_fields(buf: Buffer, pos: int) -> tuple[dict[int, memoryview], int]:
    """A tagged-field section as {tag: raw value}, for the few tags a codec reads."""
    view = memoryview(buf)
    count, pos = read_uvarint(buf, pos)
    tags: dict[int, memoryview] = {}
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise ValueError("tagged field runs past the end of the buffer")
        tags[tag] = view[pos : pos + size]
        pos += size
    return tags, pos


def read_array_length(buf: Buffer, pos: int, compact: bool) -> tuple[int, int]:
    """An array length; -1 means null (compact arrays store length + 1)."""
    if compact:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return INT32.unpack_from(buf, pos)[0], pos + 4


def write_array_length(length: int, compact: bool) -> bytes:
    """``length`` -1 writes a null array."""
    return write_uvarint(length + 1) if compact else INT32.pack(length)


def read_string(buf: Buffer, pos: int, compact: bool) -> tuple[str | None, int]:
    if compact:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        n = INT16.unpack_from(buf, pos)[0]
        pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ValueError("string runs past the end of the buffer")
    return str(buf[pos:end], "utf-8"), end


def write_string(value: str | None, compact: bool) -> bytes:
    if value is None:
        return b"\x00" if compact else b"\xff\xff"
    data = value.encode()
    if compact:
        return write_uvarint(len(data) + 1) + data
    return INT16.pack(len(data)) + data


def read_bytes_view(buf: Buffer, pos: int, compact: bool) -> tuple[memoryview | None, int]:
    """Nullable bytes as a view into ``buf`` (no copy)."""
    if compact:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        n = INT32.unpack_from(buf, pos)[0]
        pos += 4
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ValueError("bytes run past the end of the buffer")
    return memoryview(buf)[pos:end], end


def write_bytes_length(length: int, compact: bool) -> bytes:
    """The length prefix of a nullable bytes field; -1 writes null."""
    return write_uvarint(length + 1) if compact else INT32.pack(length)


def read_uuid(buf: Buffer, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise ValueError("uuid runs past the end of the buffer")
    raw = bytes(buf[pos:end])
    return (ZERO_UUID if raw == bytes(16) else uuid.UUID(bytes=raw)), end
