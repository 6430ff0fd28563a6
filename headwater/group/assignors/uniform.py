"""UniformAssignor: spread partitions evenly, keeping what members own."""

from __future__ import annotations

from collections.abc import Mapping

from headwater.group.assignors.spec import Assignment, MemberSpec, TopicSpec


class UniformAssignor:
    """Balanced and sticky: the default server-side assignor."""

    name: str = "uniform"

    def assign(
        self, members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]
    ) -> Assignment:
        result: Assignment = {member_id: {} for member_id in members}
        counts = dict.fromkeys(members, 0)
        owners: dict[tuple[str, int], str] = {}
        for member_id, spec in members.items():
            for topic, parts in spec.owned.items():
                for p in parts:
                    owners[(topic, p)] = member_id
        total = 0
        subscribers_of: dict[str, list[str]] = {}
        for topic in sorted(topics):
            subs = sorted(m for m, spec in members.items() if topic in spec.subscribed_topics)
            if subs:
                subscribers_of[topic] = subs
                total += topics[topic].partitions
        cap = -(-total // len(members)) if members else 0
        for topic, subs in subscribers_of.items():
            for p in range(topics[topic].partitions):
                owner = owners.get((topic, p))
                if owner in subs and owner is not None and counts[owner] < cap:
                    chosen = owner
                else:
                    chosen = min(subs, key=lambda m: (counts[m], m))
                counts[chosen] += 1
                current = result[chosen].get(topic, frozenset())
                result[chosen][topic] = current | {p}
        return result
