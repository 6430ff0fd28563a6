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
    topic_gone: bool
    """The topic itself is gone or is another one now (not just this partition's
    assignment): the local registry's entry for it goes too."""


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
        reason, gone = _stray_reason(replica, metadata, local_id, adopts_unknown_topics)
        if reason is not None:
            strays.append(StrayReplica(replica.topic, replica.partition, reason, gone))
    return strays


def _stray_reason(
    replica: LocalReplica, metadata: MetadataSnapshot, local_id: int, adopts: bool
) -> tuple[str | None, bool]:
    if replica.topic in metadata.unreadable:
        return None, False
    assignment = metadata.topics.get(replica.topic)
    if assignment is None:
        if replica.topic_id is not None and adopts:
            return None, False
        return "the topic does not exist in the cluster metadata", True
    if replica.topic_id is not None and replica.topic_id != assignment.topic_id:
        return (
            f"the topic was re-created with id {assignment.topic_id} "
            f"(this copy belongs to id {replica.topic_id})",
            True,
        )
    replicas = assignment.replicas.get(replica.partition)
    if replicas is None:
        return f"the topic has {len(assignment.replicas)} partition(s) in the metadata", False
    if local_id in replicas or local_id in assignment.adding.get(replica.partition, ()):
        return None, False
    return f"its replicas are {list(replicas)}, without broker {local_id}", False
