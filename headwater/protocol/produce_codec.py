"""Produce v3..v10 on the wire, hand-written with ``struct``.

Hand-written so that record data is never copied: a decoded request keeps
each partition's records as a ``memoryview`` slice of the request frame,
which the log validates and appends as is (a 100 MB produce is parsed
without touching its payload). Flexible from v9; v8 adds per-batch record
errors and an error message to the response; v2 log_append_time, v5
log_start_offset; v10 (KIP-951) the current leader of a partition refused
with NOT_LEADER_OR_FOLLOWER and that leader's endpoint, as tagged fields, so
a client moves to the new leader without a Metadata round trip.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from headwater.protocol.errors import (
    InvalidRequestError,
    InvalidResponseError,
    UnsupportedVersionError,
)
from headwater.protocol.metadata_codec import MetadataBroker
from headwater.protocol.wire import (
    EMPTY_TAGS,
    INT32,
    Buffer,
    read_array_length,
    read_bytes_view,
    read_string,
    read_tagged_fields,
    skip_tagged_fields,
    write_array_length,
    write_bytes_length,
    write_string,
    write_uvarint,
)

MIN_VERSION: Final = 3
MAX_VERSION: Final = 10

_ACKS_TIMEOUT: Final = struct.Struct(">hi")


class ProducePartitionData(NamedTuple):
    """One partition of a ProduceRequest: (index, raw record batches).

    The index field is called ``partition`` because a tuple already has an
    ``index`` method; unpack it as ``for index, records in topic.partitions``.
    """

    partition: int
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopicData:
    name: str
    partitions: list[ProducePartitionData] = field(default_factory=list)


@dataclass(slots=True)
class ProduceRequestData:
    transactional_id: str | None = None
    acks: int = -1
    timeout_ms: int = 30_000
    topics: list[ProduceTopicData] = field(default_factory=list)


class RecordError(NamedTuple):
    """A batch the broker rejected (v8+: BatchIndexAndErrorMessage)."""

    batch_index: int
    message: str | None = None


@dataclass(slots=True)
class ProducePartitionResponse:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[RecordError] = field(default_factory=list)
    error_message: str | None = None
    #: v10+ (KIP-951): (leader id, leader epoch) when refused for not being the leader.
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class ProduceTopicResponse:
    name: str
    partitions: list[ProducePartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class ProduceResponseData:
    topics: list[ProduceTopicResponse] = field(default_factory=list)
    throttle_time_ms: int = 0
    #: v10+ (KIP-951): the endpoints of the leaders named in ``current_leader``
    #: (Kafka's NodeEndpoint: a Metadata answer's broker, field for field).
    node_endpoints: list[MetadataBroker] = field(default_factory=list)


def _check_version(version: int) -> None:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise UnsupportedVersionError(f"Produce v{version} is not supported")


def _non_null(name: str | None) -> str:
    if name is None:
        raise ValueError("null topic name")
    return name


# --- request ------------------------------------------------------------------


def decode_produce_request(buf: Buffer, offset: int, version: int) -> ProduceRequestData:
    """Decode a ProduceRequest body; records stay views into ``buf`` (no copy)."""
    _check_version(version)
    flexible = version >= 9
    try:
        transactional_id, pos = read_string(buf, offset, flexible)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
        pos += _ACKS_TIMEOUT.size
        req = ProduceRequestData(transactional_id, acks, timeout_ms)
        topic_count, pos = read_array_length(buf, pos, flexible)
        for _ in range(topic_count):
            name, pos = read_string(buf, pos, flexible)
            topic = ProduceTopicData(_non_null(name))
            count, pos = read_array_length(buf, pos, flexible)
            for _ in range(count):
                index = INT32.unpack_from(buf, pos)[0]
                records, pos = read_bytes_view(buf, pos + 4, flexible)
                if flexible:
                    pos = skip_tagged_fields(buf, pos)
                topic.partitions.append(ProducePartitionData(index, records))
            if flexible:
                pos = skip_tagged_fields(buf, pos)
            req.topics.append(topic)
        if flexible:
            pos = skip_tagged_fields(buf, pos)
    except (struct.error, ValueError, IndexError) as exc:
        raise InvalidRequestError(f"bad Produce v{version} request: {exc}") from exc
    return req


def encode_produce_request(req: ProduceRequestData, version: int) -> bytes:
    """Client side: a ProduceRequest body."""
    _check_version(version)
    flexible = version >= 9
    out = [write_string(req.transactional_id, flexible)]
    out.append(_ACKS_TIMEOUT.pack(req.acks, req.timeout_ms))
    out.append(write_array_length(len(req.topics), flexible))
    for topic in req.topics:
        out.append(write_string(topic.name, flexible))
        out.append(write_array_length(len(topic.partitions), flexible))
        for index, records in topic.partitions:
            out.append(INT32.pack(index))
            if records is None:
                out.append(write_bytes_length(-1, flexible))
            else:
                out.append(write_bytes_length(len(records), flexible))
                out.append(bytes(records))
            if flexible:
                out.append(EMPTY_TAGS)
        if flexible:
            out.append(EMPTY_TAGS)
    if flexible:
        out.append(EMPTY_TAGS)
    return b"".join(out)


# --- response -----------------------------------------------------------------


def encode_produce_response(resp: ProduceResponseData, version: int) -> bytes:
    """The ProduceResponse body (no response header)."""
    _check_version(version)
    flexible = version >= 9
    fixed = _response_partition_struct(version)
    out = [write_array_length(len(resp.topics), flexible)]
    for topic in resp.topics:
        out.append(write_string(topic.name, flexible))
        out.append(write_array_length(len(topic.partitions), flexible))
        for p in topic.partitions:
            if version >= 5:
                out.append(
                    fixed.pack(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset,
                    )
                )
            else:
                out.append(fixed.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms))
            if version >= 8:
                out.append(write_array_length(len(p.record_errors), flexible))
                for batch_index, message in p.record_errors:
                    out.append(INT32.pack(batch_index))
                    out.append(write_string(message, flexible))
                    if flexible:
                        out.append(EMPTY_TAGS)
                out.append(write_string(p.error_message, flexible))
            if version >= 10 and p.current_leader is not None:
                out.append(_current_leader_tag(*p.current_leader))
            elif flexible:
                out.append(EMPTY_TAGS)
        if flexible:
            out.append(EMPTY_TAGS)
    out.append(INT32.pack(resp.throttle_time_ms))
    if version >= 10 and resp.node_endpoints:
        out.append(_node_endpoints_tag(resp.node_endpoints))
    elif flexible:
        out.append(EMPTY_TAGS)
    return b"".join(out)


_LEADER_ID_AND_EPOCH: Final = struct.Struct(">ii")
#: One tagged field (tag 0) holding a LeaderIdAndEpoch: two int32 and its own empty tags.
_CURRENT_LEADER_HEADER: Final = write_uvarint(1) + write_uvarint(0) + write_uvarint(9)


def _current_leader_tag(leader_id: int, leader_epoch: int) -> bytes:
    return _CURRENT_LEADER_HEADER + _LEADER_ID_AND_EPOCH.pack(leader_id, leader_epoch) + EMPTY_TAGS


def _node_endpoints_tag(endpoints: list[MetadataBroker]) -> bytes:
    body = [write_array_length(len(endpoints), True)]
    for e in endpoints:
        body.append(INT32.pack(e.node_id))
        body.append(write_string(e.host, True))
        body.append(INT32.pack(e.port))
        body.append(write_string(e.rack, True))
        body.append(EMPTY_TAGS)
    data = b"".join(body)
    return write_uvarint(1) + write_uvarint(0) + write_uvarint(len(data)) + data


def _read_current_leader(tags: dict[int, memoryview]) -> tuple[int, int] | None:
    raw = tags.get(0)
    if raw is None:
        return None
    leader_id, leader_epoch = _LEADER_ID_AND_EPOCH.unpack_from(raw, 0)
    return int(leader_id), int(leader_epoch)


def _read_node_endpoints(tags: dict[int, memoryview]) -> list[MetadataBroker]:
    raw = tags.get(0)
    if raw is None:
        return []
    out = []
    count, pos = read_array_length(raw, 0, True)
    for _ in range(count):
        node_id = INT32.unpack_from(raw, pos)[0]
        host, pos = read_string(raw, pos + 4, True)
        port = INT32.unpack_from(raw, pos)[0]
        rack, pos = read_string(raw, pos + 4, True)
        pos = skip_tagged_fields(raw, pos)
        out.append(MetadataBroker(node_id, _non_null(host), port, rack))
    return out


def decode_produce_response(buf: Buffer, offset: int, version: int) -> ProduceResponseData:
    """Client side: decode a ProduceResponse body."""
    _check_version(version)
    flexible = version >= 9
    fixed = _response_partition_struct(version)
    try:
        resp = ProduceResponseData()
        topic_count, pos = read_array_length(buf, offset, flexible)
        for _ in range(topic_count):
            name, pos = read_string(buf, pos, flexible)
            topic = ProduceTopicResponse(_non_null(name))
            count, pos = read_array_length(buf, pos, flexible)
            for _ in range(count):
                values = fixed.unpack_from(buf, pos)
                pos += fixed.size
                part = ProducePartitionResponse(*values)
                if version >= 8:
                    errors, pos = read_array_length(buf, pos, flexible)
                    for _ in range(errors):
                        batch_index = INT32.unpack_from(buf, pos)[0]
                        message, pos = read_string(buf, pos + 4, flexible)
                        if flexible:
                            pos = skip_tagged_fields(buf, pos)
                        part.record_errors.append(RecordError(batch_index, message))
                    part.error_message, pos = read_string(buf, pos, flexible)
                if version >= 10:
                    tags, pos = read_tagged_fields(buf, pos)
                    part.current_leader = _read_current_leader(tags)
                elif flexible:
                    pos = skip_tagged_fields(buf, pos)
                topic.partitions.append(part)
            if flexible:
                pos = skip_tagged_fields(buf, pos)
            resp.topics.append(topic)
        resp.throttle_time_ms = INT32.unpack_from(buf, pos)[0]
        pos += 4
        if version >= 10:
            tags, pos = read_tagged_fields(buf, pos)
            resp.node_endpoints = _read_node_endpoints(tags)
        elif flexible:
            skip_tagged_fields(buf, pos)
    except (struct.error, ValueError, IndexError) as exc:
        raise InvalidResponseError(f"bad Produce v{version} response: {exc}") from exc
    return resp


def _response_partition_struct(version: int) -> struct.Struct:
    """index, error_code, base_offset, log_append_time_ms, [log_start_offset v5+]."""
    return _RESPONSE_PARTITION_V5 if version >= 5 else _RESPONSE_PARTITION_V3


_RESPONSE_PARTITION_V3: Final = struct.Struct(">ihqq")
_RESPONSE_PARTITION_V5: Final = struct.Struct(">ihqqq")
