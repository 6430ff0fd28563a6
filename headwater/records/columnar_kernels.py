"""The compiled loops of the columnar codec: records <-> offsets+data buffers.

Why numba (measured on this project's 2-core machine, see
docs/benchmarks.md "Columnar fast path"): RecordBatch v2 records are
sequences of varints, so decoding is an inherently sequential byte loop
that no vectorised numpy/pyarrow call expresses. The choices were

* **numba** (``njit(cache=True)``): manylinux wheels for CPython 3.10-3.13,
  no compiler on the user's machine; ~40-60x the pure-Python decoder. The
  first call in a fresh process compiles (~2-4 s); ``cache=True`` writes
  the machine code next to this module (or numba's user cache dir when
  site-packages is read-only), after which a fresh process (a new Spark
  Python worker) loads it in a fraction of a second;
* Cython / a C extension: as fast, but a compiler at install time (or a
  wheel matrix of our own), and still a pure-Python fallback to test;
* pure Python (``headwater.records.record``): the reference, ~5 µs/record.

Numba does no bounds checking by default, and this code reads bytes that
came off the network: **every** read of ``data`` is preceded by an explicit
check against the end of its batch, every write against the capacity of
its output, and a failure returns a status code (never raises inside
compiled code) that the Python side turns into ``CorruptRecordError``.

Varints follow ``headwater.records.record.decode_varint``: at most ten
bytes, and a tenth byte may carry only the 64th bit. Negative key, value
and header-value lengths mean null (as Kafka's Java client reads them); a
negative header-key length or header count is corrupt.

When numba cannot be imported these functions are plain Python (the
decorator becomes the identity); ``headwater.records.columnar`` then uses
the pure-Python reference decoder instead, so nothing here is slow-pathed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:  # pragma: no branch - numba is a pinned dependency; see the module docstring
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    HAVE_NUMBA = False

    def njit(*args: Any, **kwargs: Any) -> Any:  # type: ignore[no-redef]
        def wrap(fn: Any) -> Any:
            return fn

        return wrap


from headwater.records.columnar_status import (
    CAPACITY,
    N_STATS,
    NEGATIVE_HEADER_COUNT,
    NEGATIVE_HEADER_KEY,
    OK,
    RECORD_LENGTH,
    S_BATCH,
    S_HEADERS,
    S_HKEY_BYTES,
    S_HVALUE_BYTES,
    S_HVALUE_NULLS,
    S_KEY_BYTES,
    S_KEY_NULLS,
    S_POS,
    S_RECORDS,
    S_STATUS,
    S_VALUE_BYTES,
    S_VALUE_NULLS,
    TRAILING_BYTES,
    TRUNCATED,
    VARINT_TOO_LONG,
)

_LOW63 = 0x7FFF_FFFF_FFFF_FFFF


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
def _varint(data: Any, pos: int, end: int) -> tuple[Any, int]:
    """(value, next position); next position -1 = truncated, -2 = too long."""
    if pos >= end:
        return 0, -1
    b = np.int64(data[pos])
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    z = b & 0x7F
    shift = 7
    while True:
        if pos >= end:
            return 0, -1
        b = np.int64(data[pos])
        pos += 1
        if shift == 63 and (b & 0x7F) > 1:
            return 0, -2
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return ((z >> 1) & _LOW63) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            return 0, -2


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
def decode_records(
    data: Any,
    batch_start: Any,
    batch_end: Any,
    batch_count: Any,
    base_offset: Any,
    base_timestamp: Any,
    log_append_time: Any,
    max_timestamp: Any,
    timestamp_type: Any,
    with_headers: bool,
) -> tuple[Any, ...]:
    """Decode the records of every batch in ``data`` (decompressed bodies, back to back).

    ``batch_start[b]:batch_end[b]`` is batch ``b``'s record bytes. Returns
    the output arrays and a stats array (status first: non-zero = corrupt,
    with the batch index and byte position where decoding stopped).
    """
    nb = batch_start.shape[0]
    n = 0
    for b in range(nb):
        n += batch_count[b]
    size = data.shape[0]
    stats = np.zeros(N_STATS, np.int64)
    offsets = np.empty(n, np.int64)
    timestamps = np.empty(n, np.int64)
    ts_types = np.empty(n, np.int32)
    key_off = np.empty(n + 1, np.int32)
    key_data = np.empty(size, np.uint8)
    key_valid = np.zeros((n + 7) // 8, np.uint8)
    val_off = np.empty(n + 1, np.int32)
    val_data = np.empty(size, np.uint8)
    val_valid = np.zeros((n + 7) // 8, np.uint8)
    hcap = size // 2 + 1 if with_headers else 0
    hlist_off = np.empty(n + 1 if with_headers else 0, np.int32)
    hk_off = np.empty(hcap + 1, np.int32)
    hk_data = np.empty(size if with_headers else 0, np.uint8)
    hv_off = np.empty(hcap + 1, np.int32)
    hv_data = np.empty(size if with_headers else 0, np.uint8)
    hv_valid = np.zeros((hcap + 7) // 8, np.uint8)
    key_off[0] = 0
    val_off[0] = 0
    hk_off[0] = 0
    hv_off[0] = 0
    if with_headers:
        hlist_off[0] = 0
    kp = 0
    vp = 0
    hkp = 0
    hvp = 0
    m = 0
    knull = 0
    vnull = 0
    hvnull = 0
    i = 0
    status = OK
    b = 0
    pos = 0
    for b in range(nb):
        pos = batch_start[b]
        end = batch_end[b]
        for _r in range(batch_count[b]):
            length, pos = _varint(data, pos, end)
            if pos < 0:
                status = TRUNCATED if pos == -1 else VARINT_TOO_LONG
                break
            record_end = pos + length
            if pos >= end:
                status = TRUNCATED
                break
            pos += 1  # attributes: unused in v2
            ts_delta, pos = _varint(data, pos, end)
            if pos < 0:
                status = TRUNCATED if pos == -1 else VARINT_TOO_LONG
                break
            offset_delta, pos = _varint(data, pos, end)
            if pos < 0:
                status = TRUNCATED if pos == -1 else VARINT_TOO_LONG
                break
            klen, pos = _varint(data, pos, end)
            if pos < 0:
                status = TRUNCATED if pos == -1 else VARINT_TOO_LONG
                break
            if klen >= 0:
                if klen > end - pos:
                    status = TRUNCATED
                    break
                key_data[kp : kp + klen] = data[pos : pos + klen]
                kp += klen
                pos += klen
                key_valid[i >> 3] |= np.uint8(1 << (i & 7))
            else:
                knull += 1
            key_off[i + 1] = kp
            vlen, pos = _varint(data, pos, end)
            if pos < 0:
                status = TRUNCATED if pos == -1 else VARINT_TOO_LONG
                break
            if vlen >= 0:
                if vlen > end - pos:
                    status = TRUNCATED
                    break
                val_data[vp : vp + vlen] = data[pos : pos + vlen]
                vp += vlen
                pos += vlen
                val_valid[i >> 3] |= np.uint8(1 << (i & 7))
            else:
                vnull += 1
            val_off[i + 1] = vp
            hcount, pos = _varint(data, pos, end)
            if pos < 0:
                status = TRUNCATED if pos == -1 else VARINT_TOO_LONG
                break
            if hcount < 0:
                status = NEGATIVE_HEADER_COUNT
                break
            for _h in range(hcount):
                nlen, pos = _varint(data, pos, end)
                if pos < 0:
                    status = TRUNCATED if pos == -1 else VARINT_TOO_LONG
                    break
                if nlen < 0:
                    status = NEGATIVE_HEADER_KEY
                    break
                if nlen > end - pos:
                    status = TRUNCATED
                    break
                if with_headers:
                    if m >= hcap:
                        status = CAPACITY
                        break
                    hk_data[hkp : hkp + nlen] = data[pos : pos + nlen]
                    hkp += nlen
                    hk_off[m + 1] = hkp
                pos += nlen
                hvlen, pos = _varint(data, pos, end)
                if pos < 0:
                    status = TRUNCATED if pos == -1 else VARINT_TOO_LONG
                    break
                if hvlen >= 0:
                    if hvlen > end - pos:
                        status = TRUNCATED
                        break
                    if with_headers:
                        hv_data[hvp : hvp + hvlen] = data[pos : pos + hvlen]
                        hvp += hvlen
                        hv_valid[m >> 3] |= np.uint8(1 << (m & 7))
                    pos += hvlen
                elif with_headers:
                    hvnull += 1
                if with_headers:
                    hv_off[m + 1] = hvp
                    m += 1
            if status != OK:
                break
            if with_headers:
                hlist_off[i + 1] = m
            if pos != record_end:
                status = RECORD_LENGTH
                break
            offsets[i] = base_offset[b] + offset_delta
            if log_append_time[b]:
                timestamps[i] = max_timestamp[b]
            else:
                timestamps[i] = base_timestamp[b] + ts_delta
            ts_types[i] = timestamp_type[b]
            i += 1
        if status != OK:
            break
        if pos != end:
            status = TRAILING_BYTES
            break
    stats[S_STATUS] = status
    stats[S_BATCH] = b
    stats[S_POS] = pos
    stats[S_KEY_BYTES] = kp
    stats[S_KEY_NULLS] = knull
    stats[S_VALUE_BYTES] = vp
    stats[S_VALUE_NULLS] = vnull
    stats[S_HEADERS] = m
    stats[S_HKEY_BYTES] = hkp
    stats[S_HVALUE_BYTES] = hvp
    stats[S_HVALUE_NULLS] = hvnull
    stats[S_RECORDS] = i
    return (
        stats,
        offsets,
        timestamps,
        ts_types,
        key_off,
        key_data,
        key_valid,
        val_off,
        val_data,
        val_valid,
        hlist_off,
        hk_off,
        hk_data,
        hv_off,
        hv_data,
        hv_valid,
    )


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
def _put_varint(out: Any, pos: int, value: int) -> int:
    z = (value << 1) ^ (value >> 63)
    while (z & ~0x7F) != 0:
        out[pos] = np.uint8((z & 0x7F) | 0x80)
        pos += 1
        z = (z >> 7) & (_LOW63 >> 6)
    out[pos] = np.uint8(z)
    return pos + 1


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
def _varint_size(value: int) -> int:
    z = (value << 1) ^ (value >> 63)
    size = 1
    while (z & ~0x7F) != 0:
        size += 1
        z = (z >> 7) & (_LOW63 >> 6)
    return size


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
def encode_records(
    start: int,
    stop: int,
    timestamps: Any,
    base_timestamp: int,
    key_off: Any,
    key_data: Any,
    key_valid: Any,
    key_has_nulls: bool,
    val_off: Any,
    val_data: Any,
    val_valid: Any,
    val_has_nulls: bool,
) -> Any:
    """The record bytes (uncompressed, no headers) of rows ``start:stop``.

    Inputs are Arrow buffers as numpy views: ``*_off`` int32 offsets
    (already shifted by the array's own offset) into ``*_data``, ``*_valid``
    one bool per row (only read when ``*_has_nulls``). They come from
    validated Arrow arrays, and ``out`` is sized for the worst case (a
    record's framing is at most 32 bytes), so no write can overrun.
    """
    n = stop - start
    capacity = n * 40 + (key_off[stop] - key_off[start]) + (val_off[stop] - val_off[start])
    out = np.empty(capacity, np.uint8)
    pos = 0
    for j in range(n):
        i = start + j
        ts_delta = timestamps[i] - base_timestamp
        key_null = key_has_nulls and not key_valid[i]
        val_null = val_has_nulls and not val_valid[i]
        klen = -1 if key_null else key_off[i + 1] - key_off[i]
        vlen = -1 if val_null else val_off[i + 1] - val_off[i]
        body = (
            1
            + _varint_size(ts_delta)
            + _varint_size(j)
            + _varint_size(klen)
            + max(klen, 0)
            + _varint_size(vlen)
            + max(vlen, 0)
            + 1
        )
        pos = _put_varint(out, pos, body)
        out[pos] = 0  # attributes
        pos += 1
        pos = _put_varint(out, pos, ts_delta)
        pos = _put_varint(out, pos, j)
        pos = _put_varint(out, pos, klen)
        if klen > 0:
            k0 = key_off[i]
            out[pos : pos + klen] = key_data[k0 : k0 + klen]
            pos += klen
        pos = _put_varint(out, pos, vlen)
        if vlen > 0:
            v0 = val_off[i]
            out[pos : pos + vlen] = val_data[v0 : v0 + vlen]
            pos += vlen
        out[pos] = 0  # no headers
        pos += 1
    return out[:pos]


_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
def key_partitions(key_off: Any, key_data: Any, n: int, num_partitions: int) -> Any:
    """Kafka's default partition of each key (murmur2, as ``client.partitioner``)."""
    out = np.empty(n, np.int32)
    for i in range(n):
        start = key_off[i]
        length = key_off[i + 1] - start
        h = (0x9747B28C ^ length) & _MASK32
        tail = length & ~3
        for j in range(0, tail, 4):
            a = start + j
            kk = (
                np.int64(key_data[a])
                | (np.int64(key_data[a + 1]) << 8)
                | (np.int64(key_data[a + 2]) << 16)
                | (np.int64(key_data[a + 3]) << 24)
            )
            kk = (kk * _M) & _MASK32
            kk ^= kk >> 24
            kk = (kk * _M) & _MASK32
            h = (h * _M) & _MASK32
            h ^= kk
        rest = length & 3
        if rest == 3:
            h ^= np.int64(key_data[start + tail + 2]) << 16
        if rest >= 2:
            h ^= np.int64(key_data[start + tail + 1]) << 8
        if rest >= 1:
            h ^= np.int64(key_data[start + tail])
            h = (h * _M) & _MASK32
        h ^= h >> 13
        h = (h * _M) & _MASK32
        h ^= h >> 15
        out[i] = (h & 0x7FFFFFFF) % num_partitions
    return out
