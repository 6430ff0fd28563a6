"""How far a read may go in a partition log (the chapter's FetchIsolation).

It lives in ``log/`` because the log is what enforces it; the fetch layer and
the protocol only choose one. Keeping it here means ``log`` never imports
``fetch``.
"""

from __future__ import annotations

import enum


class Isolation(enum.IntEnum):
    """How far a fetch may read (chapter: FetchIsolation)."""

    LOG_END = 0  # followers (replica_id >= 0)
    HIGH_WATERMARK = 1  # consumers, read_uncommitted
    TXN_COMMITTED = 2  # consumers, read_committed (last stable offset)
