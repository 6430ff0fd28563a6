"""The uniform assignor when members subscribe to different topics (Kafka's
UniformHeterogeneousAssignmentBuilder, in its 4.x shape).

Owned partitions are kept (only those of topics a member left are dropped),
the unowned ones go one by one to the least-loaded subscriber, and then each
topic is balanced: while its most-loaded holder has two or more partitions
(counted over all topics) above its least-loaded subscriber, one partition
moves between them. Passes over the topics repeat until nothing moves (at
most 16, as Kafka). This is as balanced as the subscriptions allow in the
common shapes; with overlapping subscriptions it can stop one partition
short of the best spread, as Kafka's can, rather than search for it.

Topics are visited with the most partitions per subscriber first (then fewer
subscribers, then name): the tightly constrained ones fill members before the
flexible ones smooth the rest. With racks (see racks.py) ties for the
least-loaded subscriber go to one in the partition's rack, and a balancing
move prefers a partition in the receiver's rack, then one outside the
donor's; owned partitions are never released for locality alone here.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from headwater.group.assignors.helpers import (
    TopicPartition,
    subscribers_by_topic,
    to_assignment,
    valid_owned,
)
from headwater.group.assignors.racks import partition_racks, use_rack_awareness
from headwater.group.assignors.spec import Assignment, MemberSpec, TopicSpec

MAX_BALANCE_PASSES = 16
"""Kafka's MAX_ITERATION_COUNT: each pass roughly halves what imbalance is left."""


class _Builder:
    """One assignment run: loads, holdings per (member, topic), and the moves."""

    def __init__(self, members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]) -> None:
        self.members = members
        self.topics = topics
        self.subscribers = subscribers_by_topic(members, topics)
        self.racked = use_rack_awareness(members, topics, sorted(self.subscribers))
        self.load = dict.fromkeys(members, 0)
        self.holdings: dict[str, dict[str, list[int]]] = {m: {} for m in members}
        self.taken: set[TopicPartition] = set()
        for member_id, owned in valid_owned(members, topics).items():
            for topic, partition in owned:
                self._add(member_id, topic, partition)
        self.order = sorted(
            self.subscribers,
            key=lambda t: (
                -topics[t].partitions / len(self.subscribers[t]),
                len(self.subscribers[t]),
                t,
            ),
        )

    def _add(self, member_id: str, topic: str, partition: int) -> None:
        self.holdings[member_id].setdefault(topic, []).append(partition)
        self.load[member_id] += 1
        self.taken.add((topic, partition))

    def _in_rack(self, member_id: str, topic: str, partition: int) -> bool:
        rack = self.members[member_id].rack
        return rack is not None and rack in partition_racks(self.topics[topic], partition)

    def _valid_top(self, heap: list[tuple[int, str]]) -> tuple[int, str] | None:
        """The smallest entry whose load is still current (entries are ``(load, id)``)."""
        while heap:
            load, m = heap[0]
            if load == self.load[m]:
                return heap[0]
            heapq.heappop(heap)
        return None

    def place_unowned(self) -> None:
        """Each unowned partition to its topic's least-loaded subscriber."""
        for topic in self.order:
            subs = self.subscribers[topic]
            heap = [(self.load[m], m) for m in subs]
            heapq.heapify(heap)
            by_rack: dict[str, list[tuple[int, str]]] = {}
            if self.racked:
                for m in subs:
                    rack = self.members[m].rack
                    if rack is not None:
                        by_rack.setdefault(rack, []).append((self.load[m], m))
                for rack_heap in by_rack.values():
                    heapq.heapify(rack_heap)
            for partition in range(self.topics[topic].partitions):
                if (topic, partition) in self.taken:
                    continue
                top = self._valid_top(heap)
                assert top is not None  # every topic here has a subscriber
                chosen = top
                if self.racked:
                    for rack in partition_racks(self.topics[topic], partition):
                        entry = self._valid_top(by_rack.get(rack, []))
                        if (
                            entry is not None
                            and entry[0] == top[0]
                            and (chosen == top or entry < chosen)
                        ):
                            chosen = entry
                m = chosen[1]
                self._add(m, topic, partition)
                heapq.heappush(heap, (self.load[m], m))
                rack = self.members[m].rack
                if self.racked and rack is not None and rack in by_rack:
                    heapq.heappush(by_rack[rack], (self.load[m], m))

    def balance(self) -> None:
        """Move partitions within each topic from the most- to the least-loaded subscriber."""
        movable = [t for t in self.order if len(self.subscribers[t]) >= 2]
        for _ in range(MAX_BALANCE_PASSES):
            moved = sum(self._balance_topic(topic) for topic in movable)
            if moved == 0:
                return

    def _balance_topic(self, topic: str) -> int:
        subs = self.subscribers[topic]
        receivers = [(self.load[m], m) for m in subs]
        heapq.heapify(receivers)
        donors = [(-self.load[m], m) for m in subs if self.holdings[m].get(topic)]
        heapq.heapify(donors)
        moved = 0
        while True:
            receiver = self._valid_top(receivers)
            donor = None
            while donors:
                neg_load, m = donors[0]
                if -neg_load == self.load[m] and self.holdings[m].get(topic):
                    donor = m
                    break
                heapq.heappop(donors)
            if receiver is None or donor is None or self.load[donor] - receiver[0] <= 1:
                return moved
            to = receiver[1]
            partition = self._take_from(donor, topic, to)
            self.load[donor] -= 1
            self._add(to, topic, partition)
            moved += 1
            heapq.heappush(receivers, (self.load[to], to))
            heapq.heappush(receivers, (self.load[donor], donor))
            if self.holdings[donor].get(topic):
                heapq.heappush(donors, (-self.load[donor], donor))
            heapq.heappush(donors, (-self.load[to], to))

    def _take_from(self, donor: str, topic: str, receiver: str) -> int:
        """The partition to move: in the receiver's rack, else outside the donor's,
        else (as Kafka) the donor's highest-numbered one."""
        held = self.holdings[donor][topic]
        index = max(range(len(held)), key=held.__getitem__)
        if self.racked:
            ranked = sorted(
                range(len(held)),
                key=lambda i: (
                    not self._in_rack(receiver, topic, held[i]),
                    self._in_rack(donor, topic, held[i]),
                    -held[i],
                ),
            )
            index = ranked[0]
        partition = held.pop(index)
        if not held:
            del self.holdings[donor][topic]
        self.taken.discard((topic, partition))
        return partition

    def result(self) -> Assignment:
        targets = {
            m: [(t, p) for t, parts in self.holdings[m].items() for p in parts]
            for m in self.members
        }
        return to_assignment(self.members, targets)


def assign_heterogeneous(
    members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]
) -> Assignment:
    """Sticky, then balanced as far as each topic's subscribers allow."""
    builder = _Builder(members, topics)
    builder.place_unowned()
    builder.balance()
    return builder.result()
