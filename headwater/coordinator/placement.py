"""Which ``__consumer_offsets`` partition holds a group.

Kafka places a group by ``Utils.abs(groupId.hashCode()) % partitionCount``.
Headwater must place every group exactly where Kafka would, so that a data
directory (and any tool that computes coordinators itself) agrees with Kafka;
hence Java's String.hashCode, reproduced here: no Python library offers it.
"""

from __future__ import annotations

_INT32_MIN = -(2**31)


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code
    units, wrapped to a signed 32-bit int."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(value: int) -> int:
    """Kafka's ``Utils.abs``: ``abs`` that maps ``Integer.MIN_VALUE`` to 0, not to itself."""
    return 0 if value == _INT32_MIN else abs(value)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The offsets partition of ``group_id`` among ``num_partitions``."""
    if num_partitions < 1:
        raise ValueError(f"the offsets topic needs at least 1 partition, not {num_partitions}")
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions
