"""What both assignors need: who subscribes to what, which owned partitions
still count, and turning per-member lists back into the answer's shape.

Inputs are trusted only as far as the rules need: an owned partition of a
topic that is gone, beyond the topic's partition count, no longer subscribed,
or claimed by two members (the first member id in sorted order wins) is
simply not owned any more. That keeps every assignor total on any input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from headwater.group.assignors.spec import Assignment, MemberSpec, TopicSpec

TopicPartition = tuple[str, int]


def subscribed_topics(member: MemberSpec, topics: Mapping[str, TopicSpec]) -> list[str]:
    """The member's subscribed topics that exist, sorted by name."""
    return sorted(t for t in member.subscribed_topics if t in topics)


def subscribers_by_topic(
    members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]
) -> dict[str, list[str]]:
    """Each existing, subscribed topic with at least one partition -> sorted subscriber ids."""
    result: dict[str, list[str]] = {}
    for member_id in sorted(members):
        for topic in subscribed_topics(members[member_id], topics):
            if topics[topic].partitions > 0:
                result.setdefault(topic, []).append(member_id)
    return result


def is_homogeneous(members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]) -> bool:
    """Whether every member subscribes to the same existing topics (Kafka's HOMOGENEOUS)."""
    seen: frozenset[str] | None = None
    for member in members.values():
        mine = frozenset(t for t in member.subscribed_topics if t in topics)
        if seen is None:
            seen = mine
        elif mine != seen:
            return False
    return True


def valid_owned(
    members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]
) -> dict[str, list[TopicPartition]]:
    """Each member's owned partitions that it may keep, sorted; one owner each."""
    claimed: set[TopicPartition] = set()
    result: dict[str, list[TopicPartition]] = {}
    for member_id in sorted(members):
        member = members[member_id]
        mine: list[TopicPartition] = []
        for topic in sorted(member.owned):
            spec = topics.get(topic)
            if spec is None or topic not in member.subscribed_topics:
                continue
            for partition in sorted(member.owned[topic]):
                tp = (topic, partition)
                if 0 <= partition < spec.partitions and tp not in claimed:
                    claimed.add(tp)
                    mine.append(tp)
        result[member_id] = mine
    return result


def to_assignment(
    members: Iterable[str], targets: Mapping[str, Iterable[TopicPartition]]
) -> Assignment:
    """Per-member partition lists -> member -> topic -> frozenset, every member present."""
    result: Assignment = {}
    for member_id in members:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in targets.get(member_id, ()):
            by_topic.setdefault(topic, []).append(partition)
        result[member_id] = {topic: frozenset(parts) for topic, parts in by_topic.items()}
    return result
