"""What an assignor is given and what it returns (Kafka's GroupSpec and
SubscribedTopicDescriber, flattened into two frozen values).

The coordinator resolves regex subscriptions to topic names and passes each
member's current *target* assignment as ``owned``, so an assignor can be
sticky without remembering anything between calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

Assignment = dict[str, dict[str, frozenset[int]]]
"""member id -> topic name -> partitions; every member id present, ``{}`` for none."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member as the assignor sees it.

    ``instance_id`` (``group.instance.id``) is optional: the range assignor
    orders static members by it, as Kafka does, so a static member that
    rejoins under a new member id gets its old ranges back.
    """

    member_id: str
    rack: str | None
    subscribed_topics: frozenset[str]
    owned: Mapping[str, frozenset[int]]
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic that exists: its partition count and its replicas' racks."""

    name: str
    partitions: int
    partition_racks: Mapping[int, frozenset[str]]


class ServerAssignor(Protocol):
    """A server-side assignor, chosen by name (``group.remote.assignor``)."""

    name: str

    def assign(
        self, members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]
    ) -> Assignment:
        """The target assignment: every subscribed partition to exactly one subscriber."""
        ...
