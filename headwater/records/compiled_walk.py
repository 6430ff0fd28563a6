"""The record walk of :mod:`headwater.records.validation`, compiled with numba.

Why compiled: the pure-Python walk costs 2-3 us per record, which cut
produce throughput by about 90% (bench/bench_validation.py). numba ships
wheels, so no compiler is needed on a user's machine, and ``cache=True``
keeps the machine code on disk so a restarted broker does not compile
again. The broker loads it on a thread at start (:func:`load_in_background`)
and validates in pure Python until it is ready, so neither start-up nor the
event loop waits for the JIT.

The compiled walk only answers "good, with this timestamp range" or "look
closer"; then the pure walk runs again and decides, naming the record and
the reason (rare: bad batches, and header keys that are not ASCII, whose
UTF-8 the pure walk checks). One source of error messages. Without numba the pure
walk is used as is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from headwater.records.batch import Buffer

log = logging.getLogger(__name__)

# (ok, min timestamp delta, max timestamp delta)
CompiledWalk = Callable[[Buffer, int], "tuple[bool, int, int]"]

_compiled: CompiledWalk | None = None
_tried = False
_lock = threading.Lock()
_loader: threading.Thread | None = None


def _build() -> CompiledWalk:
    import numba
    import numpy as np

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def varint(data: Any, pos: int, end: int) -> Any:
        z = np.uint64(0)
        shift = np.uint64(0)
        while pos < end:
            b = np.uint64(data[pos])
            pos += 1
            z |= (b & np.uint64(0x7F)) << shift
            if b < 0x80:
                value = np.int64(z >> np.uint64(1)) ^ -np.int64(z & np.uint64(1))
                return value, pos
            shift += np.uint64(7)
            if shift > 63:
                return 0, -1
        return 0, -1

    @numba.njit(cache=True, nogil=True)  # type: ignore[untyped-decorator]
    def walk(data: Any, count: int) -> Any:
        n = data.shape[0]
        pos = 0
        lo = np.int64(9223372036854775807)
        hi = np.int64(-9223372036854775807 - 1)
        for i in range(count):
            length, pos = varint(data, pos, n)
            if pos < 0 or length < 6:
                return False, 0, 0
            end = pos + length
            if end > n:
                return False, 0, 0
            pos += 1  # attributes
            delta, pos = varint(data, pos, end)
            if pos < 0:
                return False, 0, 0
            lo = min(lo, delta)
            hi = max(hi, delta)
            offset_delta, pos = varint(data, pos, end)
            if pos < 0 or offset_delta != i:
                return False, 0, 0
            key_length, pos = varint(data, pos, end)
            if pos < 0 or key_length < -1:
                return False, 0, 0
            if key_length > 0:
                pos += key_length
            value_length, pos = varint(data, pos, end)
            if pos < 0 or value_length < -1:
                return False, 0, 0
            if value_length > 0:
                pos += value_length
            headers, pos = varint(data, pos, end)
            if pos < 0 or headers < 0:
                return False, 0, 0
            for _h in range(headers):
                header_key, pos = varint(data, pos, end)
                if pos < 0 or header_key < 0 or pos + header_key > end:
                    return False, 0, 0
                for k in range(pos, pos + header_key):
                    if data[k] >= 0x80:  # not ASCII: the pure walk checks the UTF-8
                        return False, 0, 0
                pos += header_key
                header_value, pos = varint(data, pos, end)
                if pos < 0 or header_value < -1:
                    return False, 0, 0
                if header_value > 0:
                    pos += header_value
            if pos != end:
                return False, 0, 0
        return pos == n, lo, hi

    frombuffer = np.frombuffer
    uint8 = np.uint8

    def call(data: Buffer, count: int) -> tuple[bool, int, int]:
        ok, lo, hi = walk(frombuffer(data, dtype=uint8), count)
        return bool(ok), int(lo), int(hi)

    return call


def compiled_walk(*, wait: bool = True) -> CompiledWalk | None:
    """The compiled walk; None without numba, or while it still loads when ``wait`` is False.

    Loading (compiling, or reading numba's cache) takes one to three seconds;
    the first caller that waits pays it.
    """
    global _compiled, _tried
    if _tried:
        return _compiled
    if not wait and _loader is not None:
        return None
    with _lock:
        if not _tried:
            try:
                candidate = _build()
                # Compile now: one tiny well-formed record (length 6, all-zero fields).
                candidate(b"\x0c\x00\x00\x00\x00\x00\x00", 1)
            except Exception as exc:  # ImportError, or numba failing on this platform
                log.warning("record validation runs in pure Python (no numba: %s)", exc)
            else:
                _compiled = candidate
            _tried = True
    return _compiled


def load_in_background() -> None:
    """Start loading on a thread; until it is ready, validation walks in pure Python.

    The broker calls this at start so that neither its start-up nor a first
    Produce waits for the JIT.
    """
    global _loader
    if _tried or _loader is not None:
        return
    _loader = threading.Thread(target=compiled_walk, name="numba-record-walk", daemon=True)
    _loader.start()
