"""The topics a consumer group coordinator sees: Kafka's MetadataImage, for KIP-848.

The coordinator assigns partitions by topic id (the heartbeat speaks ids),
counts partitions to notice growth, and hands partition racks to the
rack-aware assignors. It reads them through this small interface so the
state machine runs on a dict in tests and on the broker's cluster view in
production (`ClusterTopics` over the broker's cluster view).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Protocol

from headwater.cluster.cluster_view import ClusterView
from headwater.group.consumer_group_records import TopicMetadata


class TopicsImage(Protocol):
    """Every topic that exists now, by name and by id."""

    def names(self) -> Iterable[str]: ...

    def get(self, name: str) -> TopicMetadata | None: ...

    def name_of(self, topic_id: uuid.UUID) -> str | None: ...


class StaticTopics:
    """A `TopicsImage` over a dict (tests, and a broker before its view is ready)."""

    def __init__(self, topics: Mapping[str, TopicMetadata] | None = None) -> None:
        self.topics: dict[str, TopicMetadata] = dict(topics or {})

    def names(self) -> Iterable[str]:
        return list(self.topics)

    def get(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic.name
        return None

    def put(self, name: str, partitions: int, topic_id: uuid.UUID | None = None) -> TopicMetadata:
        """Create or grow a topic (tests)."""
        old = self.topics.get(name)
        chosen = topic_id or (old.topic_id if old else uuid.uuid4())
        topic = self.topics[name] = TopicMetadata(chosen, name, partitions)
        return topic

    def delete(self, name: str) -> None:
        self.topics.pop(name, None)


class ClusterTopics:
    """A `TopicsImage` over the broker's cluster view (ZooKeeper's topics, live).

    Partition racks are the racks of each partition's replicas' brokers, as
    Kafka's assignors see them; a cluster without racks gives none, so the
    assignors fall back to rack-unaware placement.
    """

    def __init__(self, view: ClusterView) -> None:
        self._view = view

    def names(self) -> Iterable[str]:
        return list(self._view.topics)

    def get(self, name: str) -> TopicMetadata | None:
        assignment = self._view.topics.get(name)
        if assignment is None:
            return None
        brokers = self._view.brokers
        racks: dict[int, frozenset[str]] = {}
        for partition, replicas in assignment.replicas.items():
            names = frozenset(
                rack
                for broker_id in replicas
                if (broker := brokers.get(broker_id)) is not None and (rack := broker.rack)
            )
            if names:
                racks[partition] = names
        return TopicMetadata(assignment.topic_id, name, len(assignment.replicas), racks)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        for name, assignment in self._view.topics.items():
            if assignment.topic_id == topic_id:
                return name
        return None
