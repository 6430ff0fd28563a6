"""UniformAssignor: spread partitions evenly, keeping what members own
(Kafka's UniformAssignor, the default ``group.remote.assignor``).

Like Kafka it picks one of two builders: when every member subscribes to the
same topics a quota-based one that is exactly balanced and cheap, otherwise
a general one that balances topic by topic.
"""

from __future__ import annotations

from collections.abc import Mapping

from headwater.group.assignors.helpers import is_homogeneous, subscribed_topics
from headwater.group.assignors.spec import Assignment, MemberSpec, TopicSpec
from headwater.group.assignors.uniform_heterogeneous import assign_heterogeneous
from headwater.group.assignors.uniform_homogeneous import assign_homogeneous


class UniformAssignor:
    """Balanced, sticky and rack-preferring: the default server-side assignor."""

    name: str = "uniform"

    def assign(
        self, members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]
    ) -> Assignment:
        if not members:
            return {}
        if is_homogeneous(members, topics):
            anyone = next(iter(members.values()))
            return assign_homogeneous(members, topics, subscribed_topics(anyone, topics))
        return assign_heterogeneous(members, topics)
