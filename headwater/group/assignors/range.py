"""RangeAssignor: each topic cut into contiguous ranges over sorted member ids."""

from __future__ import annotations

from collections.abc import Mapping

from headwater.group.assignors.spec import Assignment, MemberSpec, TopicSpec


class RangeAssignor:
    """Co-partitioned topics give each member the same partition numbers."""

    name: str = "range"

    def assign(
        self, members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]
    ) -> Assignment:
        result: Assignment = {member_id: {} for member_id in members}
        for topic in sorted(topics):
            subscribers = sorted(m for m, s in members.items() if topic in s.subscribed_topics)
            count = topics[topic].partitions
            if not subscribers or count <= 0:
                continue
            quota, extra = divmod(count, len(subscribers))
            start = 0
            for index, member_id in enumerate(subscribers):
                size = quota + (1 if index < extra else 0)
                if size:
                    result[member_id][topic] = frozenset(range(start, start + size))
                start += size
        return result
