"""Rack matching for the uniform assignor (KIP-881's idea on the server side).

A member "matches" a partition when the member's rack holds one of the
partition's replicas: fetching from there (KIP-392) stays in the rack.

Kafka 3.7's server-side uniform assignor was rack-aware; Kafka 3.8 removed it
(KAFKA-16694, for speed) and 4.x has only an open patch to bring it back to
the homogeneous builder (KAFKA-19909). Headwater keeps the preference, with
Kafka 3.7's rule for when it is worth applying at all.
"""

from __future__ import annotations

from collections.abc import Mapping

from headwater.group.assignors.spec import MemberSpec, TopicSpec

_NO_RACKS: frozenset[str] = frozenset()


def partition_racks(topic: TopicSpec, partition: int) -> frozenset[str]:
    """The racks of a partition's replicas, empty when unknown."""
    return topic.partition_racks.get(partition, _NO_RACKS)


def use_rack_awareness(
    members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec], subscribed: list[str]
) -> bool:
    """Kafka 3.7's rule: members have racks, some of them hold replicas, and
    partitions do not all sit on the same racks (then every choice is equal)."""
    member_racks = {m.rack for m in members.values() if m.rack}
    if not member_racks:
        return False
    all_racks: set[str] = set()
    rack_sets: set[frozenset[str]] = set()
    for name in subscribed:
        topic = topics[name]
        for partition in range(topic.partitions):
            racks = partition_racks(topic, partition)
            all_racks |= racks
            rack_sets.add(racks)
    if member_racks.isdisjoint(all_racks):
        return False
    return rack_sets != {frozenset(all_racks)}
