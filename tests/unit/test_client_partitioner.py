"""Kafka's default partitioner: murmur2 for keys, sticky partitions without."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from headwater.client.partitioner import (
    StickyPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

# Values from Apache Kafka's own UtilsTest (Java's signed ints).
JAVA_VALUES = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafkas_java_values() -> None:
    for data, expected in JAVA_VALUES.items():
        assert murmur2(data) == expected


@given(st.binary(max_size=300))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    # kafka-python returns the same 32 bits unsigned.
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_to_positive_clears_the_sign_bit_instead_of_taking_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


@given(st.binary(min_size=1, max_size=64), st.integers(1, 500))
def test_keyed_partition_is_kafkas_choice(key: bytes, partitions: int) -> None:
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    assert partition_for_key(key, partitions) == expected


def test_sticky_partition_stays_until_its_batch_is_done() -> None:
    sticky = StickyPartitioner(random.Random(1))
    first = sticky.partition("t", 8)
    assert all(sticky.partition("t", 8) == first for _ in range(10))
    second = sticky.next_batch("t", 8, first)
    assert second != first
    assert sticky.partition("t", 8) == second


def test_sticky_partition_moves_only_once_per_finished_batch() -> None:
    sticky = StickyPartitioner(random.Random(2))
    first = sticky.partition("t", 4)
    moved = sticky.next_batch("t", 4, first)
    # A late notice about the old partition does not move it again.
    assert sticky.next_batch("t", 4, first) == moved


def test_sticky_partitioner_with_one_partition_always_picks_zero() -> None:
    sticky = StickyPartitioner()
    assert sticky.partition("t", 1) == 0
    assert sticky.next_batch("t", 1, 0) == 0


def test_sticky_partitions_spread_over_all_partitions_in_the_long_run() -> None:
    sticky = StickyPartitioner(random.Random(3))
    seen = set()
    current = sticky.partition("t", 5)
    for _ in range(200):
        seen.add(current)
        current = sticky.next_batch("t", 5, current)
    assert seen == set(range(5))
