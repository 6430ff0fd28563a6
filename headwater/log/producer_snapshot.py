"""Producer-state snapshots: ``<offset>.snapshot`` files (Kafka's ProducerSnapshot v1).

A snapshot is the producer table as it was at ``offset`` (the log end when
it was taken). Loading the latest one and replaying only the batches after
it rebuilds the table, including transactions that opened long before; the
log writes one when it rolls a segment and when it closes.

The format is Kafka's: ``version int16 (1), crc uint32`` (CRC-32C of
everything after it), then an int32 count of 46-byte entries
``producerId int64, epoch int16, lastSequence int32, lastOffset int64,
offsetDelta int32, timestamp int64, coordinatorEpoch int32,
currentTxnFirstOffset int64``. Kafka stores one entry per producer (its
last batch). Headwater keeps its last five batches for retries, so it
writes one entry per cached batch, oldest first: Kafka reading the file
keeps the last entry per producer, which is exactly its own content.

Snapshots are not fsynced: they are taken only at offsets whose data is
already flushed, a torn or stale file fails its CRC and is skipped, and
the log then replays from an older snapshot.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import crc32c

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_CRC_START = 6  # the CRC covers everything after version and itself
_ENTRY = struct.Struct(">qhiqiqiq")


class SnapshotEntry(NamedTuple):
    """One cached batch of one producer, with the producer's transaction state."""

    producer_id: int
    epoch: int
    last_sequence: int  # -1 with last_offset -1: a producer known without a data batch
    last_offset: int
    offset_delta: int  # last sequence - first sequence of the batch
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no open transaction


class CorruptSnapshotError(ValueError):
    """A snapshot file that is torn, of an unknown version, or fails its CRC."""


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(names: Iterable[str]) -> list[int]:
    """The offsets of the snapshot files among directory entry ``names``, ascending."""
    return sorted(
        int(name[:20])
        for name in names
        if name.endswith(SNAPSHOT_SUFFIX)
        and len(name) == 20 + len(SNAPSHOT_SUFFIX)
        and name[:20].isdigit()
    )


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    rows = list(entries)
    buf = bytearray(_HEAD.size + _ENTRY.size * len(rows))
    _HEAD.pack_into(buf, 0, VERSION, 0, len(rows))
    pos = _HEAD.size
    for row in rows:
        _ENTRY.pack_into(buf, pos, *row)
        pos += _ENTRY.size
    struct.pack_into(">I", buf, 2, crc32c.crc32c(memoryview(buf)[_CRC_START:]))
    return bytes(buf)


def decode_snapshot(data: bytes) -> Iterator[SnapshotEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"a snapshot of {len(data)} bytes is torn")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptSnapshotError(f"snapshot version {version} is not {VERSION}")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    if crc32c.crc32c(memoryview(data)[_CRC_START:]) != crc:
        raise CorruptSnapshotError("snapshot fails its CRC-32C check")
    for pos in range(_HEAD.size, len(data), _ENTRY.size):
        yield SnapshotEntry._make(_ENTRY.unpack_from(data, pos))


def write_snapshot(directory: str, offset: int, entries: Iterable[SnapshotEntry]) -> None:
    """Write ``<offset>.snapshot`` atomically (temp file + rename, no fsync: see the module)."""
    path = os.path.join(directory, snapshot_file_name(offset))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(encode_snapshot(entries))
    os.replace(tmp, path)


def read_snapshot(directory: str, offset: int) -> list[SnapshotEntry]:
    """The entries of ``<offset>.snapshot``; raises CorruptSnapshotError or OSError."""
    with open(os.path.join(directory, snapshot_file_name(offset)), "rb") as f:
        return list(decode_snapshot(f.read()))


def delete_snapshot(directory: str, offset: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, snapshot_file_name(offset)))
