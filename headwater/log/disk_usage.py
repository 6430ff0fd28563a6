"""Bytes on disk per partition, read from the data directory in one pass (DescribeLogDirs).

Kafka reports a partition's size as the sum of its segment files. Loading
every ``Log`` to ask it would open 100,000 partitions; one ``scandir`` of
the data directory and of each partition directory that exists gives the
same numbers (segments are written in place, so ``st_size`` is current)
and can run off the event loop, since it touches no shared state.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from headwater.log.segment import LOG_SUFFIX


@dataclass(frozen=True, slots=True)
class DirUsage:
    path: str
    partition_bytes: Mapping[tuple[str, int], int]  # partitions with a directory
    total_bytes: int  # the volume's size
    usable_bytes: int  # what is free on it


def scan_partition_sizes(data_dir: str, topics: Mapping[str, int]) -> DirUsage:
    """Segment bytes of every existing partition directory of ``topics`` (name -> count)."""
    sizes: dict[tuple[str, int], int] = {}
    with os.scandir(data_dir) as entries:
        for entry in entries:
            topic, sep, index = entry.name.rpartition("-")
            if not sep or not index.isdigit() or topic not in topics:
                continue
            partition = int(index)
            if partition >= topics[topic] or not entry.is_dir():
                continue
            total = 0
            with os.scandir(entry.path) as files:
                for f in files:
                    if f.name.endswith(LOG_SUFFIX):
                        total += f.stat().st_size
            sizes[(topic, partition)] = total
    disk = shutil.disk_usage(data_dir)
    return DirUsage(os.path.abspath(data_dir), sizes, disk.total, disk.free)
