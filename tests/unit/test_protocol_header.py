"""Request/response headers: v1 vs v2, unknown tags, the ApiVersions exceptions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from headwater.protocol.apis import API_FLEXIBLE_FROM, SUPPORTED, ApiKey, is_supported
from headwater.protocol.errors import InvalidRequestError
from headwater.protocol.header import (
    RequestHeader,
    api_versions_error_body,
    encode_api_versions_error,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    parse_response_header,
)
from headwater.protocol.messages import decode_response, request_class


def test_every_api_has_a_first_flexible_version_matching_kio() -> None:
    for api in ApiKey:
        first = API_FLEXIBLE_FROM[api]
        low, high = SUPPORTED[api]
        for version in range(low, high + 1):
            assert request_class(api, version).__flexible__ == (version >= first)


def test_header_v1_for_non_flexible_metadata_from_kafka_python() -> None:
    request = MetadataRequest(topics=None)
    request.with_header(correlation_id=7, client_id="cli")
    frame = request.encode(version=4, header=True)
    header, offset = parse_request_header(frame)
    assert header == RequestHeader(ApiKey.METADATA, 4, 7, "cli")
    assert frame[offset:] == request.encode(version=4)


def test_header_v2_for_flexible_metadata_from_kafka_python() -> None:
    request = MetadataRequest(topics=None)
    request.with_header(correlation_id=8, client_id="cli")
    frame = request.encode(version=12, header=True)
    header, offset = parse_request_header(memoryview(frame))
    assert header == RequestHeader(ApiKey.METADATA, 12, 8, "cli")
    assert frame[offset:] == request.encode(version=12)


def test_header_v2_skips_unknown_tagged_fields() -> None:
    header = RequestHeader(ApiKey.FETCH, 12, 5, "c")
    plain = encode_request_header(header)
    assert plain.endswith(b"\x00")
    tagged = plain[:-1] + b"\x02" + b"\x05\x03abc" + b"\x7f\x00" + b"BODY"
    assert parse_request_header(tagged) == (header, len(tagged) - 4)


def test_null_client_id_and_flexible_api_versions_request() -> None:
    request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    request.with_header(correlation_id=9, client_id=None)
    frame = request.encode(version=3, header=True)
    header, offset = parse_request_header(frame)
    assert header == RequestHeader(ApiKey.API_VERSIONS, 3, 9, None)
    assert frame[offset:] == request.encode(version=3)


def test_unknown_api_key_and_unsupported_version_still_yield_a_header() -> None:
    unknown = RequestHeader(71, 0, 1, "librdkafka")
    assert parse_request_header(encode_request_header(unknown) + b"\x00")[0] == unknown
    too_new = RequestHeader(ApiKey.API_VERSIONS, 9, 2, "x")
    frame = encode_request_header(too_new) + b"\x00\x00"
    assert parse_request_header(frame)[0] == too_new
    assert not is_supported(71, 0)
    assert not is_supported(ApiKey.API_VERSIONS, 9)
    assert is_supported(ApiKey.API_VERSIONS, 4)


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x03\x00\x04\x00\x00",
        b"\x00\x03\x00\x04\x00\x00\x00\x01\x00\x09ab",
        b"\x00\x01\x00\x0c\x00\x00\x00\x01\xff\xff\x01\x00\x05",
    ],
    ids=["no-client-id", "client-id-too-long", "tag-past-end"],
)
def test_truncated_header_raises_invalid_request(frame: bytes) -> None:
    with pytest.raises(InvalidRequestError):
        parse_request_header(frame)


@given(
    api=st.sampled_from(list(ApiKey)),
    version=st.integers(0, 20),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.none() | st.text(max_size=30),
)
def test_request_header_round_trips(
    api: ApiKey, version: int, correlation_id: int, client_id: str | None
) -> None:
    header = RequestHeader(api, version, correlation_id, client_id)
    encoded = encode_request_header(header)
    assert parse_request_header(encoded + b"body") == (header, len(encoded))


def test_response_header_v1_only_for_flexible_versions() -> None:
    assert encode_response_header(7, ApiKey.METADATA, 8) == b"\x00\x00\x00\x07"
    assert encode_response_header(7, ApiKey.METADATA, 9) == b"\x00\x00\x00\x07\x00"
    assert encode_response_header(7, ApiKey.FETCH, 12) == b"\x00\x00\x00\x07\x00"
    assert parse_response_header(b"\x00\x00\x00\x07\x00rest", ApiKey.FETCH, 12) == (7, 5)


@pytest.mark.parametrize("version", [0, 3, 4, 7])
def test_api_versions_response_header_is_always_v0(version: int) -> None:
    assert encode_response_header(3, ApiKey.API_VERSIONS, version) == b"\x00\x00\x00\x03"
    assert parse_response_header(b"\x00\x00\x00\x03body", ApiKey.API_VERSIONS, version) == (3, 4)


def test_api_versions_error_is_a_v0_frame_listing_key_18() -> None:
    frame = encode_api_versions_error(42, SUPPORTED)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert frame[4:8] == (42).to_bytes(4, "big")
    body = frame[8:]
    assert body == api_versions_error_body(SUPPORTED)
    response = decode_response(ApiKey.API_VERSIONS, 0, body)
    assert int(response.error_code) == 35  # type: ignore[attr-defined]
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [  # type: ignore[attr-defined]
        (18, 0, 4)
    ]
