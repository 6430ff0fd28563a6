"""Which local partition copies the cluster no longer wants here (stray replicas).

A broker that was down while its replica of a partition was reassigned away,
or while its topic was deleted (and maybe re-created under the same name with
a new topic id), comes back with the old partition directory. Nothing would
ever serve or delete it: it takes disk, and a re-created topic must not start
from the old incarnation's data. Kafka finds these at start against the full
metadata (KRaft: ``LogManager.isStrayKraftReplica``; a ZooKeeper-mode broker
under a KRaft controller: ``findStrayReplicas`` on the full LeaderAndIsr) by
three questions, asked here the same way:

* does the topic exist (by name) in the metadata?
* is it the same topic (the same topic id)?
* does the partition exist, and is this broker one of its replicas (or being
  added by a reassignment)?

A copy failing any of them is a stray. What is never a stray: a copy the
metadata still lists for this broker, and a copy of a topic whose metadata
could not be read. A topic the metadata never knew, on a cluster of one, is
adopted instead (see ``ClusterNode``): its data directory is the truth there.

Pure: the caller reads the directory and the metadata and acts on the answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from headwater.cluster.store import TopicAssignment


@dataclass(frozen=True, slots=True)
class LocalReplica:
    """A partition directory found in the data directory."""

    topic: str
    partition: int
    topic_id: uuid.UUID | None
    """The id the local topic registry gives the topic; None: not in the registry
    (a directory left behind by a deletion that crashed half way)."""


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """The cluster's topics as read at start."""

    topics: Mapping[str, TopicAssignment]
    unreadable: frozenset[str] = field(default_factory=frozenset)
    """Topics listed in the metadata whose znodes could not be read or decoded:
    their local copies are left alone."""


@dataclass(frozen=True, slots=True)
class StrayReplica:
    topic: str
    partition: int
    reason: str


def find_stray_replicas(
    local: Iterable[LocalReplica],
    metadata: MetadataSnapshot,
    local_id: int,
    *,
    adopts_unknown_topics: bool,
) -> list[StrayReplica]:
    """The local copies that are strays, with why, in (topic, partition) order.

    ``adopts_unknown_topics``: a cluster of one, where a registered topic the
    metadata does not list joins the metadata rather than being a stray.
    """
    strays: list[StrayReplica] = []
    for replica in sorted(local, key=lambda r: (r.topic, r.partition)):
        reason = _stray_reason(replica, metadata, local_id, adopts_unknown_topics)
        if reason is not None:
            strays.append(StrayReplica(replica.topic, replica.partition, reason))
    return strays


def topics_to_forget(
    registry: Mapping[str, uuid.UUID],
    metadata: MetadataSnapshot,
    *,
    adopts_unknown_topics: bool,
) -> list[str]:
    """The local registry's topics (name -> id) that are gone from the metadata or are
    another topic there now, with or without a partition directory here: a topic
    whose partitions were never written has none, and its entry must go all the same."""
    forget: list[str] = []
    for name, topic_id in sorted(registry.items()):
        if name in metadata.unreadable:
            continue
        assignment = metadata.topics.get(name)
        gone = assignment is None and not adopts_unknown_topics
        if gone or (assignment is not None and assignment.topic_id != topic_id):
            forget.append(name)
    return forget


def _stray_reason(
    replica: LocalReplica, metadata: MetadataSnapshot, local_id: int, adopts: bool
) -> str | None:
    if replica.topic in metadata.unreadable:
        return None
    assignment = metadata.topics.get(replica.topic)
    if assignment is None:
        if replica.topic_id is not None and adopts:
            return None
        return "the topic does not exist in the cluster metadata"
    if replica.topic_id is not None and replica.topic_id != assignment.topic_id:
        return (
            f"the topic was re-created with id {assignment.topic_id} "
            f"(this copy belongs to id {replica.topic_id})"
        )
    replicas = assignment.replicas.get(replica.partition)
    if replicas is None:
        return f"the topic has {len(assignment.replicas)} partition(s) in the metadata"
    if local_id in replicas or local_id in assignment.adding.get(replica.partition, ()):
        return None
    return f"its replicas are {list(replicas)}, without broker {local_id}"
