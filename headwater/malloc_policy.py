"""Hand the C heap's free pages back to the system now and then (glibc only).

Why: Python objects live in CPython's own arenas, but every buffer above
512 bytes (request frames, encoded responses, decompressed batches) comes
from glibc's ``malloc``. glibc returns freed memory to the system only from
the top of its heap, and after the first large block is freed it raises its
mmap threshold (dynamically, up to 32 MiB) so later buffers of that size
come from the heap too. Freed holes between long-lived blocks then stay
resident. Measured with ``bench/bench_soak.py``: the broker's RSS grew 3.1%
in five minutes (15% over thirty) although the Python heap stayed flat.

Pinning the mmap threshold low stopped the growth but made every large
produce request pay for a fresh mapping: produce throughput fell 2.6x for
100 KB records (``bench_broker.py --compare-override``). ``malloc_trim(0)``
instead releases the free pages inside the heap as well (``madvise``), at a
cost of a few milliseconds when there is much to give back and well under
one when there is not, so the broker calls it on its housekeeping timer.

Other C libraries (musl, macOS) keep their own policy: nothing is done.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable

#: ``headwater.malloc.trim.interval.ms`` default: often enough that holes never
#: pile up, rarely enough that its cost is nothing next to the work in between.
DEFAULT_TRIM_INTERVAL_MS = 30_000


def _glibc_malloc_trim() -> Callable[[int], int] | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


_MALLOC_TRIM = _glibc_malloc_trim()


def trim_native_heap() -> bool:
    """Return free C-heap pages to the system; True if any were (False off glibc)."""
    if _MALLOC_TRIM is None:
        return False
    return bool(_MALLOC_TRIM(0))
