"""Client-side partition assignors of the classic group protocol, without I/O.

In a classic group the coordinator picks one member, the leader, and hands
it every member's subscription; the leader computes the assignment with the
assignor the group agreed on and sends it back in its SyncGroup. These are
Kafka's two eager assignors, with the Java client's exact results
(``RangeAssignor``, ``RoundRobinAssignor``; no rack awareness):

* ``range``, per topic: the members subscribed to it, in order, each take a
  consecutive range of ``partitions // members`` partitions, and the first
  ``partitions % members`` of them one more;
* ``roundrobin``: every subscribed partition, by topic then partition, goes
  to the next member in a circle that subscribes to its topic.

Members are ordered as Kafka's ``MemberInfo``: static members (with a
``group.instance.id``) first by instance id, then the others by member id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from headwater.client.types import TopicPartition

RANGE: Final = "range"
ROUNDROBIN: Final = "roundrobin"

#: Kafka's class names and librdkafka's names of the assignors here.
_ALIASES: Final[dict[str, str]] = {
    "range": RANGE,
    "rangeassignor": RANGE,
    "org.apache.kafka.clients.consumer.rangeassignor": RANGE,
    "roundrobin": ROUNDROBIN,
    "roundrobinassignor": ROUNDROBIN,
    "org.apache.kafka.clients.consumer.roundrobinassignor": ROUNDROBIN,
}


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One member as the leader sees it in the JoinGroup response."""

    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None

    def sort_key(self) -> tuple[int, str]:
        """Kafka's ``MemberInfo.compareTo``: static members first, by instance id."""
        if self.instance_id is not None:
            return (0, self.instance_id)
        return (1, self.member_id)


Assignment = dict[str, list[TopicPartition]]
Assignor = Callable[[Mapping[str, int], Sequence[MemberSubscription]], Assignment]


def strategies(config_value: str) -> list[str]:
    """``partition.assignment.strategy`` as assignor names, in preference order.

    Raises ``ValueError`` for an assignor this client does not have (for
    example ``cooperative-sticky``)."""
    out: list[str] = []
    for part in config_value.split(","):
        key = part.strip().lower()
        if not key:
            continue
        name = _ALIASES.get(key)
        if name is None:
            raise ValueError(
                f"partition.assignment.strategy: unsupported assignor {part.strip()!r} "
                f"(this client has {RANGE!r} and {ROUNDROBIN!r})"
            )
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError("partition.assignment.strategy names no assignor")
    return out


def range_assign(
    partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
) -> Assignment:
    """Kafka's RangeAssignor (without racks)."""
    out: Assignment = {m.member_id: [] for m in members}
    for topic in sorted(partitions_per_topic):
        count = partitions_per_topic[topic]
        subscribers = sorted((m for m in members if topic in m.topics), key=lambda m: m.sort_key())
        if not subscribers or count <= 0:
            continue
        per, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            length = per + (1 if i < extra else 0)
            out[member.member_id].extend(
                TopicPartition(topic, p) for p in range(start, start + length)
            )
            start += length
    for tps in out.values():
        tps.sort()
    return out


def roundrobin_assign(
    partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
) -> Assignment:
    """Kafka's RoundRobinAssignor."""
    out: Assignment = {m.member_id: [] for m in members}
    ordered = sorted(members, key=lambda m: m.sort_key())
    if not ordered:
        return out
    subscribed = sorted({t for m in ordered for t in m.topics})
    at = 0
    for topic in subscribed:
        count = partitions_per_topic.get(topic)
        if count is None:
            continue
        for p in range(count):
            while topic not in ordered[at].topics:
                at = (at + 1) % len(ordered)
            out[ordered[at].member_id].append(TopicPartition(topic, p))
            at = (at + 1) % len(ordered)
    return out


ASSIGNORS: Final[dict[str, Assignor]] = {RANGE: range_assign, ROUNDROBIN: roundrobin_assign}


def assign(
    name: str, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
) -> Assignment:
    """Run the assignor ``name`` (one of ``ASSIGNORS``)."""
    return ASSIGNORS[name](partitions_per_topic, members)
