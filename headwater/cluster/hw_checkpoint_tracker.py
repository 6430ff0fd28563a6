"""Which replicas' high watermarks moved since the HW checkpoint was last written.

The replica manager writes ``replication-offset-checkpoint`` every
``replica.high.watermark.checkpoint.interval.ms`` when a high watermark moved.
Finding out by reading every hosted replica's HW and comparing the whole map
cost O(replicas) every 5 s on an idle broker (issue 33 item 2). This tracker
listens to each hosted log instead: a log event that can move its HW (the HW
moved, the log start moved, the log was truncated or emptied) marks the
partition dirty, and a checkpoint tick reads only the dirty ones. The file's
content is unchanged: every hosted replica's HW, written whole when one moved
(as Kafka), and again after a failed write.

As a safety net against a move that fired no event, every ``full_every``
ticks all partitions are read again (O(replicas) once a minute at the
defaults, instead of every 5 s).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from headwater.log.log import Log, LogEvent, LogListener

PartitionKey = tuple[str, int]

#: The log events after which a log's high watermark may differ.
HW_MAY_MOVE = LogEvent.HIGH_WATERMARK_MOVED | LogEvent.LOG_START_MOVED | LogEvent.TRUNCATED
#: Checkpoint ticks between two reads of every high watermark (12 x 5 s: a minute).
FULL_EVERY = 12


class _MarksDirty:
    """One hosted log's listener: marks its partition dirty when its HW may have moved.
    A slotted object, not a closure: a closure per hosted log cost about 290 bytes at
    50,000 partitions (issue 33), this about 50."""

    __slots__ = ("_dirty", "_key")

    def __init__(self, dirty: set[PartitionKey], key: PartitionKey) -> None:
        self._dirty = dirty
        self._key = key

    def __call__(self, _log: Log, event: LogEvent) -> None:
        if event & HW_MAY_MOVE:
            self._dirty.add(self._key)


class HighWatermarkTracker:
    """The HW checkpoint's content, kept up to date from log events (see the module)."""

    def __init__(self, full_every: int = FULL_EVERY) -> None:
        self.full_every = full_every
        self._logs: dict[PartitionKey, Log] = {}
        self._listeners: dict[PartitionKey, LogListener] = {}
        self._dirty: set[PartitionKey] = set()
        #: What the checkpoint should hold: each tracked partition's HW, as last read.
        self._current: dict[PartitionKey, int] = {}
        #: Whether ``_current`` differs from the file (changed, or its write failed).
        self._unwritten = False
        self._ticks = 0
        #: High watermarks read (for tests: an idle tick reads none).
        self.reads = 0

    def __len__(self) -> int:
        return len(self._logs)

    def seed(self, checkpointed: Mapping[PartitionKey, int]) -> None:
        """What the file held at start: a first tick that finds the same writes nothing."""
        self._current = dict(checkpointed)
        self._dirty.update(checkpointed)

    def track(self, key: PartitionKey, log: Log) -> None:
        """The partition is hosted here with ``log``: its HW belongs in the checkpoint."""
        self.untrack(key)
        changed = _MarksDirty(self._dirty, key)
        self._logs[key] = log
        self._listeners[key] = changed
        log.add_listener(changed)
        self._dirty.add(key)

    def untrack(self, key: PartitionKey) -> None:
        """The partition is no longer hosted here: it leaves the checkpoint."""
        log = self._logs.pop(key, None)
        listener = self._listeners.pop(key, None)
        if log is not None and listener is not None:
            with contextlib.suppress(ValueError):
                log.remove_listener(listener)
        self._dirty.add(key)

    def due(self) -> dict[PartitionKey, int] | None:
        """The checkpoint to write now (every tracked partition's HW), or None when
        nothing moved since the last :meth:`written`. Reads only the dirty partitions,
        but all of them every ``full_every`` calls."""
        self._ticks += 1
        if self.full_every > 0 and self._ticks >= self.full_every:
            self._ticks = 0
            self._dirty.update(self._logs)
            self._dirty.update(self._current)
        if self._dirty:
            current = self._current
            for key in self._dirty:
                log = self._logs.get(key)
                if log is None:
                    if key in current:
                        del current[key]
                        self._unwritten = True
                    continue
                self.reads += 1
                hw = log.high_watermark
                if current.get(key) != hw:
                    current[key] = hw
                    self._unwritten = True
            self._dirty.clear()
        return dict(self._current) if self._unwritten else None

    def written(self) -> None:
        """The content :meth:`due` returned is on disk."""
        self._unwritten = False
