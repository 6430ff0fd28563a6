"""The classic protocol's client-side assignors against the Java client's results.

Each expected assignment is one that Kafka's own RangeAssignorTest /
RoundRobinAssignorTest asserts for the same input (without racks).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.client.assignors import (
    RANGE,
    ROUNDROBIN,
    MemberSubscription,
    assign,
    range_assign,
    roundrobin_assign,
    strategies,
)
from headwater.client.types import TopicPartition


def tps(*pairs: tuple[str, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in pairs]


def member(member_id: str, *topics: str, instance: str | None = None) -> MemberSubscription:
    return MemberSubscription(member_id, topics, instance)


TWO_TOPICS_3_3 = {"topic1": 3, "topic2": 3}
MIXED = [
    member("consumer1", "topic1"),
    member("consumer2", "topic1", "topic2"),
    member("consumer3", "topic1"),
]


def test_range_one_consumer_one_topic() -> None:
    assert range_assign({"topic": 3}, [member("c", "topic")]) == {
        "c": tps(("topic", 0), ("topic", 1), ("topic", 2))
    }


def test_range_only_assigns_partitions_of_subscribed_topics_and_skips_unknown_ones() -> None:
    out = range_assign({"topic": 3, "other": 3}, [member("c", "topic", "missing")])
    assert out == {"c": tps(("topic", 0), ("topic", 1), ("topic", 2))}


def test_range_two_consumers_one_partition() -> None:
    out = range_assign({"topic": 1}, [member("consumer1", "topic"), member("consumer2", "topic")])
    assert out == {"consumer1": tps(("topic", 0)), "consumer2": []}


def test_range_mixed_topics() -> None:
    assert range_assign({"topic1": 3, "topic2": 2}, MIXED) == {
        "consumer1": tps(("topic1", 0)),
        "consumer2": tps(("topic1", 1), ("topic2", 0), ("topic2", 1)),
        "consumer3": tps(("topic1", 2)),
    }


def test_range_two_consumers_two_topics_six_partitions() -> None:
    both = ("topic1", "topic2")
    out = range_assign(TWO_TOPICS_3_3, [member("consumer2", *both), member("consumer1", *both)])
    assert out == {
        "consumer1": tps(("topic1", 0), ("topic1", 1), ("topic2", 0), ("topic2", 1)),
        "consumer2": tps(("topic1", 2), ("topic2", 2)),
    }


def test_range_static_members_are_ordered_by_instance_id_and_first() -> None:
    both = ("topic1", "topic2")
    static = [
        member("consumer-b", *both, instance="instance1"),
        member("consumer-a", *both, instance="instance2"),
    ]
    low, high = (
        tps(("topic1", 0), ("topic1", 1), ("topic2", 0), ("topic2", 1)),
        tps(("topic1", 2), ("topic2", 2)),
    )
    assert range_assign(TWO_TOPICS_3_3, static) == {"consumer-b": low, "consumer-a": high}
    mixed = [member("consumer-b", *both, instance="instance1"), member("consumer-a", *both)]
    assert range_assign(TWO_TOPICS_3_3, mixed) == {"consumer-b": low, "consumer-a": high}


def test_roundrobin_two_consumers_two_topics_six_partitions() -> None:
    both = ("topic1", "topic2")
    out = roundrobin_assign(
        TWO_TOPICS_3_3, [member("consumer2", *both), member("consumer1", *both)]
    )
    assert out == {
        "consumer1": tps(("topic1", 0), ("topic1", 2), ("topic2", 1)),
        "consumer2": tps(("topic1", 1), ("topic2", 0), ("topic2", 2)),
    }


def test_roundrobin_mixed_topics_skips_members_not_subscribed() -> None:
    assert roundrobin_assign({"topic1": 3, "topic2": 2}, MIXED) == {
        "consumer1": tps(("topic1", 0)),
        "consumer2": tps(("topic1", 1), ("topic2", 0), ("topic2", 1)),
        "consumer3": tps(("topic1", 2)),
    }


def test_roundrobin_static_member_comes_first() -> None:
    both = ("topic1", "topic2")
    out = roundrobin_assign(
        TWO_TOPICS_3_3,
        [member("consumer-b", *both, instance="instance1"), member("consumer-a", *both)],
    )
    assert out == {
        "consumer-b": tps(("topic1", 0), ("topic1", 2), ("topic2", 1)),
        "consumer-a": tps(("topic1", 1), ("topic2", 0), ("topic2", 2)),
    }


def test_no_members_and_no_topics() -> None:
    assert range_assign({}, []) == {}
    assert roundrobin_assign({"t": 2}, []) == {}
    assert roundrobin_assign({}, [member("c", "t")]) == {"c": []}


def test_strategy_names_follow_kafka_and_librdkafka() -> None:
    assert strategies("range,roundrobin") == [RANGE, ROUNDROBIN]
    assert strategies("org.apache.kafka.clients.consumer.RoundRobinAssignor, range") == [
        ROUNDROBIN,
        RANGE,
    ]
    with pytest.raises(ValueError, match="cooperative-sticky"):
        strategies("cooperative-sticky")
    with pytest.raises(ValueError):
        strategies(" , ")


@given(
    counts=st.dictionaries(st.sampled_from("abcd"), st.integers(0, 12), max_size=4),
    subs=st.lists(st.sets(st.sampled_from("abcd"), min_size=1), min_size=1, max_size=6),
    name=st.sampled_from([RANGE, ROUNDROBIN]),
)
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(
    counts: dict[str, int], subs: list[set[str]], name: str
) -> None:
    members = [member(f"m{i}", *sorted(s)) for i, s in enumerate(subs)]
    out = assign(name, counts, members)
    owners: dict[TopicPartition, str] = {}
    for m in members:
        for tp in out[m.member_id]:
            assert tp.topic in m.topics
            assert tp not in owners
            owners[tp] = m.member_id
    wanted = {
        TopicPartition(t, p)
        for t, n in counts.items()
        if any(t in s for s in subs)
        for p in range(n)
    }
    assert set(owners) == wanted
    # Balanced per topic when every member subscribes to the same topics (both assignors).
    if all(s == subs[0] for s in subs):
        sizes = [len(out[m.member_id]) for m in members]
        per_topic = max(sizes) - min(sizes)
        assert per_topic <= (len(counts) if name == RANGE else 1)
