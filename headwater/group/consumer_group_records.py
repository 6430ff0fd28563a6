"""KIP-848 consumer groups as records in ``__consumer_offsets``, in Kafka's formats.

A consumer group is kept as six kinds of key/value records, each a key type
of Kafka's group coordinator (the key's leading int16 is the record type):

=====  =========================================  ===================================
type   key                                        value
=====  =========================================  ===================================
3      ConsumerGroupMetadataKey(group)            the group epoch
4      ConsumerGroupPartitionMetadataKey(group)   the subscribed topics' metadata
5      ConsumerGroupMemberMetadataKey(group, m)   a member's subscription and client
6      ConsumerGroupTargetAssignmentMetadataKey   the target assignment epoch
7      ConsumerGroupTargetAssignmentMemberKey     a member's target partitions
8      ConsumerGroupCurrentMemberAssignmentKey    a member's epochs, state, partitions
=====  =========================================  ===================================

Keys are non-flexible (int16-length strings); values start with an int16
version (0) and use the flexible encoding (compact strings and arrays, UUIDs,
tagged fields), so a Kafka broker reading Headwater's offsets topic (or the
other way round) agrees on every byte. A ``None`` value is a tombstone, which
compaction keeps only until ``delete.retention.ms``: deleting a member or a
group writes one per key. A member record's tagged field 0 is Kafka's
ClassicMemberMetadata (a classic member inside a consumer group, during an
online migration); other tagged fields are skipped on reading.

Hand-written rather than generated: kio carries only the wire APIs, not the
coordinator's internal records, and these are six small fixed layouts.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from headwater.group.storage import CorruptRecordError

#: A member's partitions: topic id -> partition indexes.
Assignment = Mapping[uuid.UUID, frozenset[int]]

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
#: The record types this module reads; the classic group's are 0, 1 and 2.
CONSUMER_GROUP_RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
_VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A key of one of the six record types; ``member_id`` only for types 5, 7 and 8."""

    record_type: int
    group_id: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What the group knows of a subscribed topic; a change bumps the group epoch."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int
    partition_racks: Mapping[int, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member speaking the classic protocol inside a consumer group (online
    migration): its session timeout and JoinGroup protocols, tagged field 0 of the
    member metadata record; None for a consumer-protocol member."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: Assignment


@dataclass(frozen=True, slots=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


ConsumerGroupValue = (
    GroupMetadataValue
    | PartitionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentMetadataValue
    | TargetAssignmentMemberValue
    | CurrentMemberAssignmentValue
)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_MEMBER_KEYED = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})


# ------------------------------------------------------------------- writing


class _Writer:
    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def raw(self, data: bytes) -> None:
        self._parts.append(data)

    def int8(self, value: int) -> None:
        self._parts.append(struct.pack(">b", value))

    def int16(self, value: int) -> None:
        self._parts.append(_INT16.pack(value))

    def int32(self, value: int) -> None:
        self._parts.append(_INT32.pack(value))

    def uvarint(self, value: int) -> None:
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self._parts.append(bytes(out))

    def legacy_string(self, value: str) -> None:
        data = value.encode("utf-8")
        self.int16(len(data))
        self.raw(data)

    def compact_string(self, value: str | None) -> None:
        if value is None:
            self.uvarint(0)
            return
        data = value.encode("utf-8")
        self.uvarint(len(data) + 1)
        self.raw(data)

    def compact_array_length(self, count: int) -> None:
        self.uvarint(count + 1)

    def no_tags(self) -> None:
        self.uvarint(0)

    def assignment(self, partitions: Assignment) -> None:
        """[]TopicPartitions: topic id, []int32, tags; sorted so equal states encode equally."""
        topics = sorted((t, p) for t, p in partitions.items() if p)
        self.compact_array_length(len(topics))
        for topic_id, indexes in topics:
            self.raw(topic_id.bytes)
            self.compact_array_length(len(indexes))
            for index in sorted(indexes):
                self.int32(index)
            self.no_tags()

    def build(self) -> bytes:
        return b"".join(self._parts)


def encode_key(key: ConsumerGroupKey) -> bytes:
    w = _Writer()
    w.int16(key.record_type)
    w.legacy_string(key.group_id)
    if key.record_type in _MEMBER_KEYED:
        w.legacy_string(key.member_id or "")
    return w.build()


