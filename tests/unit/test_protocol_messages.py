"""The kio wrapper for cold APIs: tolerant decoding and version-agnostic build."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataRequest as KpMetadataRequest
from kio.schema.errors import ErrorCode

from headwater.protocol.apis import SUPPORTED, ApiKey
from headwater.protocol.errors import InvalidRequestError, UnsupportedVersionError
from headwater.protocol.messages import (
    build,
    build_request,
    build_response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_class,
    response_class,
)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, payload: bytes) -> bytes:
    return uvarint(number) + uvarint(len(payload)) + payload


METADATA_DICT: dict[str, Any] = {
    "throttle_time": 7,
    "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None, "unknown": 1}],
    "cluster_id": "cluster",
    "controller_id": 1,
    "topics": [
        {
            "error_code": 0,
            "name": "t",
            "topic_id": uuid.UUID(int=5),
            "partitions": [
                {"partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}
            ],
        }
    ],
    "not_a_field": "dropped",
}


def test_every_supported_version_has_kio_request_and_response_classes() -> None:
    for api, (low, high) in SUPPORTED.items():
        for version in range(low, high + 1):
            assert request_class(api, version).__version__ == version
            assert response_class(api, version).__version__ == version


def test_unknown_version_raises_unsupported_version() -> None:
    with pytest.raises(UnsupportedVersionError):
        request_class(ApiKey.METADATA, 99)
    with pytest.raises(UnsupportedVersionError):
        response_class(999, 0)


def test_build_makes_metadata_v0_and_v12_from_one_dict() -> None:
    v0 = build_response(ApiKey.METADATA, 0, METADATA_DICT)
    v12 = build_response(ApiKey.METADATA, 12, METADATA_DICT)
    assert not hasattr(v0, "cluster_id")
    assert v12.cluster_id == "cluster"  # type: ignore[attr-defined]
    assert v12.throttle_time == datetime.timedelta(milliseconds=7)  # type: ignore[attr-defined]
    topic0 = v0.topics[0]  # type: ignore[attr-defined]
    topic12 = v12.topics[0]  # type: ignore[attr-defined]
    assert topic0.error_code is ErrorCode.none
    assert topic12.topic_id == uuid.UUID(int=5)
    assert topic12.partitions[0].leader_epoch == -1  # kio's schema default
    assert topic12.partitions[0].replica_nodes == (1,)
    for version, entity in ((0, v0), (12, v12)):
        assert decode_response(ApiKey.METADATA, version, encode_response(entity)) == entity


def test_build_fills_implicit_defaults_for_missing_fields() -> None:
    empty = build_response(ApiKey.METADATA, 12, {"topics": [{}]})
    topic = empty.topics[0]  # type: ignore[attr-defined]
    assert topic.error_code is ErrorCode.none
    assert topic.name is None  # nullable in v12
    assert topic.is_internal is False
    assert topic.partitions == ()
    assert empty.brokers == ()  # type: ignore[attr-defined]
    assert empty.throttle_time == datetime.timedelta(0)  # type: ignore[attr-defined]
    fetch = build_request(ApiKey.FETCH, 15, {})
    assert fetch.replica_state.replica_id == -1  # type: ignore[attr-defined]
    assert fetch.max_bytes == 0x7FFFFFFF  # type: ignore[attr-defined]


def test_build_uses_the_default_when_none_is_given_for_a_non_nullable_field() -> None:
    # Metadata v0 cannot send a null topic list; v12 can.
    assert build_request(ApiKey.METADATA, 0, {"topics": None}).topics == ()  # type: ignore[attr-defined]
    assert build_request(ApiKey.METADATA, 12, {"topics": None}).topics is None  # type: ignore[attr-defined]


def test_build_keeps_entities_that_are_already_built() -> None:
    cls = response_class(ApiKey.METADATA, 12)
    broker = build(cls, METADATA_DICT).brokers[0]  # type: ignore[attr-defined]
    rebuilt = build(cls, {"brokers": [broker]})
    assert rebuilt.brokers[0] is broker  # type: ignore[attr-defined]


def test_build_names_the_field_when_a_value_has_the_wrong_type() -> None:
    with pytest.raises(ValueError, match=r"MetadataResponseTopic\.error_code"):
        build_response(ApiKey.METADATA, 12, {"topics": [{"error_code": 12345}]})
    with pytest.raises(TypeError, match=r"MetadataResponseBroker\.host"):
        build_response(ApiKey.METADATA, 12, {"brokers": [{"host": 5}]})


def test_decode_request_reads_what_kafka_python_writes() -> None:
    request = KpMetadataRequest(
        topics=[KpMetadataRequest.MetadataRequestTopic(name="a")],
        allow_auto_topic_creation=False,
    )
    for version in (0, 4, 9, 12):
        decoded = decode_request(ApiKey.METADATA, version, request.encode(version=version))
        assert [t.name for t in decoded.topics] == ["a"]  # type: ignore[attr-defined]


def test_decode_request_skips_unknown_tagged_field_at_top_level() -> None:
    # MetadataRequest v12: topics, allow_auto_topic_creation, include_..._operations, tags
    body = (
        uvarint(2)
        + bytes(16)
        + uvarint(2)
        + b"t"
        + uvarint(0)
        + b"\x01\x00"
        + uvarint(1)
        + tag(50, b"\xff\xfe")
    )
    decoded = decode_request(ApiKey.METADATA, 12, body)
    assert decoded == build_request(
        ApiKey.METADATA, 12, {"topics": [{"name": "t"}], "allow_auto_topic_creation": True}
    )


def test_decode_request_skips_unknown_tagged_field_in_nested_struct() -> None:
    body = (
        uvarint(2)
        + bytes(16)
        + uvarint(2)
        + b"t"
        + uvarint(2)
        + tag(7, b"ab")
        + tag(8, b"")
        + b"\x00\x01"
        + uvarint(0)
    )
    decoded = decode_request(ApiKey.METADATA, 12, body)
    assert decoded.topics[0].name == "t"  # type: ignore[attr-defined]
    assert decoded.include_topic_authorized_operations is True  # type: ignore[attr-defined]


def test_decode_request_keeps_known_tags_next_to_unknown_ones() -> None:
    request = build_request(
        ApiKey.FETCH,
        15,
        {"replica_state": {"replica_id": 3, "replica_epoch": 9}, "cluster_id": "abc"},
    )
    body = encode_request(request)
    # Re-encode the tag section by hand with an unknown tag at both levels.
    replica_state = (3).to_bytes(4, "big", signed=True) + (9).to_bytes(8, "big", signed=True)
    original_tags = uvarint(2) + tag(0, uvarint(4) + b"abc") + tag(1, replica_state + b"\x00")
    assert body.endswith(original_tags)
    patched = (
        body[: -len(original_tags)]
        + uvarint(3)
        + tag(0, uvarint(4) + b"abc")
        + tag(9, b"unknown")
        + tag(1, replica_state + uvarint(1) + tag(4, b"x"))
    )
    assert decode_request(ApiKey.FETCH, 15, patched) == request


def test_truncated_request_raises_invalid_request() -> None:
    body = encode_request(build_request(ApiKey.METADATA, 12, METADATA_DICT | {"topics": []}))
    with pytest.raises(InvalidRequestError):
        decode_request(ApiKey.METADATA, 12, body[:-1])
    with pytest.raises(InvalidRequestError):
        decode_request(ApiKey.METADATA, 12, body[:-1] + tag(3, b"runs past the end")[:3])


@settings(max_examples=40, deadline=None)
@given(
    version=st.integers(0, 13),
    names=st.lists(st.text(max_size=20), max_size=5),
    auto_create=st.booleans(),
)
def test_metadata_request_round_trips_through_kio(
    version: int, names: list[str], auto_create: bool
) -> None:
    request = build_request(
        ApiKey.METADATA,
        version,
        {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": auto_create},
    )
    decoded = decode_request(
        ApiKey.METADATA, version, memoryview(b"xx" + encode_request(request)), 2
    )
    assert decoded == request


@settings(max_examples=30, deadline=None)
@given(
    version=st.integers(0, 4),
    error=st.sampled_from([0, 35]),
    keys=st.lists(st.integers(0, 70), max_size=5, unique=True),
)
def test_api_versions_response_round_trips(version: int, error: int, keys: list[int]) -> None:
    response = build_response(
        ApiKey.API_VERSIONS,
        version,
        {
            "error_code": error,
            "api_keys": [{"api_key": k, "min_version": 0, "max_version": 3} for k in keys],
        },
    )
    assert decode_response(ApiKey.API_VERSIONS, version, encode_response(response)) == response


def test_preload_loads_every_served_pair_and_skips_what_kio_lacks() -> None:
    from headwater.protocol import messages

    pairs = [(int(ApiKey.METADATA), 12), (int(ApiKey.DESCRIBE_GROUPS), 5), (9_999, 0)]
    assert messages.preload(pairs) == 2
    before = messages.request_class.cache_info().hits
    messages.request_class(int(ApiKey.METADATA), 12)
    assert messages.request_class.cache_info().hits == before + 1  # already loaded
