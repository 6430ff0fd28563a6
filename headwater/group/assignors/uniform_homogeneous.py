"""The uniform assignor when every member subscribes to the same topics
(Kafka's UniformHomogeneousAssignmentBuilder).

Priorities: balance (counts differ by at most one), then rack locality, then
stickiness. With ``P`` partitions and ``N`` members each member's quota is
``P // N``, and ``P % N`` members get one more. Those extra slots go to the
members that already own the most, so the number of partitions that move is
the least balance allows (Kafka hands them out in member order, which can
move a partition more than needed).

Without racks a member keeps what it owns up to its quota and the rest is
handed out in ``(topic, partition)`` order to the members with room, in
member-id order. With racks (see racks.py) a member keeps only owned
partitions in its rack; the others are released, matched to members in one
of their racks that have room, handed back to their previous owner if it
still has room, and only then to anyone. A second run on its own result
therefore changes nothing, and at the end no member in a partition's rack
holds a partition from another rack (a swap could not gain locality).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from headwater.group.assignors.helpers import TopicPartition, to_assignment, valid_owned
from headwater.group.assignors.racks import partition_racks, use_rack_awareness
from headwater.group.assignors.spec import Assignment, MemberSpec, TopicSpec


def assign_homogeneous(
    members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec], subscribed: list[str]
) -> Assignment:
    """Balanced, rack-preferring, sticky assignment of ``subscribed`` (sorted, existing)."""
    member_ids = sorted(members)
    total = sum(topics[t].partitions for t in subscribed)
    if not member_ids or total == 0:
        return to_assignment(members, {})
    owned = valid_owned(members, topics)
    racked = use_rack_awareness(members, topics, subscribed)

    def matches(member_id: str, tp: TopicPartition) -> bool:
        rack = members[member_id].rack
        return rack is not None and rack in partition_racks(topics[tp[0]], tp[1])

    # What each member would keep, before quotas: all it owns, or (racks) its in-rack part.
    keepable = {
        m: [tp for tp in owned[m] if matches(m, tp)] if racked else owned[m] for m in member_ids
    }

    min_quota, extras = divmod(total, len(member_ids))
    # Extra slots to the members owning the most: the fewest moves, and a rerun on
    # the result gives every member the same quota again (so it changes nothing).
    by_owned = sorted(member_ids, key=lambda m: (-len(owned[m]), -len(keepable[m]), m))
    quota = {m: min_quota + (1 if i < extras else 0) for i, m in enumerate(by_owned)}

    target: dict[str, list[TopicPartition]] = {}
    assigned: set[TopicPartition] = set()
    released: dict[TopicPartition, str] = {}
    for m in member_ids:
        keep = keepable[m][: quota[m]]
        target[m] = keep
        assigned.update(keep)
        if racked:
            for tp in owned[m]:
                if tp not in assigned:
                    released[tp] = m
    room = {m: quota[m] - len(target[m]) for m in member_ids}
    pool = [
        (topic, p)
        for topic in subscribed
        for p in range(topics[topic].partitions)
        if (topic, p) not in assigned
    ]

    if racked:
        pool = _place_in_rack(pool, members, topics, target, room)
        # Back to the previous owner when no member in its rack could take it.
        rest: list[TopicPartition] = []
        for tp in pool:
            previous = released.get(tp)
            if previous is not None and room[previous] > 0:
                target[previous].append(tp)
                room[previous] -= 1
            else:
                rest.append(tp)
        pool = rest

    # The rest in contiguous runs to the members with room, in member-id order.
    next_index = 0
    for m in member_ids:
        take = room[m]
        if take > 0:
            target[m].extend(pool[next_index : next_index + take])
            next_index += take
    return to_assignment(member_ids, target)


def _place_in_rack(
    pool: list[TopicPartition],
    members: Mapping[str, MemberSpec],
    topics: Mapping[str, TopicSpec],
    target: dict[str, list[TopicPartition]],
    room: dict[str, int],
) -> list[TopicPartition]:
    """Give each pooled partition to the member with the most room in one of its
    racks; return those no rack member could take. Heaps per rack hold
    ``(-room, member_id)`` entries, stale ones skipped on the way out."""
    heaps: dict[str, list[tuple[int, str]]] = {}
    for m in sorted(members):
        rack = members[m].rack
        if rack is not None and room[m] > 0:
            heaps.setdefault(rack, []).append((-room[m], m))
    for heap in heaps.values():
        heapq.heapify(heap)

    def best_in(rack: str) -> tuple[int, str] | None:
        heap = heaps.get(rack)
        while heap:
            neg_room, m = heap[0]
            if -neg_room == room[m] and room[m] > 0:
                return heap[0]
            heapq.heappop(heap)
        return None

    left: list[TopicPartition] = []
    for tp in pool:
        best: tuple[int, str] | None = None
        for rack in partition_racks(topics[tp[0]], tp[1]):
            entry = best_in(rack)
            if entry is not None and (best is None or entry < best):
                best = entry
        if best is None:
            left.append(tp)
            continue
        m = best[1]
        target[m].append(tp)
        room[m] -= 1
        rack = members[m].rack
        if room[m] > 0 and rack is not None:
            heapq.heappush(heaps[rack], (-room[m], m))
    return left
