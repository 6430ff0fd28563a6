"""RangeAssignor: each topic cut into contiguous ranges over the ordered
subscribers (Kafka 4.x's server-side RangeAssignor).

Members are ordered static first, by ``group.instance.id``, then the rest by
member id; each subscriber of a topic takes the next ``P // S`` partitions,
the first ``P % S`` one more. So topics with the same partition count and the
same subscribers are co-partitioned: a member gets the same partition numbers
of each, which is what joins need.

Why it ignores ``owned``: Kafka 3.5-3.8 made this assignor sticky, and
KAFKA-16944 (Kafka 3.9/4.x) dropped that because stickiness and
co-partitioning cannot both be kept cheaply; the target is recomputed every
time. Its stickiness is static membership: a static member keeps its place in
the order, so it gets its ranges back whatever member id it rejoins with.
Nor does it look at racks: Kafka removed rack awareness from the server-side
assignors in 3.8 (KAFKA-16694), and moving a range for locality would break
co-partitioning.
"""

from __future__ import annotations

from collections.abc import Mapping

from headwater.group.assignors.helpers import subscribers_by_topic
from headwater.group.assignors.spec import Assignment, MemberSpec, TopicSpec


def range_order(member: MemberSpec) -> tuple[int, str]:
    """Static members first by instance id, then dynamic ones by member id."""
    if member.instance_id is not None:
        return (0, member.instance_id)
    return (1, member.member_id)


class RangeAssignor:
    """Co-partitioned topics give each member the same partition numbers."""

    name: str = "range"

    def assign(
        self, members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]
    ) -> Assignment:
        result: Assignment = {member_id: {} for member_id in members}
        for topic, subscribers in subscribers_by_topic(members, topics).items():
            ordered = sorted(subscribers, key=lambda m: (range_order(members[m]), m))
            quota, extra = divmod(topics[topic].partitions, len(ordered))
            start = 0
            for index, member_id in enumerate(ordered):
                size = quota + (1 if index < extra else 0)
                if size:
                    result[member_id][topic] = frozenset(range(start, start + size))
                start += size
        return result
