"""Groups land in the offsets partition Kafka would choose."""

from __future__ import annotations

import pytest

from headwater.coordinator.placement import java_string_hashcode, kafka_abs, partition_for

# (text, Java's "text".hashCode(), partition among 50), computed with a JVM.
JAVA_VALUES = [
    ("", 0, 0),
    ("a", 97, 47),
    ("hello", 99162322, 22),
    ("polygenelubricants", -(2**31), 0),  # Integer.MIN_VALUE: Utils.abs gives 0
    ("my-group", -1906497762, 12),  # negative: abs before modulo
    ("console-consumer-12345", 158455506, 6),
    ("\u00e9t\u00e9", 227742, 42),  # non-ASCII in the BMP: one code unit each
    ("\U0001f600x", 54959989, 39),  # outside the BMP: a surrogate pair
    ("GroupA", 2141373890, 40),
]


@pytest.mark.parametrize(("text", "hashcode", "partition"), JAVA_VALUES)
def test_matches_java_string_hashcode(text: str, hashcode: int, partition: int) -> None:
    assert java_string_hashcode(text) == hashcode
    assert partition_for(text, 50) == partition


def test_kafka_abs_maps_min_int_to_zero() -> None:
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(7) == 7


def test_one_partition_holds_every_group() -> None:
    assert {partition_for(f"g{i}", 1) for i in range(100)} == {0}


def test_groups_spread_over_partitions() -> None:
    used = {partition_for(f"group-{i}", 50) for i in range(1000)}
    assert used == set(range(50))


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        partition_for("g", 0)
