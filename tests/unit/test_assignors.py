"""The server-side assignors on Kafka's own cases (group-coordinator's
OptimizedUniformAssignmentBuilderTest, UniformHeterogeneousAssignmentBuilderTest
and RangeAssignorTest), translated, plus Headwater's rack and edge cases.

Kafka keys topics by random Uuids and walks them in HashSet order, so where
its expected answer depends on which topic comes first, Headwater's (sorted
topic names) can differ: those cases say so and pin Headwater's answer,
which has the same counts and keeps the same owned partitions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest

from headwater.group.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    MemberSpec,
    RangeAssignor,
    TopicSpec,
    UniformAssignor,
)
from headwater.group.assignors.spec import Assignment
from headwater.group.assignors.uniform_heterogeneous import assign_heterogeneous

Owned = Mapping[str, set[int]]


def member(
    member_id: str,
    subscribed: set[str],
    owned: Owned | None = None,
    *,
    rack: str | None = None,
    instance_id: str | None = None,
) -> MemberSpec:
    return MemberSpec(
        member_id=member_id,
        rack=rack,
        subscribed_topics=frozenset(subscribed),
        owned={t: frozenset(p) for t, p in (owned or {}).items()},
        instance_id=instance_id,
    )


def group(*members: MemberSpec) -> dict[str, MemberSpec]:
    return {m.member_id: m for m in members}


def topics(
    racks: Mapping[str, Mapping[int, set[str]]] | None = None, **counts: int
) -> dict[str, TopicSpec]:
    racks = racks or {}
    return {
        name: TopicSpec(name, n, {p: frozenset(r) for p, r in racks.get(name, {}).items()})
        for name, n in counts.items()
    }


def expect(**members: Owned) -> Assignment:
    return {m: {t: frozenset(p) for t, p in parts.items()} for m, parts in members.items()}


def sizes(assignment: Assignment) -> dict[str, int]:
    return {m: sum(len(p) for p in parts.values()) for m, parts in assignment.items()}


UNIFORM = UniformAssignor()
RANGE = RangeAssignor()


def test_the_registry_names_both_assignors_and_uniform_is_the_default() -> None:
    assert set(ASSIGNORS) == {"uniform", "range"}
    assert DEFAULT_ASSIGNOR == "uniform"
    assert all(ASSIGNORS[name].name == name for name in ASSIGNORS)


# --- uniform, homogeneous (OptimizedUniformAssignmentBuilderTest)


def test_uniform_one_member_without_subscriptions_gets_nothing() -> None:
    assert UNIFORM.assign(group(member("A", set())), topics(topic1=3)) == {"A": {}}


def test_uniform_a_subscription_to_a_missing_topic_assigns_nothing() -> None:
    # Kafka throws PartitionAssignorException; the coordinator passes only topics that exist.
    assert UNIFORM.assign(group(member("A", {"topic2"})), topics(topic1=3)) == {"A": {}}


def test_uniform_first_assignment_two_members_two_topics() -> None:
    # Kafka's answer (HashSet order put topic3 first): A={t1:0, t3:0,1}, B={t1:1,2}.
    result = UNIFORM.assign(
        group(member("A", {"topic1", "topic3"}), member("B", {"topic1", "topic3"})),
        topics(topic1=3, topic3=2),
    )
    assert result == expect(A={"topic1": {0, 1, 2}}, B={"topic3": {0, 1}})


def test_uniform_more_members_than_partitions_leaves_one_empty() -> None:
    result = UNIFORM.assign(
        group(member("A", {"topic3"}), member("B", {"topic3"}), member("C", {"topic3"})),
        topics(topic3=2),
    )
    assert result == expect(A={"topic3": {0}}, B={"topic3": {1}}, C={})


def test_uniform_large_sample_is_valid_and_balanced() -> None:
    names = {f"topic-{i}" for i in range(1, 100)}
    members = group(*(member(f"member{i}", names) for i in range(1, 50)))
    result = UNIFORM.assign(members, {n: TopicSpec(n, 3, {}) for n in names})
    counts = sizes(result).values()
    assert max(counts) - min(counts) <= 1
    assigned = [(t, p) for parts in result.values() for t, ps in parts.items() for p in ps]
    assert len(assigned) == len(set(assigned)) == 99 * 3


def test_uniform_unbalanced_previous_assignment_is_rebalanced_keeping_most() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic1", "topic2"}, {"topic1": {0, 1}, "topic2": {0, 1}}),
            member("B", {"topic1", "topic2"}, {"topic1": {2}, "topic2": {2}}),
        ),
        topics(topic1=3, topic2=3),
    )
    assert result == expect(
        A={"topic1": {0, 1}, "topic2": {0}}, B={"topic1": {2}, "topic2": {1, 2}}
    )


def test_uniform_partitions_added_go_to_members_with_room() -> None:
    # Kafka (topic2 first in its HashSet): A={t1:0,2,3, t2:0,3,4}, B={t1:1,4,5, t2:1,2}.
    result = UNIFORM.assign(
        group(
            member("A", {"topic1", "topic2"}, {"topic1": {0, 2}, "topic2": {0}}),
            member("B", {"topic1", "topic2"}, {"topic1": {1}, "topic2": {1, 2}}),
        ),
        topics(topic1=6, topic2=5),
    )
    assert result == expect(
        A={"topic1": {0, 2, 3, 4, 5}, "topic2": {0}},
        B={"topic1": {1}, "topic2": {1, 2, 3, 4}},
    )


def test_uniform_member_added_takes_only_what_balance_needs() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic1", "topic2"}, {"topic1": {0, 2}, "topic2": {0}}),
            member("B", {"topic1", "topic2"}, {"topic1": {1}, "topic2": {1, 2}}),
            member("C", {"topic1", "topic2"}),
        ),
        topics(topic1=3, topic2=3),
    )
    assert result == expect(
        A={"topic1": {0, 2}}, B={"topic1": {1}, "topic2": {1}}, C={"topic2": {0, 2}}
    )


def test_uniform_member_removed_its_partitions_spread_and_the_rest_stay() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic1", "topic2"}, {"topic1": {0}, "topic2": {0}}),
            member("B", {"topic1", "topic2"}, {"topic1": {1}, "topic2": {1}}),
        ),
        topics(topic1=3, topic2=3),
    )
    # Kafka: A={t1:0, t2:0,2}, B={t1:1,2, t2:1}; the same up to which of the two goes where.
    assert result == expect(
        A={"topic1": {0, 2}, "topic2": {0}}, B={"topic1": {1}, "topic2": {1, 2}}
    )


def test_uniform_subscription_removed_drops_the_topic() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic2"}, {"topic1": {0}, "topic2": {0}}),
            member("B", {"topic2"}, {"topic1": {1}, "topic2": {1}}),
        ),
        topics(topic1=2, topic2=2),
    )
    assert result == expect(A={"topic2": {0}}, B={"topic2": {1}})


def test_uniform_topic_deleted_and_partitions_shrunk_drop_from_owned() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic1", "gone"}, {"topic1": {0, 1}, "gone": {0}}),
            member("B", {"topic1", "gone"}, {"topic1": {2, 3}}),
        ),
        topics(topic1=3),
    )
    assert result == expect(A={"topic1": {0, 1}}, B={"topic1": {2}})


def test_uniform_a_partition_claimed_twice_stays_with_the_first_member_id() -> None:
    result = UNIFORM.assign(
        group(member("A", {"t"}, {"t": {0}}), member("B", {"t"}, {"t": {0, 1}})),
        topics(t=2),
    )
    assert result == expect(A={"t": {0}}, B={"t": {1}})


def test_uniform_no_members_no_assignment() -> None:
    assert UNIFORM.assign({}, topics(t=3)) == {}
    assert RANGE.assign({}, topics(t=3)) == {}


# --- uniform, heterogeneous (UniformHeterogeneousAssignmentBuilderTest)


def test_heterogeneous_two_members_without_subscriptions() -> None:
    members = group(member("A", set()), member("B", set()))
    assert assign_heterogeneous(members, topics(topic1=3)) == {"A": {}, "B": {}}


def test_heterogeneous_first_assignment_two_members_two_topics() -> None:
    result = UNIFORM.assign(
        group(member("A", {"topic1", "topic3"}), member("B", {"topic3"})),
        topics(topic1=3, topic3=6),
    )
    # Kafka: A={t1:0,1,2, t3:4}, B={t3:0,1,2,3,5}. Its balancer walks tied members round-robin
    # from the last one served; Headwater gives a tie to the smaller member id. Both are 5/4.
    assert result == expect(A={"topic1": {0, 1, 2}, "topic3": {3, 5}}, B={"topic3": {0, 1, 2, 4}})


def test_heterogeneous_more_members_than_partitions() -> None:
    result = UNIFORM.assign(
        group(member("A", {"topic3"}), member("B", {"topic3"}), member("C", {"topic1"})),
        topics(topic3=1, topic1=2),
    )
    assert result == expect(A={"topic3": {0}}, B={}, C={"topic1": {0, 1}})


def test_heterogeneous_unbalanced_previous_assignment_three_topics() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic1"}, {"topic1": {0, 1, 2}}),
            member("B", {"topic1", "topic2"}, {"topic1": {3}, "topic2": {0}}),
            member(
                "C",
                {"topic1", "topic2", "topic3"},
                {"topic1": {4, 5}, "topic2": {1, 2, 3}, "topic3": {0, 1, 2, 3}},
            ),
        ),
        topics(topic1=6, topic2=4, topic3=4),
    )
    assert result == expect(
        A={"topic1": {0, 1, 2, 5}},
        B={"topic1": {3}, "topic2": {0, 1, 2, 3}},
        C={"topic1": {4}, "topic3": {0, 1, 2, 3}},
    )


def test_heterogeneous_partitions_added_for_two_members() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic1", "topic3"}, {"topic1": {0, 1, 2, 3}, "topic3": {0, 1}}),
            member(
                "B",
                {"topic1", "topic2", "topic3", "topic4"},
                {"topic2": {0, 1, 2}, "topic4": {0, 1, 2}},
            ),
        ),
        topics(topic1=6, topic2=5, topic3=3, topic4=3),
    )
    assert result == expect(
        A={"topic1": {0, 1, 2, 3, 4, 5}, "topic3": {0, 1, 2}},
        B={"topic2": {0, 1, 2, 3, 4}, "topic4": {0, 1, 2}},
    )


def test_heterogeneous_member_and_partitions_added() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic1"}, {"topic1": {0, 2}, "topic2": {0}}),
            member("B", {"topic1", "topic2"}, {"topic1": {1}, "topic2": {1, 2}}),
            member("C", {"topic1", "topic2"}),
        ),
        topics(topic1=6, topic2=7),
    )
    # Kafka: B={t1:1, t2:1,2,6}, C={t2:0,3,4,5}: the same counts, a tie broken the other way.
    assert result == expect(
        A={"topic1": {0, 2, 3, 4, 5}},
        B={"topic1": {1}, "topic2": {1, 2, 5}},
        C={"topic2": {0, 3, 4, 6}},
    )


def test_heterogeneous_member_removed_three_topics() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic1", "topic3"}, {"topic1": {0, 1, 2}, "topic3": {0, 1}}),
            member("B", {"topic2"}, {"topic2": {3, 4, 5, 6}}),
        ),
        topics(topic1=3, topic2=8, topic3=3),
    )
    assert result == expect(
        A={"topic1": {0, 1, 2}, "topic3": {0, 1, 2}}, B={"topic2": set(range(8))}
    )


def test_heterogeneous_subscription_removed() -> None:
    result = UNIFORM.assign(
        group(
            member("A", {"topic1"}, {"topic1": {0, 2}, "topic2": {1, 3}}),
            member("B", {"topic1", "topic2"}, {"topic1": {1}, "topic2": {0, 2, 4}}),
        ),
        topics(topic1=3, topic2=5),
    )
    assert result == expect(A={"topic1": {0, 1, 2}}, B={"topic2": {0, 1, 2, 3, 4}})


def test_heterogeneous_builder_balances_when_partitions_run_out() -> None:
    # Kafka runs its heterogeneous builder directly on identical subscriptions here.
    members = group(
        member(
            "A",
            {"topic1", "topic2", "topic3"},
            {"topic1": {0, 1}, "topic2": {0, 1}, "topic3": {0, 1}},
        ),
        member("B", {"topic1", "topic2", "topic3"}),
    )
    result = assign_heterogeneous(members, topics(topic1=2, topic2=2, topic3=2))
    assert result == expect(
        A={"topic2": {0}, "topic3": {0, 1}}, B={"topic1": {0, 1}, "topic2": {1}}
    )


def test_heterogeneous_member_without_subscriptions_gets_nothing() -> None:
    result = UNIFORM.assign(group(member("A", {"topic1"}), member("B", set())), topics(topic1=3))
    assert result == expect(A={"topic1": {0, 1, 2}}, B={})


# --- uniform, racks

RACKS_2 = {"t": {0: {"r1"}, 1: {"r2"}, 2: {"r1"}, 3: {"r2"}}}


def test_uniform_first_assignment_follows_racks() -> None:
    result = UNIFORM.assign(
        group(member("A", {"t"}, rack="r2"), member("B", {"t"}, rack="r1")),
        topics(RACKS_2, t=4),
    )
    assert result == expect(A={"t": {1, 3}}, B={"t": {0, 2}})


def test_uniform_racks_never_cost_balance() -> None:
    result = UNIFORM.assign(
        group(member("A", {"t"}, rack="r1"), member("B", {"t"}, rack="r3")),
        topics({"t": {p: {"r1"} for p in range(4)}}, t=4),
    )
    assert sizes(result) == {"A": 2, "B": 2}


def test_uniform_racks_outrank_stickiness_once_then_the_result_is_stable() -> None:
    # Both own the other rack's partitions: a swap gains locality at no cost in balance.
    members = group(
        member("A", {"t"}, {"t": {0, 2}}, rack="r2"),
        member("B", {"t"}, {"t": {1, 3}}, rack="r1"),
    )
    result = UNIFORM.assign(members, topics(RACKS_2, t=4))
    assert result == expect(A={"t": {1, 3}}, B={"t": {0, 2}})
    again = group(
        *(
            member(m, {"t"}, {t: set(p) for t, p in result[m].items()}, rack=members[m].rack)
            for m in result
        )
    )
    assert UNIFORM.assign(again, topics(RACKS_2, t=4)) == result


def test_uniform_locality_first_then_partitions_without_a_rack_stay_where_they_can() -> None:
    members = group(
        member("A", {"t"}, {"t": {0, 1}}, rack="r1"),
        member("B", {"t"}, {"t": {2, 3}}, rack="r2"),
    )
    racks = {"t": {0: {"r9"}, 1: {"r9"}, 2: {"r2"}, 3: {"r1"}}}
    result = UNIFORM.assign(members, topics(racks, t=4))
    # t3 (rack r1) moves to A for locality; of the partitions no rack holds, t0 stays
    # with A and t1 fills B's free slot.
    assert result == expect(A={"t": {0, 3}}, B={"t": {1, 2}})


def test_uniform_member_joining_in_a_rack_takes_that_rack_partitions() -> None:
    racks = {"t": {p: {f"r{p % 3}"} for p in range(6)}}
    members = group(
        member("A", {"t"}, {"t": {0, 2, 4}}, rack="r0"),
        member("B", {"t"}, {"t": {1, 3, 5}}, rack="r1"),
        member("C", {"t"}, rack="r2"),
    )
    result = UNIFORM.assign(members, topics(racks, t=6))
    assert result == expect(A={"t": {0, 3}}, B={"t": {1, 4}}, C={"t": {2, 5}})


def test_uniform_ignores_racks_when_every_partition_is_on_every_rack() -> None:
    racks = {"t": {p: {"r1", "r2"} for p in range(4)}}
    members = group(
        member("A", {"t"}, {"t": {0, 1}}, rack="r1"), member("B", {"t"}, {"t": {2, 3}}, rack="r2")
    )
    assert UNIFORM.assign(members, topics(racks, t=4)) == expect(A={"t": {0, 1}}, B={"t": {2, 3}})


def test_heterogeneous_places_new_partitions_in_rack_on_ties() -> None:
    racks = {"t": {0: {"r2"}, 1: {"r1"}}, "u": {0: {"r1"}}}
    result = UNIFORM.assign(
        group(member("A", {"t", "u"}, rack="r1"), member("B", {"t"}, rack="r2")),
        topics(racks, t=2, u=1),
    )
    assert result == expect(A={"t": {1}, "u": {0}}, B={"t": {0}})


# --- range (RangeAssignorTest)


def test_range_one_member_no_topic() -> None:
    assert RANGE.assign(group(member("A", set())), topics(topic1=3)) == {"A": {}}


def test_range_first_assignment_same_subscriptions_is_co_partitioned() -> None:
    result = RANGE.assign(
        group(member("A", {"topic1", "topic3"}), member("B", {"topic1", "topic3"})),
        topics(topic1=3, topic3=2),
    )
    assert result == expect(A={"topic1": {0, 1}, "topic3": {0}}, B={"topic1": {2}, "topic3": {1}})


def test_range_first_assignment_different_subscriptions() -> None:
    result = RANGE.assign(
        group(
            member("A", {"topic1", "topic2"}),
            member("B", {"topic3"}),
            member("C", {"topic2", "topic3"}),
        ),
        topics(topic1=3, topic2=3, topic3=2),
    )
    assert result == expect(
        A={"topic1": {0, 1, 2}, "topic2": {0, 1}},
        B={"topic3": {0}},
        C={"topic2": {2}, "topic3": {1}},
    )


def test_range_more_members_than_partitions() -> None:
    result = RANGE.assign(
        group(*(member(m, {"topic1", "topic3"}) for m in "ABC")), topics(topic1=3, topic3=2)
    )
    assert result == expect(
        A={"topic1": {0}, "topic3": {0}}, B={"topic1": {1}, "topic3": {1}}, C={"topic1": {2}}
    )


def test_range_static_member_rejoining_with_a_new_id_gets_its_ranges_back() -> None:
    t = topics(topic1=3)
    before = RANGE.assign(
        group(
            member("A", {"topic1"}, instance_id="instanceA"),
            member("B", {"topic1"}, instance_id="instanceB"),
        ),
        t,
    )
    after = RANGE.assign(
        group(
            member("B", {"topic1"}, instance_id="instanceB"),
            member("memberA1", {"topic1"}, instance_id="instanceA"),
        ),
        t,
    )
    assert after["memberA1"] == before["A"] and after["B"] == before["B"]


def test_range_mixed_static_membership_static_members_first() -> None:
    t = topics(topic1=5)
    before = RANGE.assign(
        group(
            member("A", {"topic1"}, instance_id="instanceA"),
            member("C", {"topic1"}, instance_id="instanceC"),
            member("B", {"topic1"}),
        ),
        t,
    )
    assert before == expect(A={"topic1": {0, 1}}, C={"topic1": {2, 3}}, B={"topic1": {4}})
    after = RANGE.assign(
        group(
            member("memberA1", {"topic1"}, instance_id="instanceA"),
            member("C", {"topic1"}, instance_id="instanceC"),
            member("B", {"topic1"}),
        ),
        t,
    )
    assert (
        after["memberA1"] == before["A"] and after["B"] == before["B"] and after["C"] == before["C"]
    )


def test_range_member_added_when_members_outnumber_partitions_gets_nothing() -> None:
    result = RANGE.assign(
        group(
            member("A", {"topic1", "topic2"}, {"topic1": {0}, "topic2": {0}}),
            member("B", {"topic1", "topic2"}, {"topic1": {1}, "topic2": {1}}),
            member("C", {"topic1", "topic2"}),
        ),
        topics(topic1=2, topic2=2),
    )
    assert result == expect(
        A={"topic1": {0}, "topic2": {0}}, B={"topic1": {1}, "topic2": {1}}, C={}
    )


def test_range_partition_added() -> None:
    result = RANGE.assign(
        group(
            member("A", {"topic1", "topic2"}, {"topic1": {0, 1}, "topic2": {0, 1}}),
            member("B", {"topic1", "topic2"}, {"topic1": {2}, "topic2": {2}}),
        ),
        topics(topic1=4, topic2=4),
    )
    assert result == expect(
        A={"topic1": {0, 1}, "topic2": {0, 1}}, B={"topic1": {2, 3}, "topic2": {2, 3}}
    )


def test_range_member_added() -> None:
    result = RANGE.assign(
        group(
            member("A", {"topic1", "topic2"}, {"topic1": {0, 1}, "topic2": {0, 1}}),
            member("B", {"topic1", "topic2"}, {"topic1": {2}, "topic2": {2}}),
            member("C", {"topic1", "topic2"}),
        ),
        topics(topic1=3, topic2=3),
    )
    assert result == expect(
        A={"topic1": {0}, "topic2": {0}},
        B={"topic1": {1}, "topic2": {1}},
        C={"topic1": {2}, "topic2": {2}},
    )


def test_range_member_and_partition_added() -> None:
    result = RANGE.assign(
        group(
            member("A", {"topic1", "topic2"}, {"topic1": {0, 1}, "topic2": {0, 1}}),
            member("B", {"topic1", "topic2"}, {"topic1": {2}, "topic2": {2}}),
            member("C", {"topic1"}),
        ),
        topics(topic1=4, topic2=3),
    )
    assert result == expect(
        A={"topic1": {0, 1}, "topic2": {0, 1}}, B={"topic1": {2}, "topic2": {2}}, C={"topic1": {3}}
    )


def test_range_member_removed() -> None:
    result = RANGE.assign(
        group(member("B", {"topic1", "topic2"}, {"topic1": {2}, "topic2": {2}})),
        topics(topic1=3, topic2=3),
    )
    assert result == expect(B={"topic1": {0, 1, 2}, "topic2": {0, 1, 2}})


def test_range_multiple_subscriptions_removed() -> None:
    result = RANGE.assign(
        group(
            member("A", {"topic1"}, {"topic1": {0, 1, 2}, "topic2": {0}}),
            member("B", {"topic1", "topic2", "topic3"}, {"topic2": {1}}),
            member("C", {"topic2"}, {"topic2": {2}, "topic3": {0, 1}}),
        ),
        topics(topic1=3, topic2=3, topic3=2),
    )
    assert result == expect(
        A={"topic1": {0, 1}},
        B={"topic1": {2}, "topic2": {0, 1}, "topic3": {0, 1}},
        C={"topic2": {2}},
    )


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_the_same_input_gives_the_same_output(assignor: UniformAssignor | RangeAssignor) -> None:
    members = group(
        member("m2", {"a", "b"}, {"a": {1}}, rack="r1"),
        member("m1", {"a"}, rack="r2"),
        member("m3", {"b"}, {"b": {0, 1}}),
    )
    t = topics({"a": {0: {"r1"}, 1: {"r2"}}}, a=5, b=3)
    reordered = dict(reversed(list(members.items())))
    assert assignor.assign(members, t) == assignor.assign(reordered, t)


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_a_thousand_members_over_ten_thousand_partitions_is_quick(
    assignor: UniformAssignor | RangeAssignor,
) -> None:
    # Tens of ms (bench/bench_consumer_groups.py); the bound only catches a blow-up.
    names = frozenset(f"t{i}" for i in range(10))
    members = group(*(member(f"m{i:04d}", set(names)) for i in range(1000)))
    start = time.perf_counter()
    result = assignor.assign(members, {n: TopicSpec(n, 1000, {}) for n in names})
    assert time.perf_counter() - start < 5.0
    assert sum(sizes(result).values()) == 10_000
