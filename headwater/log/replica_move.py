"""Moving one partition's replica to another data directory online (KIP-113,
AlterReplicaLogDirs): the pieces that need no broker.

Kafka copies into ``<topic>-<p>.<uuid>-future`` in the destination with a
fetcher thread, then swaps the future log in. Here :class:`DirSync` copies the
partition directory file by file on a worker thread, incrementally (a segment
``.log`` is append-only, so a later round copies only the bytes added since; a
file replaced by the cleaner has a new inode and is copied again), and the
caller does a last small round and the swap on the event loop, which is the
log's only writer, so no append lands between the last copy and the switch.

The swap is two renames, in an order a crash can always be recovered from:
the source goes to ``<topic>-<p>.<uuid>-delete`` first (the future copy is then
complete and fsynced), then the future directory takes the partition's name.
:func:`recover_moves` runs at start: a future directory next to a live
partition directory is an unfinished copy and is deleted; one whose source was
already renamed away is complete and is promoted; ``-delete`` directories go.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from headwater.log.cleaner_swap import fsync_directory

FUTURE_DIR_SUFFIX = "-future"
DELETE_DIR_SUFFIX = "-delete"
_SIDE_DIR = re.compile(r"(\S+)-(\d+)\.([0-9a-f]{32})(-future|-delete)")
#: Files the cleaner writes and renames while it works: copied only by the final
#: round (then the cleaner is idle), never half written.
_IN_PROGRESS = (".cleaned", ".swap", ".deleted", ".tmp")
#: Segment files; anything else (snapshots, checkpoints, partition.metadata) is small
#: and rewritten in place, so the final round copies it whole.
_SEGMENT_FILE = (".log", ".index", ".timeindex", ".txnindex")
_CHUNK = 1 << 20
#: Kafka's limit on a directory name (KAFKA-4893): longer topics cannot be moved.
MAX_DIR_NAME = 255


class MoveError(enum.IntEnum):
    """The per-partition answers of AlterReplicaLogDirs, Kafka's error codes."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REPLICA_NOT_AVAILABLE = 9
    INVALID_TOPIC_EXCEPTION = 17
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57


def side_dir_name(topic: str, partition: int, suffix: str) -> str:
    """``<topic>-<p>.<uuid><suffix>`` (Kafka's future and delete names)."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{suffix}"


def name_too_long(topic: str, partition: int) -> bool:
    """Kafka refuses moves whose future directory name would pass 255 characters."""
    return len(side_dir_name(topic, partition, FUTURE_DIR_SUFFIX)) > MAX_DIR_NAME


def _copy(src: Path, dst: Path, start: int, end: int, durable: bool) -> int:
    """Bytes [start, end) of ``src`` into ``dst`` at ``start`` (``dst`` cut there first)."""
    flags = os.O_WRONLY | os.O_CREAT
    out = os.open(dst, flags, 0o644)
    try:
        os.ftruncate(out, start)
        with open(src, "rb") as f:
            f.seek(start)
            pos = start
            while pos < end:
                chunk = f.read(min(_CHUNK, end - pos))
                if not chunk:
                    break  # cut meanwhile: the next round sees a new state
                os.pwrite(out, chunk, pos)
                pos += len(chunk)
        if durable:
            os.fsync(out)
        return pos - start
    finally:
        os.close(out)


@dataclass
class DirSync:
    """Brings ``target`` level with ``source``, copying only what changed since the
    previous round (see the module docstring). Not thread-safe: one round at a time."""

    source: Path
    target: Path
    #: name -> (inode, size, mtime_ns) of the source file as last copied.
    copied: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def forget(self) -> None:
        """The log was truncated or trimmed: appends-only no longer holds, copy anew."""
        self.copied.clear()

    def sync(self, *, final: bool = False) -> int:
        """One round; the bytes copied. ``final``: the log is closed and idle, so
        every file is taken, small files are copied whole, and all is fsynced."""
        self.target.mkdir(parents=True, exist_ok=True)
        try:
            names = sorted(os.listdir(self.source))
        except FileNotFoundError:
            names = []  # a log never written to has no directory yet
        segment_bases = [n[:-4] for n in names if n.endswith(".log") and n[:20].isdigit()]
        active = max(segment_bases, default=None)
        present: set[str] = set()
        moved = 0
        for name in names:
            if not final and name.endswith(_IN_PROGRESS):
                continue
            src = self.source / name
            try:
                st = os.stat(src)
            except FileNotFoundError:
                continue  # retention took it meanwhile
            if not stat.S_ISREG(st.st_mode):
                continue
            present.add(name)
            now = (st.st_ino, st.st_size, st.st_mtime_ns)
            before = self.copied.get(name)
            whole_anyway = final and (
                not name.endswith(_SEGMENT_FILE)
                or (active is not None and name.startswith(active) and not name.endswith(".log"))
            )
            if before == now and not whole_anyway:
                continue
            start = 0
            if (
                before is not None
                and name.endswith(".log")
                and before[0] == st.st_ino
                and st.st_size >= before[1]
            ):
                start = before[1]
            got = _copy(src, self.target / name, start, st.st_size, final)
            moved += got
            self.copied[name] = (st.st_ino, start + got, st.st_mtime_ns)
        for name in os.listdir(self.target):
            if name not in present:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.target / name)
                self.copied.pop(name, None)
        if final:
            fsync_directory(self.target)
        return moved


def size_of(path: Path) -> int:
    """Bytes in a directory's files (a future replica's size for DescribeLogDirs)."""
    total = 0
    with contextlib.suppress(FileNotFoundError), os.scandir(path) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def swap_in(source: Path, future: Path, destination: Path) -> Path:
    """The crash-safe switch (module docstring): source aside, future to its name.
    Returns the renamed-away source, for the caller to delete off the loop."""
    aside = source.parent / side_dir_name(*_split(source.name), DELETE_DIR_SUFFIX)
    if source.exists():
        os.rename(source, aside)
        fsync_directory(source.parent)
    try:
        os.rename(future, destination)
    except OSError:
        if aside.exists():
            os.rename(aside, source)  # the old copy stays the partition
        raise
    fsync_directory(destination.parent)
    return aside


def _split(name: str) -> tuple[str, int]:
    topic, _, index = name.rpartition("-")
    return topic, int(index)


def recover_moves(dirs: Iterable[Path]) -> list[Path]:
    """Settle moves a crash interrupted (module docstring); the directories deleted
    or promoted, for the log. Runs at open, before any partition is placed."""
    dirs = list(dirs)
    live: set[str] = set()
    side: list[tuple[Path, str, str]] = []
    for directory in dirs:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                found = _SIDE_DIR.fullmatch(entry.name)
                if found is not None:
                    side.append((Path(entry.path), f"{found[1]}-{found[2]}", found[4]))
                else:
                    live.add(entry.name)
    touched: list[Path] = []
    aside = {name for _, name, kind in side if kind == DELETE_DIR_SUFFIX}
    for path, name, kind in side:
        if kind == FUTURE_DIR_SUFFIX and name not in live and name in aside:
            os.rename(path, path.parent / name)  # complete: the source was renamed away
            fsync_directory(path.parent)
            live.add(name)
            touched.append(path)
    for path, _name, _kind in side:
        if path not in touched:
            shutil.rmtree(path, ignore_errors=True)
            touched.append(path)
    return touched
