"""The "consumer" embedded protocol of classic groups: a member's subscription and
its assignment, as bytes inside JoinGroup, SyncGroup and DescribeGroups.

One codec for the whole house: the broker's group coordinator reads them (its
descriptions, OffsetDelete, a consumer group's classic members, whose
assignments it computes and writes), Headwater's client writes its
subscription and, as a group leader, everyone's assignment, and the console
reads the assignments DescribeGroups returns. The bytes are an int16 version
followed by a ConsumerProtocolSubscription / ConsumerProtocolAssignment body,
which kio reads and writes. Versions are forward compatible (newer ones only
append fields), so a version newer than kio knows is read with the newest
schema kio has.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.consumer_protocol_assignment import v0 as assignment_v0
from kio.schema.consumer_protocol_assignment import v1 as assignment_v1
from kio.schema.consumer_protocol_assignment import v2 as assignment_v2
from kio.schema.consumer_protocol_assignment import v3 as assignment_v3
from kio.schema.consumer_protocol_subscription import v0 as subscription_v0
from kio.schema.consumer_protocol_subscription import v1 as subscription_v1
from kio.schema.consumer_protocol_subscription import v2 as subscription_v2
from kio.schema.consumer_protocol_subscription import v3 as subscription_v3
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import Reader

from headwater.protocol.messages import build

CONSUMER_PROTOCOL_TYPE = "consumer"


class _TopicPartitionsShape(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partitions(self) -> tuple[int, ...]: ...


class _SubscriptionShape(Protocol):
    """What every kio ConsumerProtocolSubscription version has."""

    @property
    def topics(self) -> tuple[str, ...]: ...
    @property
    def user_data(self) -> bytes | None: ...


class _AssignmentShape(Protocol):
    """What every kio ConsumerProtocolAssignment version has."""

    @property
    def assigned_partitions(self) -> tuple[_TopicPartitionsShape, ...]: ...
    @property
    def user_data(self) -> bytes | None: ...


_SUBSCRIPTION_CLASSES: list[Any] = [
    subscription_v0.ConsumerProtocolSubscription,
    subscription_v1.ConsumerProtocolSubscription,
    subscription_v2.ConsumerProtocolSubscription,
    subscription_v3.ConsumerProtocolSubscription,
]
_SUBSCRIPTION_READERS: list[Reader[_SubscriptionShape]] = [
    entity_reader(cls) for cls in _SUBSCRIPTION_CLASSES
]
_ASSIGNMENT_READERS: list[Reader[_AssignmentShape]] = [
    entity_reader(assignment_v0.ConsumerProtocolAssignment),
    entity_reader(assignment_v1.ConsumerProtocolAssignment),
    entity_reader(assignment_v2.ConsumerProtocolAssignment),
    entity_reader(assignment_v3.ConsumerProtocolAssignment),
]


class ConsumerProtocolError(ValueError):
    """Bytes that are not a consumer-protocol subscription or assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a consumer asked for when it joined."""

    version: int
    topics: tuple[str, ...]
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None


@dataclass(frozen=True, slots=True)
class Assignment:
    """The partitions the leader gave one consumer."""

    version: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None


def _version(data: bytes) -> int:
    if len(data) < 2:
        raise ConsumerProtocolError("too short for a consumer protocol version")
    (version,) = struct.unpack_from(">h", data)
    if version < 0:
        raise ConsumerProtocolError(f"negative consumer protocol version {version}")
    return int(version)


def decode_subscription(data: bytes) -> Subscription:
    version = _version(data)
    reader = _SUBSCRIPTION_READERS[min(version, len(_SUBSCRIPTION_READERS) - 1)]
    try:
        entity, _ = reader(data, 2)
    except Exception as exc:  # kio raises assorted errors on malformed input
        raise ConsumerProtocolError(f"undecodable subscription: {exc}") from exc
    owned: tuple[_TopicPartitionsShape, ...] = getattr(entity, "owned_partitions", ())
    return Subscription(
        version=version,
        topics=tuple(str(topic) for topic in entity.topics),
        owned_partitions=tuple(
            (str(tp.topic), tuple(int(p) for p in tp.partitions)) for tp in owned
        ),
        user_data=entity.user_data,
    )


def decode_assignment(data: bytes) -> Assignment:
    """Decode one member's assignment; empty bytes (no assignment) decode as nothing."""
    if not data:
        return Assignment(version=0, partitions=(), user_data=None)
    version = _version(data)
    reader = _ASSIGNMENT_READERS[min(version, len(_ASSIGNMENT_READERS) - 1)]
    try:
        entity, _ = reader(data, 2)
    except Exception as exc:  # kio raises assorted errors on malformed input
        raise ConsumerProtocolError(f"undecodable assignment: {exc}") from exc
    return Assignment(
        version=version,
        partitions=tuple(
            (str(tp.topic), tuple(int(p) for p in tp.partitions))
            for tp in entity.assigned_partitions
        ),
        user_data=entity.user_data,
    )


def encode_subscription(
    topics: Iterable[str],
    version: int = 1,
    owned_partitions: Iterable[tuple[str, Iterable[int]]] = (),
    user_data: bytes | None = None,
) -> bytes:
    """A ConsumerProtocolSubscription (topics sorted, once each); ``version`` 1 adds
    owned partitions (empty for an eager member), 2 the generation, 3 the rack."""
    version = max(min(version, len(_SUBSCRIPTION_CLASSES) - 1), 0)
    cls = _SUBSCRIPTION_CLASSES[version]
    data = {
        "topics": sorted(set(topics)),
        "user_data": user_data,
        "owned_partitions": [
            {"topic": topic, "partitions": sorted(set(parts))}
            for topic, parts in sorted(owned_partitions)
        ],
    }
    out = io.BytesIO()
    out.write(struct.pack(">h", version))
    entity_writer(cls)(out, build(cls, data))
    return out.getvalue()


def encode_assignment(
    partitions: Iterable[tuple[str, Iterable[int]]],
    version: int = 0,
    user_data: bytes | None = None,
) -> bytes:
    """A ConsumerProtocolAssignment, for a classic member of a consumer group (whose
    assignment the coordinator computes): every version up to 3 has the same body
    (non-flexible: int16 strings, int32 arrays, nullable bytes)."""
    topics = sorted((topic, sorted(set(parts))) for topic, parts in partitions)
    out = [struct.pack(">hi", max(min(version, 3), 0), len(topics))]
    for topic, parts in topics:
        name = topic.encode("utf-8")
        out.append(struct.pack(">h", len(name)) + name)
        out.append(struct.pack(f">i{len(parts)}i", len(parts), *parts))
    if user_data is None:
        out.append(struct.pack(">i", -1))
    else:
        out.append(struct.pack(">i", len(user_data)) + user_data)
    return b"".join(out)
