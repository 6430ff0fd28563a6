"""Which replica fetcher follows a partition, and who moves when their number changes.

Kafka's ``AbstractFetcherManager`` spreads a broker's followed partitions
over ``num.replica.fetchers`` fetchers per leader with
``abs(31 * topic.hashCode() + partition) % num.replica.fetchers``. The same
formula is used here, with Java's ``String.hashCode`` (stable across
processes, unlike Python's salted ``hash`` of a str), so a partition sits
on the fetcher a Kafka broker would put it on.

``num.replica.fetchers`` is a dynamic broker config: :func:`resize_plan` says
which partitions change fetcher for a new count, and
:func:`check_thread_count_change` is Kafka's ``DynamicThreadPool`` rule for
an acceptable new count. Both are pure; the replica manager applies them.
"""

from __future__ import annotations

from collections.abc import Mapping

PartitionKey = tuple[str, int]
#: A fetcher's identity: (leader broker id, fetcher index < num.replica.fetchers).
FetcherKey = tuple[int, int]

_INT_MIN = -(2**31)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrapping)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def fetcher_index(topic: str, partition: int, count: int) -> int:
    """Kafka's ``getFetcherId``: the fetcher (of its leader's) that follows the partition."""
    n = _int32(31 * java_string_hash(topic) + partition)
    positive = 0 if n == _INT_MIN else abs(n)  # Kafka's Utils.abs
    return positive % max(1, count)


def resize_plan(
    placements: Mapping[PartitionKey, FetcherKey], count: int
) -> dict[PartitionKey, FetcherKey]:
    """The partitions whose fetcher changes with ``count`` fetchers per leader, and their new one.

    ``placements`` is where each followed partition is now. Kafka's
    ``resizeThreadPool`` takes every partition out and adds it back; moving
    only those whose index changes is the same end state with less churn.
    """
    moves: dict[PartitionKey, FetcherKey] = {}
    for key, (leader, index) in placements.items():
        new_index = fetcher_index(key[0], key[1], count)
        if new_index != index:
            moves[key] = (leader, new_index)
    return moves


def check_thread_count_change(name: str, current: int, new: int) -> None:
    """Kafka's ``DynamicThreadPool.validateReconfiguration``: at least 1, and no less
    than half nor more than double the current value. Raises ValueError."""
    if new == current:
        return
    error = f"Dynamic thread count update validation failed for {name}={new}"
    if new <= 0:
        raise ValueError(f"{error}, value should be at least 1")
    if new < current // 2:
        raise ValueError(f"{error}, value should be at least half the current value {current}")
    if new > current * 2:
        raise ValueError(
            f"{error}, value should not be greater than double the current value {current}"
        )
