"""The hand-written Produce codec agrees with kio and kafka-python for v3..v10."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest as KpProduceRequest
from kafka.protocol.producer import ProduceResponse as KpProduceResponse

from headwater.protocol.apis import ApiKey
from headwater.protocol.errors import InvalidRequestError, UnsupportedVersionError
from headwater.protocol.messages import build_request, build_response, encode_request
from headwater.protocol.messages import encode_response as kio_encode_response
from headwater.protocol.produce_codec import (
    ProducePartitionData,
    ProducePartitionResponse,
    ProduceRequestData,
    ProduceResponseData,
    ProduceTopicData,
    ProduceTopicResponse,
    RecordError,
    decode_produce_request,
    decode_produce_response,
    encode_produce_request,
    encode_produce_response,
)

VERSIONS = range(3, 11)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(min_size=1, max_size=12)


# --- requests -----------------------------------------------------------------

produce_requests = st.builds(
    ProduceRequestData,
    st.none() | st.text(max_size=10),
    st.sampled_from([-1, 0, 1]),
    st.integers(0, 2**31 - 1),
    st.lists(
        st.builds(
            ProduceTopicData,
            NAMES,
            st.lists(
                st.builds(
                    ProducePartitionData,
                    INT32,
                    st.none() | st.binary(max_size=30).map(memoryview),
                ),
                max_size=4,
            ),
        ),
        max_size=4,
    ),
)


def kio_request_bytes(req: ProduceRequestData, version: int) -> bytes:
    data = {
        "transactional_id": req.transactional_id,
        "acks": req.acks,
        "timeout": req.timeout_ms,
        "topic_data": [
            {
                "name": t.name,
                "partition_data": [
                    {"index": index, "records": None if records is None else bytes(records)}
                    for index, records in t.partitions
                ],
            }
            for t in req.topics
        ],
    }
    return encode_request(build_request(ApiKey.PRODUCE, version, data))


def plain(req: ProduceRequestData) -> object:
    """Comparable form: memoryviews as bytes."""
    return (
        req.transactional_id,
        req.acks,
        req.timeout_ms,
        [
            (t.name, [(i, None if r is None else bytes(r)) for i, r in t.partitions])
            for t in req.topics
        ],
    )


@settings(max_examples=150, deadline=None)
@given(req=produce_requests, version=st.sampled_from(VERSIONS))
def test_produce_request_matches_kio_both_ways(req: ProduceRequestData, version: int) -> None:
    kio_bytes = kio_request_bytes(req, version)
    assert plain(decode_produce_request(kio_bytes, 0, version)) == plain(req)
    assert encode_produce_request(req, version) == kio_bytes


@pytest.mark.parametrize("version", VERSIONS)
def test_produce_request_from_kafka_python_keeps_records_as_views_of_the_frame(
    version: int,
) -> None:
    data = KpProduceRequest.TopicProduceData
    request = KpProduceRequest(
        transactional_id="txn" if version >= 3 else None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            data(
                name="orders",
                partition_data=[
                    data.PartitionProduceData(index=0, records=b"batch-0"),
                    data.PartitionProduceData(index=3, records=None),
                ],
            )
        ],
    )
    frame = b"hdr" + request.encode(version=version)
    decoded = decode_produce_request(frame, 3, version)
    assert (decoded.transactional_id, decoded.acks, decoded.timeout_ms) == ("txn", -1, 30000)
    (topic,) = decoded.topics
    assert topic.name == "orders"
    (index0, records0), (index3, records3) = topic.partitions
    assert (index0, index3, records3) == (0, 3, None)
    assert isinstance(records0, memoryview)
    assert records0.obj is frame  # a slice of the frame, not a copy
    assert records0 == b"batch-0"


def test_truncated_produce_request_is_invalid() -> None:
    req = ProduceRequestData(
        None, 1, 100, [ProduceTopicData("t", [ProducePartitionData(0, memoryview(b"abc"))])]
    )
    encoded = encode_produce_request(req, 9)
    for cut in (1, 6, len(encoded) - 2):
        with pytest.raises(InvalidRequestError):
            decode_produce_request(encoded[:cut], 0, 9)


def test_unsupported_produce_version_is_refused() -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_produce_request(b"", 0, 11)
    with pytest.raises(UnsupportedVersionError):
        encode_produce_response(ProduceResponseData(), 2)


# --- responses ----------------------------------------------------------------

partition_responses = st.builds(
    ProducePartitionResponse,
    INT32,
    st.sampled_from([0, 2, 3, 47, 87]),
    INT64,
    st.just(-1) | st.integers(0, 2**41),  # kio turns this field into a datetime
    INT64,
    st.lists(st.builds(RecordError, INT32, st.none() | st.text(max_size=8)), max_size=2),
    st.none() | st.text(max_size=12),
)

produce_responses = st.builds(
    ProduceResponseData,
    st.lists(
        st.builds(ProduceTopicResponse, NAMES, st.lists(partition_responses, max_size=3)),
        max_size=3,
    ),
    st.integers(0, 2**31 - 1),
)


def as_sent(resp: ProduceResponseData, version: int) -> ProduceResponseData:
    return ProduceResponseData(
        [
            ProduceTopicResponse(
                t.name,
                [
                    ProducePartitionResponse(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset if version >= 5 else -1,
                        p.record_errors if version >= 8 else [],
                        p.error_message if version >= 8 else None,
                    )
                    for p in t.partitions
                ],
            )
            for t in resp.topics
        ],
        resp.throttle_time_ms,
    )


def kio_response_bytes(resp: ProduceResponseData, version: int) -> bytes:
    data = {
        "throttle_time": resp.throttle_time_ms,
        "responses": [
            {
                "name": t.name,
                "partition_responses": [
                    {
                        "index": p.index,
                        "error_code": p.error_code,
                        "base_offset": p.base_offset,
                        "log_append_time": p.log_append_time_ms,
                        "log_start_offset": p.log_start_offset,
                        "record_errors": [
                            {"batch_index": e.batch_index, "batch_index_error_message": e.message}
                            for e in p.record_errors
                        ],
                        "error_message": p.error_message,
                    }
                    for p in t.partitions
                ],
            }
            for t in resp.topics
        ],
    }
    return kio_encode_response(build_response(ApiKey.PRODUCE, version, data))


@settings(max_examples=150, deadline=None)
@given(resp=produce_responses, version=st.sampled_from(VERSIONS))
def test_produce_response_is_byte_identical_to_kio(resp: ProduceResponseData, version: int) -> None:
    assert encode_produce_response(resp, version) == kio_response_bytes(resp, version)


@settings(max_examples=100, deadline=None)
@given(resp=produce_responses, version=st.sampled_from(VERSIONS))
def test_produce_response_round_trips_through_the_client_decoder(
    resp: ProduceResponseData, version: int
) -> None:
    encoded = encode_produce_response(resp, version)
    assert decode_produce_response(b"xx" + encoded, 2, version) == as_sent(resp, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_kafka_python_reads_our_produce_response(version: int) -> None:
    resp = ProduceResponseData(
        [
            ProduceTopicResponse(
                "orders",
                [
                    ProducePartitionResponse(0, base_offset=41, log_start_offset=0),
                    ProducePartitionResponse(
                        1, error_code=87, record_errors=[RecordError(0, "bad")], error_message="no"
                    ),
                ],
            )
        ],
        throttle_time_ms=5,
    )
    decoded = KpProduceResponse.decode(encode_produce_response(resp, version), version=version)
    (topic,) = decoded.responses
    ok, bad = topic.partition_responses
    assert (topic.name, ok.base_offset, bad.error_code) == ("orders", 41, 87)
    assert decoded.throttle_time_ms == 5
    if version >= 8:
        assert bad.error_message == "no"
        assert [(e.batch_index, e.batch_index_error_message) for e in bad.record_errors] == [
            (0, "bad")
        ]
