"""``replication-offset-checkpoint``: the high watermarks of a data directory's partitions.

A restarted broker must not expose records past what was committed before it
went down, nor hide what was: the replica manager writes every replicated
partition's high watermark here periodically and at shutdown, and hands the
stored value to ``Log.enable_replication`` when the partition comes back.
Kafka's format (``0``, count, ``<topic> <partition> <offset>`` lines), written
atomically, so Kafka operators can read it with ``cat``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from headwater.log.checkpoint_file import CorruptCheckpointError, read_checkpoint, write_checkpoint

HIGH_WATERMARK_CHECKPOINT_FILE = "replication-offset-checkpoint"

log = logging.getLogger(__name__)


class HighWatermarkCheckpoint:
    """The checkpoint file at ``path``; remembers what it last wrote to skip idle rewrites."""

    __slots__ = ("_last_written", "path")

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._last_written: dict[tuple[str, int], int] | None = None

    def read(self) -> dict[tuple[str, int], int]:
        """{(topic, partition): high watermark}; empty when the file is missing or corrupt.

        A corrupt file is not fatal: the partitions then start from a high
        watermark of 0 (clamped to their log start) and the leader's fetch
        responses raise it again, which is what Kafka does too.
        """
        try:
            rows = read_checkpoint(self.path, 3)
            if rows is None:
                log.info("no high-watermark checkpoint at %s: starting from none", self.path)
                return {}
            mapping = {(topic, int(partition)): int(offset) for topic, partition, offset in rows}
        except (CorruptCheckpointError, ValueError, OSError) as e:
            log.warning("ignoring unreadable high-watermark checkpoint %s: %s", self.path, e)
            return {}
        self._last_written = dict(mapping)
        return mapping

    def write(self, mapping: Mapping[tuple[str, int], int]) -> bool:
        """Replace the file with ``mapping`` atomically; False (nothing written) if unchanged.

        Sorted by topic and partition so the file diffs well. Skipping an
        unchanged mapping keeps a periodic checkpoint of an idle broker with
        thousands of partitions from costing an fsync each interval.
        """
        current = dict(mapping)
        if current == self._last_written:
            return False
        for topic, _ in current:
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
        rows = [(t, p, current[(t, p)]) for t, p in sorted(current)]
        os.makedirs(self.path.parent, exist_ok=True)
        write_checkpoint(self.path, rows)
        self._last_written = current
        return True


class DirectoryCheckpoints:
    """One ``replication-offset-checkpoint`` per data directory, as Kafka keeps them
    (JBOD): each lists the partitions of its own directory, so a failed or full
    directory loses or stalls only its own high watermarks, and a partition keeps
    its checkpoint when its directory is the only one left.

    ``dir_of(topic, partition)`` names a partition's directory and ``offline(dir)``
    says whether one is offline (skipped: its disk answers errors). A checkpoint
    written by an older Headwater lists every partition in the first directory; on
    reading, a partition's own directory wins over another listing it.
    """

    __slots__ = ("_dir_of", "_offline", "files")

    def __init__(
        self,
        dirs: Iterable[Path],
        dir_of: Callable[[str, int], str],
        offline: Callable[[str], str | None],
    ) -> None:
        self.files = {
            str(d): HighWatermarkCheckpoint(Path(d) / HIGH_WATERMARK_CHECKPOINT_FILE) for d in dirs
        }
        self._dir_of = dir_of
        self._offline = offline

    def read(self) -> dict[tuple[str, int], int]:
        """Every directory's high watermarks (an unreadable one contributes none)."""
        found: dict[str, dict[tuple[str, int], int]] = {
            d: checkpoint.read() for d, checkpoint in self.files.items() if not self._offline(d)
        }
        merged: dict[tuple[str, int], int] = {}
        for d, mapping in found.items():
            for key, offset in mapping.items():
                if key not in merged or self._dir_of(*key) == d:
                    merged[key] = offset
        return merged

    def write(self, mapping: Mapping[tuple[str, int], int]) -> list[tuple[str, OSError]]:
        """Each online directory's share of ``mapping``; the directories that failed
        (the others are written all the same)."""
        shares: dict[str, dict[tuple[str, int], int]] = {d: {} for d in self.files}
        for key, offset in mapping.items():
            shares.setdefault(self._dir_of(*key), {})[key] = offset
        failed: list[tuple[str, OSError]] = []
        for d, share in shares.items():
            checkpoint = self.files.get(d)
            if checkpoint is None or self._offline(d):
                continue
            try:
                checkpoint.write(share)
            except OSError as exc:
                failed.append((d, exc))
        return failed
