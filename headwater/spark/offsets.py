"""Source offsets as Spark stores them: JSON ``{"topic": {"partition": offset}}``.

Spark keeps a streaming source's offsets in its checkpoint as the JSON text
the source returned, and decides "is there new data?" by comparing that text
with the previous batch's. A dict's JSON follows its insertion order, so two
equal offset maps built in different orders would compare as different and
trigger empty batches; every map this module produces is therefore built
with its keys sorted as strings (the order ``json.dumps(sort_keys=True)``
would give), whatever order the partitions were discovered in.

The ``startingOffsets`` / ``endingOffsets`` options use the same layout as
Spark's Kafka source, with ``-2`` for "earliest" and ``-1`` for "latest".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]
"""(topic, partition); a client's TopicPartition named tuple is one too."""

OffsetMap = dict[TopicPartition, int]
OffsetJson = dict[str, dict[str, int]]

EARLIEST = -2
"""Kafka's sentinel for "the log start offset" in offset specs."""
LATEST = -1
"""Kafka's sentinel for "the log end offset" in offset specs."""


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> OffsetJson:
    """The checkpoint form of ``offsets``: nested dicts with sorted string keys."""
    by_topic: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, {})[str(partition)] = int(offset)
    return {topic: dict(sorted(by_topic[topic].items())) for topic in sorted(by_topic)}


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> OffsetMap:
    """Parse the checkpoint form (or a user's JSON option) back into a flat map."""
    if not isinstance(data, Mapping):
        raise ValueError(f"offsets must be a JSON object of topics, got {data!r}")
    out: OffsetMap = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, Mapping):
            raise ValueError(
                f"offsets of topic {topic!r} must be a JSON object, got {partitions!r}"
            )
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                raise ValueError(
                    f"partition {partition!r} of topic {topic!r} is not a number"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(
                    f"offset of {topic}-{partition} must be an integer, got {offset!r}"
                )
            out[(str(topic), number)] = offset
    return out


def offsets_json_text(offsets: Mapping[TopicPartition, int]) -> str:
    """The exact text Spark will compare; handy for logs and tests."""
    return json.dumps(offsets_to_json(offsets))


@dataclass(frozen=True)
class EarliestOffsets:
    """Start (or end) every partition at its log start offset."""


@dataclass(frozen=True)
class LatestOffsets:
    """Start (or end) every partition at its log end offset (or LSO under read_committed)."""


@dataclass(frozen=True)
class SpecificOffsets:
    """Offsets per partition, ``-2`` / ``-1`` meaning earliest / latest for that one."""

    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)


OffsetSpec = EarliestOffsets | LatestOffsets | SpecificOffsets


def parse_offset_spec(text: str, option: str) -> OffsetSpec:
    """Parse a ``startingOffsets`` / ``endingOffsets`` value as Spark's Kafka source does."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered == "earliest":
        return EarliestOffsets()
    if lowered == "latest":
        return LatestOffsets()
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError:
        raise ValueError(
            f"{option} must be 'earliest', 'latest' or JSON like "
            f'{{"topic":{{"0":23,"1":-2}}}}, got {text!r}'
        ) from None
    offsets = offsets_from_json(data)
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise ValueError(f"{option}: offset {offset} of {tp[0]}-{tp[1]} is not valid")
    return SpecificOffsets(offsets)


def resolve_offset_spec(
    spec: OffsetSpec,
    partitions: list[TopicPartition] | set[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    option: str,
) -> OffsetMap:
    """Concrete offsets for ``partitions`` from a spec and the current log bounds.

    A JSON spec must name exactly the subscribed partitions, as in Spark's
    Kafka source: silently starting an unnamed partition somewhere would hide
    a typo in the option.
    """
    wanted = set(partitions)
    if isinstance(spec, EarliestOffsets):
        return {tp: earliest[tp] for tp in wanted}
    if isinstance(spec, LatestOffsets):
        return {tp: latest[tp] for tp in wanted}
    named = set(spec.offsets)
    if named != wanted:
        missing = sorted(wanted - named)
        extra = sorted(named - wanted)
        raise ValueError(
            f"{option} must give an offset for every subscribed partition and no other; "
            f"missing {missing}, not subscribed {extra}"
        )
    out: OffsetMap = {}
    for tp, offset in spec.offsets.items():
        if offset == EARLIEST:
            out[tp] = earliest[tp]
        elif offset == LATEST:
            out[tp] = latest[tp]
        else:
            out[tp] = offset
    return out
