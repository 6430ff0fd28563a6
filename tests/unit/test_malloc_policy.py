"""Free C-heap pages go back to the system (headwater.malloc_policy)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Run in a fresh interpreter: in a long test session glibc's dynamic mmap
# threshold and the heap's shape depend on every earlier test, so the holes
# this makes might not sit inside the heap at all.
_PROBE = """
import os
from headwater.malloc_policy import trim_native_heap

def rss_anon_kb():
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")

# Buffers just under glibc's mmap threshold come from the heap; with a small
# object kept after each, freeing them leaves holes inside the heap that only
# malloc_trim gives back. Every page is written: a fresh heap's calloc'd
# pages are never touched otherwise, so they would never be resident.
kept, holes = [], []
for _ in range(400):
    hole = bytearray(100_000)
    for i in range(0, len(hole), 4096):
        hole[i] = 1
    holes.append(hole)
    kept.append(b"x" * 600)
holes.clear()
before = rss_anon_kb()
trimmed = trim_native_heap()
after = rss_anon_kb()
print(before, after, int(trimmed), len(kept))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trimming_returns_the_free_holes_of_the_heap() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    before, after, trimmed, kept = (int(x) for x in out)
    assert trimmed == 1
    assert after < before - 10_000, (before, after)  # well over 10 MB of the ~40 MB freed
    assert kept == 400
