"""Produce v3..v10 on the wire, hand-written with ``struct``.

Hand-written so that record data is never copied: a decoded request keeps
each partition's records as a ``memoryview`` slice of the request frame,
which the log validates and appends as is (a 100 MB produce is parsed
without touching its payload). Flexible from v9; v8 adds per-batch record
errors and an error message to the response; v2 log_append_time, v5
log_start_offset.
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
from headwater.protocol.wire import (
    EMPTY_TAGS,
    INT32,
    Buffer,
    read_array_length,
    read_bytes_view,
    read_string,
    skip_tagged_fields,
    write_array_length,
    write_bytes_length,
    write_string,
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


@dataclass(slots=True)
class ProduceTopicResponse:
    name: str
    partitions: list[ProducePartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class ProduceResponseData:
    topics: list[ProduceTopicResponse] = field(default_factory=list)
    throttle_time_ms: int = 0


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
            if flexible:
                out.append(EMPTY_TAGS)
        if flexible:
            out.append(EMPTY_TAGS)
    out.append(INT32.pack(resp.throttle_time_ms))
    if flexible:
        out.append(EMPTY_TAGS)
    return b"".join(out)


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
                if flexible:
                    pos = skip_tagged_fields(buf, pos)
                topic.partitions.append(part)
            if flexible:
                pos = skip_tagged_fields(buf, pos)
            resp.topics.append(topic)
        resp.throttle_time_ms = INT32.unpack_from(buf, pos)[0]
        pos += 4
        if flexible:
            skip_tagged_fields(buf, pos)
    except (struct.error, ValueError, IndexError) as exc:
        raise InvalidResponseError(f"bad Produce v{version} response: {exc}") from exc
    return resp


def _response_partition_struct(version: int) -> struct.Struct:
    """index, error_code, base_offset, log_append_time_ms, [log_start_offset v5+]."""
    return _RESPONSE_PARTITION_V5 if version >= 5 else _RESPONSE_PARTITION_V3


_RESPONSE_PARTITION_V3: Final = struct.Struct(">ihqq")
_RESPONSE_PARTITION_V5: Final = struct.Struct(">ihqqq")
