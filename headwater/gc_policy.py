"""The broker's policy for CPython's cyclic garbage collector.

Why this exists: a full (generation 2) collection walks every tracked object
in the process with the event loop stopped. A broker with 100,000 loaded
partition logs holds millions of such objects, so one full collection took
400-650 ms (``bench/bench_stalls.py``), far over the 50 ms any client may be
made to wait. Two kinds of objects cause it, and each gets a rule:

* **Long-lived objects** (loaded logs, their segments and indexes) live as
  long as their partitions. Once ``freeze_every`` of them were created they
  are moved out of the collector's reach with ``gc.freeze()``, which costs
  almost nothing. Reference counting still frees them when a topic is
  deleted; only objects that are *cyclic* garbage at the moment of a freeze
  stay, and freezes are rare (one per ``freeze_every`` loaded logs).
* **Transient objects of one huge request** (100,000 decoded partitions of a
  Fetch, say) live for the request's few seconds. While such a request runs
  in slices (``broker/cooperative.py``) full collections are postponed, so
  they are not walked again and again; young collections go on, so cyclic
  garbage is still found, and the postponed full collection runs once the
  request is over and its objects are already freed by reference counting.

The policy is process-wide because the collector is. It is off until a
broker enables it, so tests and library users of the log keep Python's
defaults.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Freeze after this many long-lived objects (loaded logs) were created: often
#: enough that no collection meets more than a few thousand unfrozen logs.
FREEZE_EVERY = 2_000

#: Generation-2 threshold while a sliced request runs: high enough that no
#: full collection starts during one.
POSTPONED_FULL_THRESHOLD = 1_000_000


class CollectorPolicy:
    """Freezes long-lived objects and postpones full collections during huge requests."""

    def __init__(self) -> None:
        self.enabled = False
        self.freeze_every = FREEZE_EVERY
        self.freezes = 0
        self._created = 0
        self._heavy = 0
        self._saved_full_threshold: int | None = None

    def enable(self, freeze_every: int = FREEZE_EVERY) -> None:
        self.enabled = True
        self.freeze_every = max(1, freeze_every)

    def disable(self) -> None:
        """Back to Python's defaults (what is frozen stays frozen)."""
        while self._heavy:
            self.heavy_done()
        self.enabled = False

    def freeze(self, *, collect: bool = False) -> None:
        """Freeze what exists now; ``collect`` first runs a full collection (at start-up,
        when nothing is served yet and a pause costs no client anything)."""
        if collect:
            gc.collect()
        gc.freeze()
        self._created = 0
        self.freezes += 1

    def long_lived_created(self, count: int = 1) -> None:
        """Note ``count`` new long-lived objects; freeze once enough of them accumulated."""
        if not self.enabled:
            return
        self._created += count
        if self._created >= self.freeze_every:
            self.freeze()

    def heavy_started(self) -> None:
        """A request is running in slices: no full collection until it is done."""
        if not self.enabled:
            return
        self._heavy += 1
        if self._heavy == 1:
            young, middle, full = gc.get_threshold()
            self._saved_full_threshold = full
            gc.set_threshold(young, middle, POSTPONED_FULL_THRESHOLD)

    def heavy_done(self) -> None:
        if self._heavy == 0:
            return
        self._heavy -= 1
        if self._heavy == 0 and self._saved_full_threshold is not None:
            young, middle, _ = gc.get_threshold()
            gc.set_threshold(young, middle, self._saved_full_threshold)
            self._saved_full_threshold = None

    @contextmanager
    def heavy(self) -> Iterator[None]:
        """Around a request made of several sliced phases (decode, read, encode): the
        postponement must span them all, or a full collection would start in the
        gap between two phases while the request's objects are all alive."""
        self.heavy_started()
        try:
            yield
        finally:
            self.heavy_done()

    @property
    def heavy_requests(self) -> int:
        return self._heavy


#: The process's policy (the collector it configures is process-wide too).
COLLECTOR = CollectorPolicy()
