"""Admission control, offset ranges and data-loss rules of the Spark source."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.spark.planning import (
    DataLossError,
    OffsetRange,
    available_now_offsets,
    offset_ranges,
    rate_limit,
    split_ranges,
)

backlogs = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 40)),
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**5)),
    min_size=1,
    max_size=40,
)


@given(backlogs, st.integers(1, 10**5))
def test_rate_limit_admits_exactly_the_budget_or_everything(spec, budget) -> None:
    start = {tp: s for tp, (s, _) in spec.items()}
    end = {tp: s + n for tp, (s, n) in spec.items()}
    limited = rate_limit(start, end, budget)
    admitted = sum(limited[tp] - start[tp] for tp in start)
    assert admitted == min(budget, sum(n for _, n in spec.values()))
    assert all(start[tp] <= limited[tp] <= end[tp] for tp in start)


@given(backlogs, st.integers(1, 10**5))
def test_rate_limit_starves_no_backlogged_partition_when_budget_allows(spec, budget) -> None:
    start = {tp: s for tp, (s, _) in spec.items()}
    end = {tp: s + n for tp, (s, n) in spec.items()}
    backlogged = [tp for tp in start if end[tp] > start[tp]]
    limited = rate_limit(start, end, budget)
    if budget >= len(backlogged):
        assert all(limited[tp] > start[tp] for tp in backlogged)


def test_rate_limit_shares_in_proportion_to_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    end = {("t", 0): 300, ("t", 1): 200}
    assert rate_limit(start, end, 40) == {("t", 0): 30, ("t", 1): 110}


def test_rate_limit_keeps_partitions_without_a_start_whole() -> None:
    limited = rate_limit({("t", 0): 0}, {("t", 0): 100, ("t", 1): 7}, 10)
    assert limited == {("t", 0): 10, ("t", 1): 7}


def test_ranges_skip_empty_partitions_and_read_new_ones_from_their_start() -> None:
    start = {("t", 0): 5, ("t", 1): 9}
    end = {("t", 0): 8, ("t", 1): 9, ("t", 2): 4}
    ranges = offset_ranges(start, end, {("t", 2): 0}, fail_on_data_loss=True)
    assert ranges == [OffsetRange("t", 0, 5, 8), OffsetRange("t", 2, 0, 4)]


def test_new_partition_whose_start_was_deleted_is_data_loss() -> None:
    with pytest.raises(DataLossError, match="new partition t-1"):
        offset_ranges({("t", 0): 0}, {("t", 0): 0, ("t", 1): 9}, {("t", 1): 3}, True)
    ranges = offset_ranges({("t", 0): 0}, {("t", 0): 0, ("t", 1): 9}, {("t", 1): 3}, False)
    assert ranges == [OffsetRange("t", 1, 3, 9)]


def test_deleted_partition_is_data_loss() -> None:
    with pytest.raises(DataLossError, match="t-1 is gone"):
        offset_ranges({("t", 0): 0, ("t", 1): 4}, {("t", 0): 2}, {}, True)
    assert offset_ranges({("t", 0): 0, ("t", 1): 4}, {("t", 0): 2}, {}, False) == [
        OffsetRange("t", 0, 0, 2)
    ]


def test_offsets_going_backwards_is_data_loss() -> None:
    with pytest.raises(DataLossError, match="went back"):
        offset_ranges({("t", 0): 50}, {("t", 0): 10}, {}, True)
    assert offset_ranges({("t", 0): 50}, {("t", 0): 10}, {}, False) == []


def test_offsets_deleted_by_retention_raise_or_are_skipped() -> None:
    with pytest.raises(DataLossError, match="were deleted"):
        offset_ranges({("t", 0): 10}, {("t", 0): 100}, {("t", 0): 40}, True)
    assert offset_ranges({("t", 0): 10}, {("t", 0): 100}, {("t", 0): 40}, False) == [
        OffsetRange("t", 0, 40, 100)
    ]
    # Everything in the range was deleted: nothing left to read.
    assert offset_ranges({("t", 0): 10}, {("t", 0): 30}, {("t", 0): 40}, False) == []


ranges_lists = st.lists(
    st.builds(
        lambda p, s, n: OffsetRange("t", p, s, s + n),
        st.integers(0, 1000),
        st.integers(0, 10**6),
        st.integers(0, 500),
    ),
    max_size=12,
    unique_by=lambda r: r.partition,
)


@given(ranges_lists, st.integers(1, 64))
def test_split_ranges_covers_each_range_exactly_and_reaches_min_partitions(ranges, n) -> None:
    pieces = split_ranges(ranges, n)
    for r in ranges:
        mine = sorted((p for p in pieces if p.partition == r.partition), key=lambda p: p.start)
        if r.size == 0:
            assert mine == []
            continue
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in pairwise(mine))
        assert all(p.size > 0 for p in mine)
    nonempty = [r for r in ranges if r.size]
    assert len(pieces) >= min(n, sum(r.size for r in nonempty), max(n, len(nonempty)))


def test_without_min_partitions_each_partition_is_one_task() -> None:
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10)]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges


def test_split_ranges_cuts_big_range_into_near_equal_pieces() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 0, 10)], 3)
    assert [p.size for p in pieces] == [4, 3, 3]


def test_available_now_target_caps_offsets_and_hides_later_partitions() -> None:
    latest = {("t", 0): 100, ("t", 1): 5, ("t", 2): 7}
    target = {("t", 0): 60, ("t", 1): 9}
    assert available_now_offsets(latest, target, {}) == {("t", 0): 60, ("t", 1): 5}


def test_available_now_keeps_partitions_already_read_but_unknown_to_the_target() -> None:
    latest = {("t", 0): 100, ("t", 1): 50}
    target = {("t", 0): 60}
    start = {("t", 0): 10, ("t", 1): 20}
    assert available_now_offsets(latest, target, start) == {("t", 0): 60, ("t", 1): 20}
