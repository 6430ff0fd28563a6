"""Swapping cleaned segments in, and finishing or undoing a swap after a crash.

Kafka's suffix protocol, so that a ``kill -9`` at any moment leaves either
the old segments or the new one, never a mix:

1. the cleaner writes ``<base>.log.cleaned`` with its indexes and a
   ``<base>.replaces.cleaned`` listing the base offsets it replaces (fsynced);
2. the indexes and the list are renamed to ``.swap``, then the log file:
   **the rename of ``<base>.log.cleaned`` to ``<base>.log.swap`` commits**;
3. the replaced segments' files are renamed ``.deleted``;
4. the ``.swap`` files are renamed to their final names, the log last, and
   the list is removed; the replaced files, renamed ``.deleted`` in step 3,
   are unlinked later (by the cleaner's thread, or at the next load).

At load (:func:`recover_swaps`): a ``.log.swap`` means the swap committed,
so steps 3 and 4 are finished; any ``.cleaned`` file, or a ``.swap`` index
without its log, belongs to a swap that never committed and is deleted.
Kafka finds the replaced segments from the swap file's offset range; the
list is more precise, because cleaning may remove the last batches of the
last replaced segment, so the range can end before it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence

from headwater.log.cleaner import (
    CLEANED_SUFFIX,
    REPLACES_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
)
from headwater.log.segment import LOG_SUFFIX, segment_file_name

log = logging.getLogger(__name__)

DELETED_SUFFIX = ".deleted"  # Kafka's suffix for a segment file waiting to be unlinked
_AUX_SUFFIXES = (*(s for s in SEGMENT_SUFFIXES if s != LOG_SUFFIX), REPLACES_SUFFIX)


def _path(directory: str, base: int, suffix: str) -> str:
    return os.path.join(directory, segment_file_name(base, suffix))


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _rename_if_present(source: str, target: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.rename(source, target)


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make renames and deletions in ``directory`` durable (power loss; kill -9 needs nothing)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def discard_cleaned(directory: str, base: int) -> None:
    """Throw away an uncommitted clean of the group starting at ``base``."""
    for suffix in (*SEGMENT_SUFFIXES, REPLACES_SUFFIX):
        _unlink(_path(directory, base, suffix) + CLEANED_SUFFIX)


def commit_swap(directory: str, base: int, replaces: Sequence[int]) -> list[str]:
    """Steps 2-4 for a finished ``<base>.*.cleaned`` group: then only the new segment is left.

    A handful of renames and unlinks: cheap enough for the owner of the log
    to run between two requests. ``replaces`` must be the list in the
    ``.replaces.cleaned`` file. Returns the replaced files, renamed
    ``.deleted``, for the caller to unlink off the event loop
    (:func:`delete_files`); a crash before that leaves them to the next load.
    """
    for suffix in _AUX_SUFFIXES:
        _rename_if_present(
            _path(directory, base, suffix) + CLEANED_SUFFIX,
            _path(directory, base, suffix) + SWAP_SUFFIX,
        )
    os.rename(
        _path(directory, base, LOG_SUFFIX) + CLEANED_SUFFIX,
        _path(directory, base, LOG_SUFFIX) + SWAP_SUFFIX,
    )  # committed
    return _finish_swap(directory, base, replaces)


def _finish_swap(directory: str, base: int, replaces: Sequence[int]) -> list[str]:
    doomed: list[str] = []
    for old in replaces:
        for suffix in SEGMENT_SUFFIXES:
            path = _path(directory, old, suffix)
            # The new segment has every file: one of its own name without a
            # .swap twin was renamed already (a crash in this very loop).
            if old != base or os.path.exists(path + SWAP_SUFFIX):
                # Renamed, not unlinked: freeing a large file's blocks takes
                # tens of milliseconds, which the caller does later, elsewhere.
                with contextlib.suppress(FileNotFoundError):
                    os.rename(path, path + DELETED_SUFFIX)
                    doomed.append(path + DELETED_SUFFIX)
    for suffix in SEGMENT_SUFFIXES:
        if suffix != LOG_SUFFIX:
            _rename_if_present(
                _path(directory, base, suffix) + SWAP_SUFFIX, _path(directory, base, suffix)
            )
    os.rename(_path(directory, base, LOG_SUFFIX) + SWAP_SUFFIX, _path(directory, base, LOG_SUFFIX))
    _unlink(_path(directory, base, REPLACES_SUFFIX) + SWAP_SUFFIX)
    return doomed


def delete_files(paths: Sequence[str]) -> None:
    """Unlink replaced segment files (slow for large files: not on the event loop)."""
    for path in paths:
        _unlink(path)


def _read_replaces(path: str) -> list[int] | None:
    try:
        with open(path) as f:
            return [int(line) for line in f.read().split()]
    except (FileNotFoundError, ValueError):
        return None


def recover_swaps(directory: str, names: Sequence[str]) -> bool:
    """Finish committed swaps and drop uncommitted cleans; True when anything was there.

    ``names`` is the directory listing; the caller lists again when this
    returns True.
    """
    touched = False
    swaps = sorted(
        int(name[: -len(LOG_SUFFIX + SWAP_SUFFIX)])
        for name in names
        if name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and name[:20].isdigit()
    )
    for base in swaps:
        touched = True
        replaces = _read_replaces(_path(directory, base, REPLACES_SUFFIX) + SWAP_SUFFIX)
        if replaces is None:
            # Never written by this cleaner without the list; the swap file is
            # whole (fsynced before the commit rename), the old base is known.
            replaces = [base]
        log.warning("%s: finishing an interrupted log cleaner swap at %d", directory, base)
        _finish_swap(directory, base, replaces)
    for name in names:
        if name.endswith(DELETED_SUFFIX):
            touched = True
            _unlink(os.path.join(directory, name))
        elif name.endswith(CLEANED_SUFFIX) or (
            name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX)
        ):
            if name.endswith(SWAP_SUFFIX) and int(name[:20]) in swaps:
                continue  # handled above
            touched = True
            _unlink(os.path.join(directory, name))
    return touched
