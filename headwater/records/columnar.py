"""RecordBatch v2 bytes straight into Arrow columns: no Python object per record.

``decode_columns`` takes the bytes of one or many batches (a fetch
response's record set) and returns one ``pyarrow.RecordBatch`` with the
columns ``offset`` (int64), ``timestamp`` (int64, ms), ``timestampType``
(int32), ``key`` and ``value`` (binary) and, only when asked,
``headers`` (list<struct<key: string, value: binary>>).

Per batch, Python does what is already C underneath: the header (struct),
the CRC (crc32c) and decompression (cramjam, into one arena with a size
limit so a decompression bomb stops early). One compiled call then walks
every record of every batch (``columnar_kernels``) and fills offsets+data
buffers that become Arrow arrays without a copy.

Control batches are skipped; callers that must filter aborted
transactions pass the batch headers they want (``batches=``). Without
numba the pure-Python reference decoder fills the same columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa

from headwater.records import columnar_status as k
from headwater.records.batch import (
    HEADER_SIZE,
    MAGIC_V2,
    BatchHeader,
    Buffer,
    batch_crc_is_valid,
    iter_batch_headers,
)
from headwater.records.columnar_support import kernels, readonly
from headwater.records.compression import Compression, decompress_into
from headwater.records.errors import CorruptRecordError
from headwater.records.record import decode_records

DEFAULT_MAX_BATCH_BYTES: Final = 64 * 1024 * 1024
"""Largest decompressed batch accepted: a bigger one is a bomb, not data."""

MIN_RECORD_BYTES: Final = 7  # length, attributes, ts, offset, key, value, header count
MAX_COLUMN_BYTES: Final = 2**31 - 1  # Arrow ``binary`` has int32 offsets

HEADER_TYPE: Final = pa.list_(
    pa.field(
        "element",
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]),
    )
)


def column_schema(include_headers: bool = False) -> pa.Schema:
    fields = [
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.int64()),
        pa.field("timestampType", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


_SCHEMAS = {False: column_schema(False), True: column_schema(True)}

_MESSAGES = {
    k.TRUNCATED: "ends inside a record (a length or varint runs past the batch)",
    k.VARINT_TOO_LONG: "has a varint longer than 10 bytes or past 64 bits",
    k.RECORD_LENGTH: "has a record whose fields do not span its declared length",
    k.TRAILING_BYTES: "has bytes after its last record",
    k.NEGATIVE_HEADER_KEY: "has a header with a negative key length",
    k.NEGATIVE_HEADER_COUNT: "has a record with a negative header count",
    k.CAPACITY: "has more headers than its bytes can hold",
}


def warm_up() -> None:
    """Compile (first time on a machine) or load (from numba's cache) every kernel now.

    A deployment can run ``python -c "import headwater.records.columnar as c;
    c.warm_up()"`` once so that no Spark worker pays the JIT compile (seconds)
    on its first batch; later processes load the cached code in about 1 s.
    """
    from headwater.records.columnar_encode import encode_batches, key_partitions
    from headwater.records.record import RecordBatchBuilder

    builder = RecordBatchBuilder(Compression.LZ4)
    builder.append(0, b"k", b"v", [("h", None)])
    decode_columns(builder.build(), include_headers=True)
    (encoded,) = encode_batches(pa.array([b"v"]), pa.array([b"k"]), timestamp_ms=0)
    decode_columns(encoded.build())
    key_partitions(pa.array([b"k"]), 1)


def compiled() -> bool:
    """Whether the compiled kernels are in use (numba importable)."""
    return bool(kernels().HAVE_NUMBA)


def decode_columns(
    buf: Buffer,
    *,
    check_crcs: bool = True,
    include_headers: bool = False,
    batches: Sequence[BatchHeader] | None = None,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    use_compiled: bool | None = None,
) -> pa.RecordBatch:
    """The records of the complete, non-control batches in ``buf`` as one Arrow batch.

    ``batches``: decode only these (headers from ``iter_batch_headers`` on
    the same ``buf``), e.g. without aborted transactions. A partial batch at
    the end of ``buf`` is skipped, as ``decode_batches`` does.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if batches is None:
        batches = [h for h in iter_batch_headers(view) if not h.is_control]
    for h in batches:
        _check_batch(view, h, check_crcs)
    if use_compiled is None:
        use_compiled = compiled()
    if not use_compiled:
        return _decode_pure(view, batches, include_headers, max_batch_bytes)
    return _decode_compiled(view, batches, include_headers, max_batch_bytes)


def _check_batch(view: memoryview, h: BatchHeader, check_crcs: bool) -> None:
    if h.magic != MAGIC_V2:
        raise CorruptRecordError(
            f"batch at position {h.position} has magic {h.magic}; only v2 is supported"
        )
    if check_crcs and not batch_crc_is_valid(view, h):
        raise CorruptRecordError(f"batch at offset {h.base_offset} fails its CRC-32C check")


# -- compiled path -----------------------------------------------------------------


class _Inflater:
    """Decompressed batch bodies back to back in one growing uint8 arena.

    Each codec writes straight into the arena with exactly ``limit`` bytes
    of room (cramjam's ``decompress_into`` fails as soon as its output is
    full), so a bomb stops at the limit instead of allocating whatever it
    claims. Room that is never written costs no memory: untouched pages of
    a large ``np.empty`` are never faulted in.
    """

    def __init__(self, estimate: int, limit: int) -> None:
        self.arena = np.empty(estimate + limit, np.uint8)
        self.used = 0
        self.limit = limit

    def room(self, n: int) -> Any:
        if self.used + n > self.arena.shape[0]:
            grown = np.empty(self.arena.shape[0] * 2 + n, np.uint8)
            grown[: self.used] = self.arena[: self.used]
            self.arena = grown
        return self.arena[self.used : self.used + n]

    def inflate(self, h: BatchHeader, body: memoryview) -> int:
        """Append the batch's decompressed records; the number of bytes added."""
        codec = h.compression
        if codec == Compression.NONE:
            self.room(len(body))[:] = np.frombuffer(body, np.uint8)
            n = len(body)
        else:
            try:
                n = decompress_into(codec, body, self.room(self.limit + 1))
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"batch at offset {h.base_offset}: {exc}") from exc
        self.used += n
        return n


