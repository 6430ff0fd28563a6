"""Replica placement (KIP-36): Kafka's AdminRackAwareTest cases and properties, no I/O."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.cluster.replica_placement import (
    ENFORCED_MIXED_RACKS_MESSAGE,
    MIXED_RACKS_MESSAGE,
    AdminOperationError,
    InvalidReplicationFactorError,
    RackAwareMode,
    assign_replicas,
    new_partitions_start_index,
    placement_racks,
    rack_alternated_brokers,
)
from headwater.log.errors import InvalidPartitionsError

Assignment = dict[int, list[int]]

#: Kafka's usual fixture: 6 brokers, 3 racks of 2.
SIX_IN_THREE = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}


def check_distribution(
    assignment: Assignment,
    racks: Mapping[int, str],
    partitions: int,
    factor: int,
    *,
    rack_aware: bool = True,
    even_leaders: bool = True,
    even_replicas: bool = True,
) -> None:
    """Kafka's RackAwareTest.checkReplicaDistribution."""
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(set(replicas)) == len(replicas) == factor
    if rack_aware:
        for replicas in assignment.values():
            assert len({racks[b] for b in replicas}) == factor
    if even_leaders:
        leaders = Counter(r[0] for r in assignment.values())
        assert [leaders[b] for b in racks] == [partitions // len(racks)] * len(racks)
    if even_replicas:
        counts = Counter(b for r in assignment.values() for b in r)
        assert [counts[b] for b in racks] == [partitions * factor // len(racks)] * len(racks)


# --- Kafka's AdminRackAwareTest -------------------------------------------------------


def test_rack_alternated_list_and_fixed_start_assignment() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas(racks, 7, 3, start_index=0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3],
        6: [0, 4, 2],  # the followers shift once the partitions wrap around
    }  # fmt: skip


def test_rack_aware_with_fixed_start_index_is_even() -> None:
    got = assign_replicas(SIX_IN_THREE, 6, 3, start_index=2)
    check_distribution(got, SIX_IN_THREE, 6, 3)


@pytest.mark.parametrize("seed", range(20))
def test_rack_aware_with_random_start_index_is_even(seed: int) -> None:
    got = assign_replicas(SIX_IN_THREE, 6, 3, rng=random.Random(seed))
    check_distribution(got, SIX_IN_THREE, 6, 3)


def test_uneven_replicas_still_put_each_partition_on_three_racks() -> None:
    got = assign_replicas(SIX_IN_THREE, 13, 3, start_index=0)
    check_distribution(got, SIX_IN_THREE, 13, 3, even_leaders=False, even_replicas=False)


@pytest.mark.parametrize("seed", range(10))
def test_uneven_racks_keep_racks_apart_and_leaders_even(seed: int) -> None:
    racks = {0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    got = assign_replicas(racks, 12, 3, rng=random.Random(seed))
    check_distribution(got, racks, 12, 3, even_replicas=False)


@pytest.mark.parametrize(("partitions", "seed"), [(12, 1), (6, 2), (12, 3), (6, 4)])
def test_two_replicas_over_three_racks(partitions: int, seed: int) -> None:
    got = assign_replicas(SIX_IN_THREE, partitions, 2, rng=random.Random(seed))
    check_distribution(got, SIX_IN_THREE, partitions, 2)


def test_expansion_from_partition_twelve_is_even() -> None:
    racks = {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}
    got = assign_replicas(racks, 12, 2, start_partition=12, rng=random.Random(7))
    assert sorted(got) == list(range(12, 24))
    check_distribution({p - 12: r for p, r in got.items()}, racks, 12, 2)


def test_three_brokers_in_three_racks() -> None:
    racks = {0: "rack1", 1: "rack2", 4: "rack3"}
    got = assign_replicas(racks, 3, 2, rng=random.Random(11))
    check_distribution(got, racks, 3, 2)


def test_many_partitions_over_twelve_brokers() -> None:
    racks = dict(SIX_IN_THREE)
    racks.update({6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack1", 11: "rack3"})
    got = assign_replicas(racks, 96, 3, rng=random.Random(3))
    check_distribution(got, racks, 96, 3)


def test_more_replicas_than_racks_covers_every_rack() -> None:
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    got = assign_replicas(racks, 6, 5, rng=random.Random(5))
    assert all(len(r) == 5 for r in got.values())
    assert all(len({racks[b] for b in r}) == 3 for r in got.values())


def test_fewer_replicas_than_racks_never_share_a_rack() -> None:
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    got = assign_replicas(racks, 6, 2, rng=random.Random(6))
    assert all(len({racks[b] for b in r}) == 2 for r in got.values())


def test_single_rack_falls_back_to_spreading_over_brokers() -> None:
    racks = dict.fromkeys(range(6), "rack1")
    got = assign_replicas(racks, 6, 3, rng=random.Random(8))
    assert all(len(set(r)) == 3 for r in got.values())
    assert Counter(r[0] for r in got.values()) == dict.fromkeys(range(6), 1)


def test_a_broker_is_skipped_when_it_already_holds_a_replica() -> None:
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}
    got = assign_replicas(racks, 6, 4, start_index=2)
    check_distribution(got, racks, 6, 4, rack_aware=False, even_leaders=False, even_replicas=False)


def test_rack_unaware_matches_kafkas_documented_example() -> None:
    got = assign_replicas(range(5), 10, 3, start_index=0)
    assert got == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }  # fmt: skip
    # A map without racks is the same as plain ids.
    assert assign_replicas(dict.fromkeys(range(5)), 10, 3, start_index=0) == got


def test_rack_unaware_spreads_leaders_and_replicas_evenly() -> None:
    got = assign_replicas([3, 1, 2], 30, 3, rng=random.Random(5))
    assert Counter(r[0] for r in got.values()) == {1: 10, 2: 10, 3: 10}
    assert all(len(set(r)) == 3 for r in got.values())


def test_random_start_varies_and_is_seedable() -> None:
    starts = {assign_replicas(range(10), 1, 1, rng=random.Random(s))[0][0] for s in range(40)}
    assert len(starts) > 3
    seeded = [assign_replicas(SIX_IN_THREE, 4, 2, rng=random.Random(1)) for _ in range(2)]
    assert seeded[0] == seeded[1]


def test_invalid_parameters_are_refused_with_kafkas_errors() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: None}
    with pytest.raises(InvalidPartitionsError, match="larger than 0"):
        assign_replicas(racks, 0, 1)
    with pytest.raises(InvalidReplicationFactorError, match="must be larger than 0") as info:
        assign_replicas(racks, 10, 0)
    assert info.value.kafka_error_code == 38
    with pytest.raises(
        InvalidReplicationFactorError,
        match=r"Replication factor: 6 larger than available brokers: 5\.",
    ):
        assign_replicas(racks, 10, 6)
    with pytest.raises(AdminOperationError) as mixed:
        assign_replicas(racks, 10, 5)
    assert str(mixed.value) == MIXED_RACKS_MESSAGE
    assert mixed.value.kafka_error_code == -1  # UNKNOWN_SERVER_ERROR, as a Kafka broker answers


# --- rack-aware modes and added partitions ------------------------------------------


def test_modes_decide_what_mixed_racks_mean() -> None:
    mixed = {1: "a", 2: None, 3: "b"}
    with pytest.raises(AdminOperationError, match="Add --disable-rack-aware") as info:
        placement_racks(mixed, RackAwareMode.ENFORCED)
    assert str(info.value) == ENFORCED_MIXED_RACKS_MESSAGE
    assert placement_racks(mixed, RackAwareMode.SAFE) == {1: None, 2: None, 3: None}
    assert placement_racks(mixed, RackAwareMode.DISABLED) == {1: None, 2: None, 3: None}
    full = {3: "c", 1: "a", 2: "b"}
    assert placement_racks(full, RackAwareMode.ENFORCED) == {1: "a", 2: "b", 3: "c"}
    assert placement_racks(full, RackAwareMode.SAFE) == {1: "a", 2: "b", 3: "c"}
    assert placement_racks(full, RackAwareMode.DISABLED) == {1: None, 2: None, 3: None}
    assert placement_racks(dict.fromkeys([1, 2]), RackAwareMode.ENFORCED) == {1: None, 2: None}


def test_added_partitions_start_at_partition_zeros_leader() -> None:
    assert new_partitions_start_index([1, 2, 3], 2) == 1
    assert new_partitions_start_index([3, 1, 5], 4) == 2  # the first id at or above it
    assert new_partitions_start_index([1, 2, 3], 9) == 0  # gone: from the start
    # Kafka's AdminZkClient: start index and first shift from there, numbering on
    # (the shift grows once at partition 10, a wrap, as for partitions 5..7 of a new topic).
    start = new_partitions_start_index(range(5), 0)
    got = assign_replicas(range(5), 3, 3, start_index=start, start_partition=10)
    assert got == {10: [0, 2, 3], 11: [1, 3, 4], 12: [2, 4, 0]}


# --- properties --------------------------------------------------------------------------


@st.composite
def rack_maps(draw: st.DrawFn) -> dict[int, str]:
    ids = draw(st.lists(st.integers(0, 50), min_size=1, max_size=12, unique=True))
    names = draw(st.lists(st.sampled_from("abcdef"), min_size=len(ids), max_size=len(ids)))
    return dict(zip(ids, names, strict=True))


@settings(max_examples=300, deadline=None)
@given(
    racks=rack_maps(),
    partitions=st.integers(1, 40),
    factor_seed=st.integers(0, 1000),
    seed=st.integers(0, 2**32),
    start_partition=st.integers(0, 30),
)
def test_every_placement_uses_distinct_brokers_on_as_many_racks_as_possible(
    racks: dict[int, str], partitions: int, factor_seed: int, seed: int, start_partition: int
) -> None:
    factor = 1 + factor_seed % len(racks)
    got = assign_replicas(
        racks, partitions, factor, rng=random.Random(seed), start_partition=start_partition
    )
    assert sorted(got) == list(range(start_partition, start_partition + partitions))
    wanted_racks = min(factor, len(set(racks.values())))
    for replicas in got.values():
        assert len(replicas) == factor
        assert len(set(replicas)) == factor
        assert set(replicas) <= set(racks)
        assert len({racks[b] for b in replicas}) == wanted_racks


@settings(max_examples=200, deadline=None)
@given(
    num_racks=st.integers(1, 4),
    per_rack=st.integers(1, 3),
    rounds=st.integers(1, 4),
    extra=st.integers(0, 11),
    factor_seed=st.integers(0, 100),
    seed=st.integers(0, 2**32),
)
def test_balanced_racks_spread_leaders_within_one(
    num_racks: int, per_rack: int, rounds: int, extra: int, factor_seed: int, seed: int
) -> None:
    racks = {b: f"rack{b % num_racks}" for b in range(num_racks * per_rack)}
    n = len(racks)
    partitions = rounds * n + extra % n
    factor = 1 + factor_seed % n
    got = assign_replicas(racks, partitions, factor, rng=random.Random(seed))
    leaders = Counter(r[0] for r in got.values())
    counts = [leaders[b] for b in racks]
    assert max(counts) - min(counts) <= 1
    rack_leaders = Counter(racks[r[0]] for r in got.values())
    per_rack_counts = [rack_leaders[f"rack{i}"] for i in range(num_racks)]
    assert max(per_rack_counts) - min(per_rack_counts) <= 1