def encode_value(value: ConsumerGroupValue) -> bytes:
    w = _Writer()
    w.int16(_VALUE_VERSION)
    if isinstance(value, GroupMetadataValue):
        w.int32(value.epoch)
    elif isinstance(value, TargetAssignmentMetadataValue):
        w.int32(value.assignment_epoch)
    elif isinstance(value, PartitionMetadataValue):
        w.compact_array_length(len(value.topics))
        for topic in value.topics:
            w.raw(topic.topic_id.bytes)
            w.compact_string(topic.name)
            w.int32(topic.num_partitions)
            racks = sorted(topic.partition_racks.items())
            w.compact_array_length(len(racks))
            for partition, names in racks:
                w.int32(partition)
                w.compact_array_length(len(names))
                for name in sorted(names):
                    w.compact_string(name)
                w.no_tags()
            w.no_tags()
    elif isinstance(value, MemberMetadataValue):
        w.compact_string(value.instance_id)
        w.compact_string(value.rack_id)
        w.compact_string(value.client_id)
        w.compact_string(value.client_host)
        w.compact_array_length(len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            w.compact_string(name)
        w.compact_string(value.subscribed_topic_regex)
        w.int32(value.rebalance_timeout_ms)
        w.compact_string(value.server_assignor)
        if value.classic is not None:
            tagged = _classic_member_metadata(value.classic)
            w.uvarint(1)  # one tagged field
            w.uvarint(0)  # tag 0: ClassicMemberMetadata
            w.uvarint(len(tagged))
            w.raw(tagged)
            return w.build()
    elif isinstance(value, TargetAssignmentMemberValue):
        w.assignment(value.partitions)
    else:
        w.int32(value.member_epoch)
        w.int32(value.previous_member_epoch)
        w.int8(value.state)
        w.assignment(value.assigned)
        w.assignment(value.pending_revocation)
    w.no_tags()
    return w.build()


def _classic_member_metadata(classic: ClassicMemberMetadata) -> bytes:
    w = _Writer()
    w.int32(classic.session_timeout_ms)
    w.compact_array_length(len(classic.protocols))
    for name, metadata in classic.protocols:
        w.compact_string(name)
        w.uvarint(len(metadata) + 1)
        w.raw(metadata)
        w.no_tags()
    w.no_tags()
    return w.build()


def record(key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> tuple[bytes, bytes | None]:
    """One state-log entry; ``None`` is the key's tombstone."""
    return encode_key(key), None if value is None else encode_value(value)


# ------------------------------------------------------------------- reading


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def _take(self, size: int) -> memoryview:
        end = self._pos + size
        if size < 0 or end > len(self._data):
            raise CorruptRecordError(f"truncated consumer group record at byte {self._pos}")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def int8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def int16(self) -> int:
        return int(_INT16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack(self._take(4))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise CorruptRecordError("varint too long")

    def _utf8(self, raw: memoryview) -> str:
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError("string is not UTF-8") from exc

    def legacy_string(self) -> str:
        return self._utf8(self._take(self.int16()))

    def compact_nullable_string(self) -> str | None:
        length = self.uvarint()
        return None if length == 0 else self._utf8(self._take(length - 1))

    def compact_string(self) -> str:
        value = self.compact_nullable_string()
        if value is None:
            raise CorruptRecordError("null where a string is required")
        return value

    def compact_array_length(self) -> int:
        length = self.uvarint()
        if length == 0:
            raise CorruptRecordError("null where an array is required")
        return length - 1

    def topic_id(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def compact_bytes(self) -> bytes:
        length = self.uvarint()
        if length == 0:
            raise CorruptRecordError("null where bytes are required")
        return bytes(self._take(length - 1))

    def classic_member_metadata(self) -> ClassicMemberMetadata:
        session_timeout_ms = self.int32()
        protocols = []
        for _ in range(self.compact_array_length()):
            name = self.compact_string()
            protocols.append((name, self.compact_bytes()))
            self.skip_tags()
        self.skip_tags()
        return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))

    def member_tags(self) -> ClassicMemberMetadata | None:
        """The member record's tagged fields: tag 0 is ClassicMemberMetadata."""
        classic = None
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            if tag == 0:
                end = self._pos + size
                classic = self.classic_member_metadata()
                if self._pos != end:
                    raise CorruptRecordError("ClassicMemberMetadata of the wrong size")
            else:
                self._take(size)
        return classic

    def assignment(self) -> dict[uuid.UUID, frozenset[int]]:
        partitions: dict[uuid.UUID, frozenset[int]] = {}
        for _ in range(self.compact_array_length()):
            topic_id = self.topic_id()
            indexes = frozenset(self.int32() for _ in range(self.compact_array_length()))
            self.skip_tags()
            if indexes:
                partitions[topic_id] = indexes
        return partitions

    def finish(self) -> None:
        if self._pos != len(self._data):
            raise CorruptRecordError(f"{len(self._data) - self._pos} trailing bytes")


def record_type(key: bytes) -> int:
    """The record type of any ``__consumer_offsets`` key (its leading int16)."""
    if len(key) < 2:
        raise CorruptRecordError("key shorter than its type")
    return int(_INT16.unpack_from(key)[0])


def decode_key(data: bytes) -> ConsumerGroupKey:
    r = _Reader(data)
    kind = r.int16()
    if kind not in CONSUMER_GROUP_RECORD_TYPES:
        raise CorruptRecordError(f"not a consumer group record type: {kind}")
    group_id = r.legacy_string()
    member_id = r.legacy_string() if kind in _MEMBER_KEYED else None
    r.finish()
    return ConsumerGroupKey(kind, group_id, member_id)


def decode_value(kind: int, data: bytes) -> ConsumerGroupValue:
    r = _Reader(data)
    version = r.int16()
    if version != _VALUE_VERSION:
        raise CorruptRecordError(f"unknown value version {version} of record type {kind}")
    value: ConsumerGroupValue
    if kind == GROUP_METADATA:
        value = GroupMetadataValue(r.int32())
    elif kind == TARGET_ASSIGNMENT_METADATA:
        value = TargetAssignmentMetadataValue(r.int32())
    elif kind == PARTITION_METADATA:
        topics = []
        for _ in range(r.compact_array_length()):
            topic_id, name, count = r.topic_id(), r.compact_string(), r.int32()
            racks: dict[int, frozenset[str]] = {}
            for _ in range(r.compact_array_length()):
                partition = r.int32()
                racks[partition] = frozenset(
                    r.compact_string() for _ in range(r.compact_array_length())
                )
                r.skip_tags()
            r.skip_tags()
            topics.append(TopicMetadata(topic_id, name, count, racks))
        value = PartitionMetadataValue(tuple(topics))
    elif kind == MEMBER_METADATA:
        value = MemberMetadataValue(
            instance_id=r.compact_nullable_string(),
            rack_id=r.compact_nullable_string(),
            client_id=r.compact_string(),
            client_host=r.compact_string(),
            subscribed_topic_names=tuple(
                r.compact_string() for _ in range(r.compact_array_length())
            ),
            subscribed_topic_regex=r.compact_nullable_string(),
            rebalance_timeout_ms=r.int32(),
            server_assignor=r.compact_nullable_string(),
        )
        value = replace(value, classic=r.member_tags())
        r.finish()
        return value
    elif kind == TARGET_ASSIGNMENT_MEMBER:
        value = TargetAssignmentMemberValue(r.assignment())
    elif kind == CURRENT_MEMBER_ASSIGNMENT:
        value = CurrentMemberAssignmentValue(
            member_epoch=r.int32(),
            previous_member_epoch=r.int32(),
            state=r.int8(),
            assigned=r.assignment(),
            pending_revocation=r.assignment(),
        )
    else:
        raise CorruptRecordError(f"not a consumer group record type: {kind}")
    r.skip_tags()
    r.finish()
    return value


def member_tombstones(group_id: str, member_id: str) -> Iterable[tuple[bytes, None]]:
    """A member leaves: its current assignment, target and metadata, in Kafka's order."""
    for kind in (CURRENT_MEMBER_ASSIGNMENT, TARGET_ASSIGNMENT_MEMBER, MEMBER_METADATA):
        yield encode_key(ConsumerGroupKey(kind, group_id, member_id)), None


def group_tombstones(group_id: str) -> Iterable[tuple[bytes, None]]:
    """The group-level records of a deleted group (its members' go first)."""
    for kind in (TARGET_ASSIGNMENT_METADATA, PARTITION_METADATA, GROUP_METADATA):
        yield encode_key(ConsumerGroupKey(kind, group_id)), None
