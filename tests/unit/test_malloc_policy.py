"""Free C-heap pages go back to the system (headwater.malloc_policy)."""

from __future__ import annotations

import os
import platform

import pytest

from headwater.malloc_policy import trim_native_heap


def _rss_anon_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trimming_returns_the_free_holes_of_the_heap() -> None:
    # Buffers just under glibc's mmap threshold come from the heap; with a
    # small object kept after each, freeing them leaves holes inside the heap
    # that only malloc_trim gives back.
    kept: list[bytes] = []
    holes: list[bytearray] = []
    for _ in range(400):
        holes.append(bytearray(100_000))
        kept.append(b"x" * 600)
    holes.clear()
    before = _rss_anon_kb()
    assert trim_native_heap()
    after = _rss_anon_kb()
    assert after < before - 10_000, (before, after)  # well over 10 MB of the ~40 MB freed
    assert len(kept) == 400