def _decode_compiled(
    view: memoryview, batches: Sequence[BatchHeader], include_headers: bool, limit: int
) -> pa.RecordBatch:
    nb = len(batches)
    starts = np.empty(nb, np.int64)
    ends = np.empty(nb, np.int64)
    counts = np.empty(nb, np.int64)
    if all(h.compression == Compression.NONE for h in batches):
        # Nothing to inflate: the kernel reads the fetch buffer in place.
        data = np.frombuffer(view, np.uint8)
        for b, h in enumerate(batches):
            starts[b] = h.position + HEADER_SIZE
            ends[b] = h.position + h.size
            counts[b] = _record_count(h, h.size - HEADER_SIZE)
    else:
        inflater = _Inflater(4 * sum(h.size for h in batches), limit)
        for b, h in enumerate(batches):
            body = view[h.position + HEADER_SIZE : h.position + h.size]
            starts[b] = inflater.used
            written = inflater.inflate(h, body)
            ends[b] = inflater.used
            counts[b] = _record_count(h, written)
        data = inflater.arena[: inflater.used]
    if data.shape[0] > MAX_COLUMN_BYTES:
        raise CorruptRecordError(
            f"{data.shape[0]} bytes of records in one fetch: more than one Arrow column holds; "
            "lower fetch.max.bytes"
        )
    attrs = [(h.base_offset, h.base_timestamp, h.timestamp_type, h.max_timestamp) for h in batches]
    table = np.array(attrs, np.int64).reshape(nb, 4)
    out = kernels().decode_records(
        readonly(data),
        starts,
        ends,
        counts,
        np.ascontiguousarray(table[:, 0]),
        np.ascontiguousarray(table[:, 1]),
        np.ascontiguousarray(table[:, 2]).astype(np.bool_),
        np.ascontiguousarray(table[:, 3]),
        np.ascontiguousarray(table[:, 2]).astype(np.int32),
        include_headers,
    )
    stats = out[0]
    status = int(stats[k.S_STATUS])
    if status != k.OK:
        h = batches[int(stats[k.S_BATCH])]
        raise CorruptRecordError(f"batch at offset {h.base_offset} {_MESSAGES[status]}")
    (_, offsets, timestamps, ts_types, key_off, key_data, key_valid) = out[:7]
    (val_off, val_data, val_valid, hlist_off, hk_off, hk_data, hv_off, hv_data, hv_valid) = out[7:]
    n = int(stats[k.S_RECORDS])
    columns = [
        pa.array(offsets),
        pa.array(timestamps),
        pa.array(ts_types),
        _binary(n, key_off, key_data[: stats[k.S_KEY_BYTES]], key_valid, stats[k.S_KEY_NULLS]),
        _binary(n, val_off, val_data[: stats[k.S_VALUE_BYTES]], val_valid, stats[k.S_VALUE_NULLS]),
    ]
    if include_headers:
        m = int(stats[k.S_HEADERS])
        names = pa.Array.from_buffers(
            pa.string(), m, [None, pa.py_buffer(hk_off[: m + 1]), pa.py_buffer(hk_data)]
        )
        try:
            names.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise CorruptRecordError(f"a record header key is not UTF-8: {exc}") from exc
        values = _binary(m, hv_off[: m + 1], hv_data, hv_valid, stats[k.S_HVALUE_NULLS])
        structs = pa.StructArray.from_arrays([names, values], fields=list(HEADER_TYPE.value_type))
        columns.append(pa.ListArray.from_arrays(pa.array(hlist_off), structs, type=HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=_SCHEMAS[include_headers])


def _record_count(h: BatchHeader, size: int) -> int:
    """The header's record count, refused when the bytes cannot hold that many."""
    count = max(h.record_count, 0)
    if count * MIN_RECORD_BYTES > size:
        raise CorruptRecordError(
            f"batch at offset {h.base_offset} claims {h.record_count} records in {size} bytes"
        )
    return count


def _binary(n: int, offsets: Any, data: Any, valid: Any, nulls: Any) -> pa.Array:
    validity = pa.py_buffer(valid) if nulls else None
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=int(nulls),
    )


# -- pure-Python fallback (and the reference in tests) -------------------------------


def _decode_pure(
    view: memoryview, batches: Sequence[BatchHeader], include_headers: bool, limit: int
) -> pa.RecordBatch:
    from headwater.records.compression import decompress

    offsets: list[int] = []
    timestamps: list[int] = []
    ts_types: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[dict[str, Any]]] = []
    for h in batches:
        body = view[h.position + HEADER_SIZE : h.position + h.size]
        data = decompress(h.compression, body) if h.compression else body.tobytes()
        if len(data) > limit:
            raise CorruptRecordError(
                f"batch at offset {h.base_offset} inflates to {len(data)} bytes, "
                f"over the limit of {limit}"
            )
        for r in decode_records(data, h):
            offsets.append(r.offset)
            timestamps.append(r.timestamp)
            ts_types.append(h.timestamp_type)
            keys.append(r.key)
            values.append(r.value)
            if include_headers:
                headers.append([{"key": hk, "value": hv} for hk, hv in r.headers])
    columns = [
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.int64()),
        pa.array(ts_types, pa.int32()),
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
    ]
    if include_headers:
        columns.append(pa.array(headers, HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=_SCHEMAS[include_headers])
