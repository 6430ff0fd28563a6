"""Kafka's default partitioner: murmur2 of the key, sticky partitions for no key.

Keyed records must land where a Java, librdkafka (``murmur2_random``) or
kafka-python producer would put them, so that mixed producers keep one
key in one partition. Kafka's murmur2 is a 32-bit MurmurHash2 with seed
0x9747b28c over the key bytes, taken positive with ``& 0x7fffffff``.

It is written out here (about 30 lines) because no maintained library
exposes Kafka's variant: ``mmh3`` is MurmurHash3, and kafka-python's copy
is a test-only dependency. Tests pin it against kafka-python.
"""

from __future__ import annotations

import random
from typing import Final

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(h: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return h & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a keyed record."""
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """KIP-480: keyless records stick to one partition until its batch is done.

    Filling one batch at a time, instead of spreading single records over
    every partition, makes fewer and larger batches at the same latency.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        current = self._current.get(topic)
        if current is None or current >= num_partitions:
            current = self._current[topic] = self._rng.randrange(num_partitions)
        return current

    def next_batch(self, topic: str, num_partitions: int, previous: int) -> int:
        """The batch of ``previous`` is full or sent: move to another partition."""
        current = self._current.get(topic)
        if current is None or current == previous:
            if num_partitions <= 1:
                current = 0
            else:
                current = self._rng.randrange(num_partitions - 1)
                if current >= previous:
                    current += 1
            self._current[topic] = current
        return current
