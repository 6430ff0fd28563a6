"""Which partitions a query reads: ``subscribe``, ``subscribePattern`` or ``assign``.

Each strategy turns the broker's current topic list into the set of
partitions to read; the stream reader asks again before every micro-batch,
which is how partitions added to a topic (or topics matching a pattern) are
picked up while a query runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from headwater.spark.offsets import TopicPartition


@dataclass(frozen=True)
class Subscribe:
    """A fixed list of topics, every partition of each."""

    topics: tuple[str, ...]

    def select(self, partitions_by_topic: Mapping[str, Sequence[int]]) -> list[TopicPartition]:
        return sorted(
            (topic, p) for topic in self.topics for p in partitions_by_topic.get(topic, ())
        )

    def topics_of_interest(self) -> tuple[str, ...] | None:
        return self.topics


@dataclass(frozen=True)
class SubscribePattern:
    """Every topic whose whole name matches a Java-style regex (``re.fullmatch``)."""

    pattern: str

    def select(self, partitions_by_topic: Mapping[str, Sequence[int]]) -> list[TopicPartition]:
        regex = re.compile(self.pattern)
        return sorted(
            (topic, p)
            for topic, parts in partitions_by_topic.items()
            if regex.fullmatch(topic)
            for p in parts
        )

    def topics_of_interest(self) -> tuple[str, ...] | None:
        return None


@dataclass(frozen=True)
class Assign:
    """Exactly these partitions; a listed partition that does not exist is an error."""

    partitions: tuple[TopicPartition, ...]

    def select(self, partitions_by_topic: Mapping[str, Sequence[int]]) -> list[TopicPartition]:
        missing = [
            tp for tp in self.partitions if tp[1] not in set(partitions_by_topic.get(tp[0], ()))
        ]
        if missing:
            raise ValueError(f"assigned partitions do not exist: {sorted(missing)}")
        return sorted(self.partitions)

    def topics_of_interest(self) -> tuple[str, ...] | None:
        return tuple(sorted({t for t, _ in self.partitions}))


Subscription = Subscribe | SubscribePattern | Assign


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    """Exactly one of ``subscribe``, ``subscribePattern``, ``assign`` (keys lower-case)."""
    given = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k)]
    if len(given) != 1:
        raise ValueError(
            "give exactly one of the options 'subscribe', 'subscribePattern', 'assign'"
            f" (got {len(given)})"
        )
    key = given[0]
    value = options[key].strip()
    if key == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError("'subscribe' needs a comma-separated list of topics")
        return Subscribe(topics)
    if key == "subscribepattern":
        try:
            re.compile(value)
        except re.error as e:
            raise ValueError(f"'subscribePattern' is not a valid regex: {e}") from None
        return SubscribePattern(value)
    return Assign(_parse_assign(value))


def _parse_assign(text: str) -> tuple[TopicPartition, ...]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"'assign' must be JSON like {{\"topicA\":[0,1]}}, got {text!r}")
    out: list[TopicPartition] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise ValueError(f"'assign': partitions of {topic!r} must be a list of integers")
        out.extend((topic, p) for p in parts)
    return tuple(sorted(set(out)))
