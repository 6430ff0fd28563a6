"""Arrow columns straight into RecordBatch v2 records: no Python object per row.

The producer's ``send_arrow`` and the Spark sink hand whole Arrow columns
(``key``, ``value``: binary or string) here. The rows are cut into chunks
of about ``target_bytes`` and each chunk's records are written by one
compiled call (``columnar_kernels.encode_records``) into a
``RecordBatchBuilder`` that the producer finishes like any other batch
(producer id, sequence, compression and CRC at send time). Rows with
headers take the record-by-record builder: headers are rare on this path
and keep the kernel small.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa

from headwater.records.columnar_support import kernels, readonly
from headwater.records.compression import Compression
from headwater.records.record import Header, RecordBatchBuilder

RECORD_FRAMING: Final = 32  # the most a record's varints and attributes can take


class _Column:
    """A binary column as the kernel reads it: offsets, data, validity."""

    def __init__(self, array: pa.Array | pa.ChunkedArray | None, n: int) -> None:
        if array is None:
            self.offsets = np.zeros(n + 1, np.int32)
            self.data = np.zeros(0, np.uint8)
            self.valid = np.zeros(n, np.bool_)
            self.has_nulls = True
            return
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
            array = array.cast(pa.binary())
        if not (pa.types.is_binary(array.type) or pa.types.is_string(array.type)):
            raise TypeError(f"key and value columns must be binary or string, not {array.type}")
        _, offsets, data = array.buffers()
        self.offsets = np.frombuffer(offsets, np.int32)[array.offset : array.offset + n + 1]
        self.data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        self.has_nulls = array.null_count > 0
        self.valid = (
            array.is_valid().to_numpy(zero_copy_only=False)
            if self.has_nulls
            else np.ones(0, np.bool_)
        )

    def sizes(self) -> Any:
        return np.diff(self.offsets).astype(np.int64)


def chunk_bounds(sizes: Any, target_bytes: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` row ranges of about ``target_bytes`` each (>= 1 row)."""
    n = len(sizes)
    if n == 0:
        return []
    ends = np.cumsum(sizes + RECORD_FRAMING)
    bounds = []
    start = 0
    while start < n:
        base = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, base + target_bytes, side="right"))
        stop = max(stop, start + 1)
        bounds.append((start, stop))
        start = stop
    return bounds


def encode_batches(
    values: pa.Array | pa.ChunkedArray,
    keys: pa.Array | pa.ChunkedArray | None = None,
    *,
    timestamp_ms: int,
    compression: Compression | int = Compression.NONE,
    target_bytes: int = 1 << 20,
    headers: Sequence[Sequence[Header] | None] | None = None,
) -> list[RecordBatchBuilder]:
    """Builders of the rows' records, each about ``target_bytes`` before compression."""
    n = len(values)
    value_col = _Column(values, n)
    key_col = _Column(keys, n)
    timestamps = np.full(n, timestamp_ms, np.int64)
    out = []
    for start, stop in chunk_bounds(value_col.sizes() + key_col.sizes(), target_bytes):
        builder = RecordBatchBuilder(compression)
        if headers is not None and any(headers[start:stop]):
            _append_rows(builder, value_col, key_col, headers, start, stop, timestamp_ms)
        else:
            records = kernels().encode_records(
                start,
                stop,
                readonly(timestamps),
                timestamp_ms,
                readonly(key_col.offsets),
                readonly(key_col.data),
                readonly(key_col.valid),
                key_col.has_nulls,
                readonly(value_col.offsets),
                readonly(value_col.data),
                readonly(value_col.valid),
                value_col.has_nulls,
            )
            builder.append_encoded(records, stop - start, timestamp_ms, timestamp_ms)
        out.append(builder)
    return out


def _append_rows(
    builder: RecordBatchBuilder,
    values: _Column,
    keys: _Column,
    headers: Sequence[Sequence[Header] | None],
    start: int,
    stop: int,
    timestamp_ms: int,
) -> None:
    for i in range(start, stop):
        builder.append(timestamp_ms, _row(keys, i), _row(values, i), headers[i] or ())


def _row(col: _Column, i: int) -> bytes | None:
    if col.has_nulls and not col.valid[i]:
        return None
    return col.data[col.offsets[i] : col.offsets[i + 1]].tobytes()


def key_partitions(keys: pa.Array | pa.ChunkedArray, num_partitions: int) -> Any:
    """Kafka's default partition for each (non-null) key, as an int32 numpy array."""
    col = _Column(keys, len(keys))
    return kernels().key_partitions(
        readonly(col.offsets), readonly(col.data), len(keys), num_partitions
    )
