"""Create a fresh partition's first segment files ahead of its first append.

Creating a directory and three files costs milliseconds per partition on a
slow disk, and a Produce that first touches 10,000 partitions would spend
all of it on the event loop. This touches only the file system (no ``Log``
or ``Segment`` state), so it can run on a worker thread; the append that
follows finds the empty files and opens them instead of creating them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from headwater.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file_name

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC


def precreate_segment_files(segments: Iterable[tuple[str, int]]) -> int:
    """For each (partition directory, base offset): the directory and empty segment files.

    Existing files are left as they are (never truncated). Returns how many
    directories were handled. A directory that cannot be made (a full or
    failing disk) is skipped: the append itself then answers KAFKA_STORAGE_ERROR.
    """
    count = 0
    for directory, base_offset in segments:
        try:
            os.makedirs(directory, exist_ok=True)
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                name = os.path.join(directory, segment_file_name(base_offset, suffix))
                os.close(os.open(name, _FLAGS, 0o644))
        except OSError:
            continue
        count += 1
    return count
