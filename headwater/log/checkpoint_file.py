"""Kafka's text checkpoint files: a version line, a count line, then one entry per line.

Both ``leader-epoch-checkpoint`` (per partition) and
``replication-offset-checkpoint`` (per data directory) use this shape, so an
operator's Kafka tooling and habits (``cat`` the file) carry over. A write
replaces the file atomically (tmp file, fsync, rename, fsync of the
directory), so a crash leaves either the old or the new content, never half.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

CHECKPOINT_VERSION = 0


class CorruptCheckpointError(ValueError):
    """The file exists but is not a version-0 checkpoint with as many entries as it says."""


def write_checkpoint(
    path: Path | str, entries: Sequence[Sequence[object]], *, durable: bool = True
) -> None:
    """Replace ``path`` with ``entries`` (each a row of space-separated fields), atomically;
    durably (fsync of the file and its directory) unless ``durable`` is False."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(_text(entries))
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        _fsync_directory(os.path.dirname(path) or ".")


def overwrite_checkpoint(path: Path | str, entries: Sequence[Sequence[object]]) -> bool:
    """Rewrite an existing ``path`` in place, neither atomically nor durably; False
    (and nothing written) when it does not exist.

    For a file rewritten often whose reader rebuilds it when it does not parse:
    the leader-epoch checkpoint, on every replica at every new epoch. A
    temporary file and a rename cost a file creation and two directory changes
    in the file system's journal each time; in a failover at 50,000 partitions
    that was a fifth of each surviving broker's samples (issue 33). Here the new
    text is written first and the file cut to its length after, so a crash in
    between leaves the old text's extra lines behind the new, which
    ``read_checkpoint`` refuses (the count heads the file): never an older or a
    shorter list that parses.
    """
    fspath = os.fspath(path)
    try:
        fd = os.open(fspath, os.O_WRONLY)
    except FileNotFoundError:
        return False
    try:
        data = _text(entries).encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    return True


def _text(entries: Sequence[Sequence[object]]) -> str:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    return "\n".join(lines) + "\n"


def _fsync_directory(directory: str) -> None:
    """Make the rename itself durable (Kafka flushes the parent directory too)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_checkpoint(path: Path | str, fields: int) -> list[list[str]] | None:
    """The entries of ``path`` split into ``fields`` fields each; None when it does not exist.

    Raises CorruptCheckpointError on anything else than the exact format, so
    the caller decides whether to rebuild or to start empty.
    """
    try:
        with open(os.fspath(path)) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(f"{path}: not text") from e
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(f"{path}: expected version {CHECKPOINT_VERSION} and a count")
    try:
        count = int(lines[1])
    except ValueError as e:
        raise CorruptCheckpointError(f"{path}: bad entry count {lines[1]!r}") from e
    rows = [line.split() for line in lines[2:] if line.strip()]
    if count != len(rows) or any(len(row) != fields for row in rows):
        raise CorruptCheckpointError(
            f"{path}: expected {count} entries of {fields} fields, found {len(rows)} lines"
        )
    return rows
