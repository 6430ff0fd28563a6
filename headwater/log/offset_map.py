"""The cleaner's bounded key -> latest offset map and its compiled record walks.

Kafka's SkimpyOffsetMap: a fixed-size open-addressing table of key hashes
(never the keys themselves), so the cleaner's memory is exactly
``log.cleaner.dedupe.buffer.size`` whatever the keys are. Kafka stores a
16-byte MD5 per slot; here two independent 64-bit hashes of the key (16
bytes too) plus the offset make a 24-byte slot, and like Kafka the table is
filled to 90% at most. A log with more distinct keys than that is cleaned
in several passes, each up to where the map filled.

The record walks are compiled with numba (as :mod:`headwater.records.compiled_walk`):
a pure-Python walk costs microseconds per record, and the cleaner must go
through every record of the log at disk speed. They work on the records
region of one batch (after the 61-byte header, decompressed) and report a
parse failure instead of raising, so a corrupt batch costs a return code.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

SLOT_BYTES = 24  # two 64-bit key hashes + one 64-bit offset
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor

_kernels: Any = None
_lock = threading.Lock()


def _build() -> Any:
    import numba

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def varint(data: Any, pos: int, end: int) -> Any:
        z = np.uint64(0)
        shift = np.uint64(0)
        while pos < end:
            b = np.uint64(data[pos])
            pos += 1
            z |= (b & np.uint64(0x7F)) << shift
            if b < 0x80:
                return np.int64(z >> np.uint64(1)) ^ -np.int64(z & np.uint64(1)), pos
            shift += np.uint64(7)
            if shift > 63:
                return 0, -1
        return 0, -1

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def fmix(h: Any) -> Any:
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
        h *= np.uint64(0xC4CEB9FE1A85EC53)
        h ^= h >> np.uint64(33)
        return h

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def key_hash(data: Any, start: int, length: int) -> Any:
        a = np.uint64(0xCBF29CE484222325) ^ np.uint64(length)
        b = np.uint64(0x9E3779B97F4A7C15) + np.uint64(length)
        for i in range(start, start + length):
            c = np.uint64(data[i])
            a = (a ^ c) * np.uint64(0x100000001B3)
            b = ((b ^ c) * np.uint64(0xBF58476D1CE4E5B9)) ^ (b >> np.uint64(29))
        a = fmix(a)
        b = fmix(b ^ a)
        # 0 marks an empty slot: keep real hashes away from it
        if a == 0:
            a = np.uint64(1)
        return a, b

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def slot_of(h1: Any, h2: Any, k1: Any, k2: Any) -> Any:
        mask = np.uint64(k1.shape[0] - 1)
        i = h1 & mask
        step = np.uint64(1)
        while True:
            j = np.int64(i)
            if k1[j] == 0 or (k1[j] == h1 and k2[j] == h2):
                return j
            i = (i + step) & mask
            step += np.uint64(1)

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def walk_record(data: Any, pos: int, n: int) -> Any:
        """(offset delta, key start, key length, value length, record end); end -1: corrupt."""
        length, pos = varint(data, pos, n)
        if pos < 0 or length < 6 or pos + length > n:
            return 0, 0, 0, 0, -1
        end = pos + length
        pos += 1  # attributes
        _, pos = varint(data, pos, end)  # timestamp delta
        if pos < 0:
            return 0, 0, 0, 0, -1
        offset_delta, pos = varint(data, pos, end)
        if pos < 0:
            return 0, 0, 0, 0, -1
        key_length, pos = varint(data, pos, end)
        if pos < 0 or key_length < -1 or pos + max(key_length, 0) > end:
            return 0, 0, 0, 0, -1
        key_start = pos
        if key_length > 0:
            pos += key_length
        value_length, pos = varint(data, pos, end)
        if pos < 0 or value_length < -1:
            return 0, 0, 0, 0, -1
        return offset_delta, key_start, key_length, value_length, end

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def map_records(data: Any, count: int, base_offset: int, k1: Any, k2: Any, offs: Any) -> Any:
        """Put every keyed record in the map; returns (new slots used, ok)."""
        n = data.shape[0]
        pos = 0
        added = 0
        for _ in range(count):
            delta, key_start, key_length, _v, end = walk_record(data, pos, n)
            if end < 0:
                return added, False
            if key_length >= 0:
                offset = base_offset + delta
                h1, h2 = key_hash(data, key_start, key_length)
                j = slot_of(h1, h2, k1, k2)
                if k1[j] == 0:
                    k1[j] = h1
                    k2[j] = h2
                    offs[j] = offset
                    added += 1
                elif offset > offs[j]:
                    offs[j] = offset
            pos = end
        return added, pos == n

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def filter_records(
        data: Any,
        count: int,
        base_offset: int,
        k1: Any,
        k2: Any,
        offs: Any,
        latest_mapped: int,
        retain_tombstones: bool,
        out: Any,
    ) -> Any:
        """Copy the records to keep into ``out``; returns (kept, bytes, tombstones kept, ok).

        Kafka's ``shouldRetainRecord``: past the map's reach, keep; no key,
        drop; superseded by a later offset of the key, drop; a tombstone,
        keep only inside the delete horizon.
        """
        n = data.shape[0]
        pos = 0
        kept = 0
        written = 0
        tombstones = 0
        for _ in range(count):
            delta, key_start, key_length, value_length, end = walk_record(data, pos, n)
            if end < 0:
                return kept, written, tombstones, False
            offset = base_offset + delta
            keep = False
            if offset > latest_mapped:
                keep = True
            elif key_length >= 0:
                h1, h2 = key_hash(data, key_start, key_length)
                j = slot_of(h1, h2, k1, k2)
                latest = k1[j] == 0 or offset >= offs[j]
                keep = latest and (value_length >= 0 or retain_tombstones)
            if keep:
                size = end - pos
                out[written : written + size] = data[pos:end]
                written += size
                kept += 1
                if value_length < 0:
                    tombstones += 1
            pos = end
        return kept, written, tombstones, pos == n

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def first_null_key(data: Any, count: int) -> Any:
        """Index of the first record without a key; -1 for none, -2 when unparsable."""
        n = data.shape[0]
        pos = 0
        for i in range(count):
            _d, _k, key_length, _v, end = walk_record(data, pos, n)
            if end < 0:
                return -2
            if key_length < 0:
                return i
            pos = end
        return -1

    # Compile now: one record of length 8 (key 'a', value null, no headers)
    record = np.frombuffer(b"\x10\x00\x00\x00\x02a\x01\x00", dtype=np.uint8)
    k1 = np.zeros(4, np.uint64)
    k2 = np.zeros(4, np.uint64)
    offs = np.zeros(4, np.int64)
    map_records(record, 1, 0, k1, k2, offs)
    filter_records(record, 1, 0, k1, k2, offs, 0, True, np.empty(8, np.uint8))
    first_null_key(record, 1)
    return map_records, filter_records, first_null_key


def kernels() -> Any:
    """The three kernels, compiled on first use (or read from numba's cache)."""
    global _kernels
    if _kernels is None:
        with _lock:
            if _kernels is None:
                _kernels = _build()
    return _kernels


class OffsetMap:
    """Key hash -> latest offset, in a fixed ``buffer_bytes`` of memory.

    Not thread-safe: one per cleaner thread, cleared between logs.
    """

    __slots__ = ("_k1", "_k2", "_offs", "latest_offset", "max_entries", "size", "slots")

    def __init__(self, buffer_bytes: int) -> None:
        slots = 1
        while slots * 2 * SLOT_BYTES <= buffer_bytes:
            slots *= 2
        if slots < 4:
            raise ValueError(f"a dedupe buffer of {buffer_bytes} bytes holds no keys")
        self.slots = slots
        self.max_entries = int(slots * LOAD_FACTOR)
        self._k1 = np.zeros(slots, np.uint64)
        self._k2 = np.zeros(slots, np.uint64)
        self._offs = np.full(slots, -1, np.int64)
        self.size = 0
        self.latest_offset = -1  # the last offset put in the map

    @property
    def memory_bytes(self) -> int:
        return self.slots * SLOT_BYTES

    def clear(self) -> None:
        if self.size:
            self._k1.fill(0)
            self._k2.fill(0)
            self._offs.fill(-1)
        self.size = 0
        self.latest_offset = -1

    def room_for(self, records: int) -> bool:
        return self.size + records <= self.max_entries

    def put_records(self, records: Any, count: int, base_offset: int, last_offset: int) -> bool:
        """Map the keyed records of one batch (its records region); False when unparsable."""
        map_records, _, _ = kernels()
        added, ok = map_records(records, count, base_offset, self._k1, self._k2, self._offs)
        self.size += int(added)
        self.latest_offset = max(self.latest_offset, last_offset)
        return bool(ok)

    def filter_records(
        self, records: Any, count: int, base_offset: int, retain_tombstones: bool, out: Any
    ) -> tuple[int, int, int, bool]:
        """Copy the surviving records into ``out``: (kept, bytes written, tombstones, parsed ok)."""
        _, filter_records, _ = kernels()
        kept, written, tombstones, ok = filter_records(
            records,
            count,
            base_offset,
            self._k1,
            self._k2,
            self._offs,
            self.latest_offset,
            retain_tombstones,
            out,
        )
        return int(kept), int(written), int(tombstones), bool(ok)


def first_null_key(records: bytes | bytearray | memoryview, count: int) -> int:
    """Index of the first record without a key in a batch's (uncompressed) records.

    -1: every record has a key; -2: the records do not parse (validation
    already refused those). The produce path of compacted topics calls this
    on the event loop, so it is the pure walk (about a microsecond a
    record): loading the compiled one in the broker would hold the GIL for
    seconds (numba's compiler is Python), which the broker's cleaner avoids
    by compiling in its worker process only.
    """
    if _kernels is not None:  # already here (a tool, or a test): use it
        _, _, kernel = _kernels
        return int(kernel(np.frombuffer(records, dtype=np.uint8), count))
    return _first_null_key_pure(records, count)


def _varint(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    z = shift = 0
    while True:
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _first_null_key_pure(records: bytes | bytearray | memoryview, count: int) -> int:
    pos = 0
    try:
        for i in range(count):
            length, body = _varint(records, pos)
            _, p = _varint(records, body + 1)  # timestamp delta, after the attributes
            _, p = _varint(records, p)  # offset delta
            key_length, _ = _varint(records, p)
            if key_length < 0:
                return i
            pos = body + length
    except (IndexError, ValueError):
        return -2
    return -1
