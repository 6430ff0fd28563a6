"""How group state survives a restart: key/value records in an internal log.

Like Kafka's `__consumer_offsets`, every committed offset and every completed
generation of a group is appended as a key/value record; the latest value of a
key wins and a `None` value (tombstone) deletes it. Replaying the log from the
start rebuilds the coordinator. The broker supplies the real log (it adapts a
partition of its own log to `StateLog`); `InMemoryStateLog` serves tests.

Encodings (big-endian, `struct`; kio has no schemas for these internal records
and they are a dozen fixed fields, so a small codec is clearer than a library):

    key   = int16 key_version, then
              1 (offset): string group, string topic, int32 partition
              2 (group):  string group
    value = int16 value_version (1), then
              offset: int64 offset, int32 leader_epoch, string metadata,
                      int64 commit_timestamp_ms
              group:  string protocol_type, int32 generation,
                      nullable string protocol, nullable string leader,
                      int32 member count, then per member: string member_id,
                      nullable string instance_id, string client_id,
                      string client_host, int32 rebalance_timeout_ms,
                      int32 session_timeout_ms, bytes subscription,
                      bytes assignment
    string/bytes = int32 length (-1 = null) + UTF-8 / raw bytes

Compaction is not done yet: the log grows with every commit. A compactor only
needs to keep the last record per key and drop tombstoned keys;
`GroupCoordinator.live_records()` yields exactly that set for a rewrite.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 1
GROUP_VALUE_VERSION = 1


class CorruptRecordError(ValueError):
    """A record in the offsets log cannot be decoded: refuse to guess at group state."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """What a group committed for one partition (the OffsetFetch answer)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """A member as persisted with its generation: enough to resume heartbeats."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group's last completed generation (or its empty state)."""

    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    members: tuple[MemberRecord, ...]


class _Encoder:
    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int16(self, value: int) -> _Encoder:
        self._parts.append(struct.pack(">h", value))
        return self

    def int32(self, value: int) -> _Encoder:
        self._parts.append(struct.pack(">i", value))
        return self

    def int64(self, value: int) -> _Encoder:
        self._parts.append(struct.pack(">q", value))
        return self

    def bytes_(self, value: bytes | None) -> _Encoder:
        if value is None:
            return self.int32(-1)
        self.int32(len(value))
        self._parts.append(value)
        return self

    def string(self, value: str | None) -> _Encoder:
        return self.bytes_(None if value is None else value.encode("utf-8"))

    def build(self) -> bytes:
        return b"".join(self._parts)


# Compiled once: a coordinator taking over a partition decodes every record in it.
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class _Decoder:
    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._pos = 0

    def _unpack(self, field: struct.Struct) -> int:
        try:
            (value,) = field.unpack_from(self._view, self._pos)
        except struct.error as exc:
            raise CorruptRecordError(f"truncated record at byte {self._pos}") from exc
        self._pos += field.size
        return int(value)

    def int16(self) -> int:
        return self._unpack(_INT16)

    def int32(self) -> int:
        return self._unpack(_INT32)

    def int64(self) -> int:
        return self._unpack(_INT64)

    def nullable_bytes(self) -> bytes | None:
        length = self.int32()
        if length < 0:
            return None
        end = self._pos + length
        if end > len(self._view):
            raise CorruptRecordError(f"truncated field at byte {self._pos}")
        value = bytes(self._view[self._pos : end])
        self._pos = end
        return value

    def bytes_(self) -> bytes:
        value = self.nullable_bytes()
        if value is None:
            raise CorruptRecordError("null where a value is required")
        return value

    def nullable_string(self) -> str | None:
        raw = self.nullable_bytes()
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError("string is not UTF-8") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise CorruptRecordError("null where a string is required")
        return value

    def finish(self) -> None:
        if self._pos != len(self._view):
            raise CorruptRecordError(f"{len(self._view) - self._pos} trailing bytes")


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        return (
            _Encoder()
            .int16(OFFSET_KEY_VERSION)
            .string(key.group_id)
            .string(key.topic)
            .int32(key.partition)
            .build()
        )
    return _Encoder().int16(GROUP_KEY_VERSION).string(key.group_id).build()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    decoder = _Decoder(data)
    version = decoder.int16()
    key: OffsetKey | GroupKey
    if version == OFFSET_KEY_VERSION:
        key = OffsetKey(decoder.string(), decoder.string(), decoder.int32())
    elif version == GROUP_KEY_VERSION:
        key = GroupKey(decoder.string())
    else:
        raise CorruptRecordError(f"unknown key version {version}")
    decoder.finish()
    return key


def encode_offset_value(value: CommittedOffset) -> bytes:
    return (
        _Encoder()
        .int16(OFFSET_VALUE_VERSION)
        .int64(value.offset)
        .int32(value.leader_epoch)
        .string(value.metadata)
        .int64(value.commit_timestamp_ms)
        .build()
    )


def decode_offset_value(data: bytes) -> CommittedOffset:
    decoder = _Decoder(data)
    version = decoder.int16()
    if version != OFFSET_VALUE_VERSION:
        raise CorruptRecordError(f"unknown offset value version {version}")
    value = CommittedOffset(
        offset=decoder.int64(),
        leader_epoch=decoder.int32(),
        metadata=decoder.string(),
        commit_timestamp_ms=decoder.int64(),
    )
    decoder.finish()
    return value


def encode_group_value(value: GroupRecord) -> bytes:
    encoder = (
        _Encoder()
        .int16(GROUP_VALUE_VERSION)
        .string(value.protocol_type)
        .int32(value.generation_id)
        .string(value.protocol_name)
        .string(value.leader_id)
        .int32(len(value.members))
    )
    for member in value.members:
        (
            encoder.string(member.member_id)
            .string(member.group_instance_id)
            .string(member.client_id)
            .string(member.client_host)
            .int32(member.rebalance_timeout_ms)
            .int32(member.session_timeout_ms)
            .bytes_(member.subscription)
            .bytes_(member.assignment)
        )
    return encoder.build()


def decode_group_value(data: bytes) -> GroupRecord:
    decoder = _Decoder(data)
    version = decoder.int16()
    if version != GROUP_VALUE_VERSION:
        raise CorruptRecordError(f"unknown group value version {version}")
    protocol_type = decoder.string()
    generation_id = decoder.int32()
    protocol_name = decoder.nullable_string()
    leader_id = decoder.nullable_string()
    count = decoder.int32()
    if count < 0:
        raise CorruptRecordError("negative member count")
    members = tuple(
        MemberRecord(
            member_id=decoder.string(),
            group_instance_id=decoder.nullable_string(),
            client_id=decoder.string(),
            client_host=decoder.string(),
            rebalance_timeout_ms=decoder.int32(),
            session_timeout_ms=decoder.int32(),
            subscription=decoder.bytes_(),
            assignment=decoder.bytes_(),
        )
        for _ in range(count)
    )
    decoder.finish()
    return GroupRecord(protocol_type, generation_id, protocol_name, leader_id, members)
