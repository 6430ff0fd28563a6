"""The hand-written Fetch codec agrees with kio and kafka-python for v4..v16."""

from __future__ import annotations

import dataclasses
import tempfile
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest as KpFetchRequest
from kafka.protocol.consumer import FetchResponse as KpFetchResponse

from headwater.protocol.apis import ApiKey
from headwater.protocol.errors import InvalidRequestError, UnsupportedVersionError
from headwater.protocol.fetch_codec import (
    CODEC_STEP,
    decode_fetch_request,
    decode_fetch_request_steps,
    decode_fetch_response,
    encode_fetch_request,
    encode_fetch_response,
    encode_fetch_response_steps,
)
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    AbortedTransaction,
    FetchRequestData,
    FetchResponseData,
    PartitionData,
    PartitionFetch,
    TopicIdPartition,
)
from headwater.protocol.file_slice import FileSlice
from headwater.protocol.messages import build_request, build_response, encode_request
from headwater.protocol.messages import encode_response as kio_encode_response
from headwater.steps import count_steps

VERSIONS = range(4, 17)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# One file for every FileSlice the tests make.
SEGMENT = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the module
SEGMENT.write(bytes(range(256)) * 16)
SEGMENT.flush()

TOPICS = [("alpha", uuid.UUID(int=1)), ("beta", uuid.UUID(int=2)), ("tópico", uuid.UUID(int=3))]


def topic_key(item: Any, version: int) -> object:
    return item.topic_id if version >= 13 else item.topic


def grouped(items: list[Any], version: int) -> list[list[Any]]:
    groups: list[list[Any]] = []
    for item in items:
        if groups and topic_key(groups[-1][0], version) == topic_key(item, version):
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


# --- requests -----------------------------------------------------------------


def kio_request_bytes(req: FetchRequestData, version: int) -> bytes:
    """The same request written by kio, topics grouped like ours."""
    data = {
        "replica_id": req.replica_id,
        "replica_state": {"replica_id": req.replica_id, "replica_epoch": -1},
        "max_wait": req.max_wait_ms,
        "min_bytes": req.min_bytes,
        "max_bytes": req.max_bytes,
        "isolation_level": req.isolation_level,
        "session_id": req.session_id,
        "session_epoch": req.session_epoch,
        "rack_id": req.rack_id,
        "topics": [
            {
                "topic": g[0].topic,
                "topic_id": g[0].topic_id,
                "partitions": [dataclasses.asdict(p) for p in g],
            }
            for g in grouped(req.partitions, version)
        ],
        "forgotten_topics_data": [
            {"topic": g[0].topic, "topic_id": g[0].topic_id, "partitions": [k.partition for k in g]}
            for g in grouped(req.forgotten, version)
        ],
    }
    return encode_request(build_request(ApiKey.FETCH, version, data))


def as_sent(req: FetchRequestData, version: int) -> FetchRequestData:
    """What survives the wire at ``version``: absent fields read back as defaults."""

    def key(topic_id: uuid.UUID, topic: str) -> tuple[uuid.UUID, str]:
        return (topic_id, "") if version >= 13 else (ZERO_UUID, topic)

    partitions = [
        PartitionFetch(
            *key(p.topic_id, p.topic),
            partition=p.partition,
            fetch_offset=p.fetch_offset,
            log_start_offset=p.log_start_offset if version >= 5 else -1,
            partition_max_bytes=p.partition_max_bytes,
            current_leader_epoch=p.current_leader_epoch if version >= 9 else -1,
            last_fetched_epoch=p.last_fetched_epoch if version >= 12 else -1,
        )
        for p in req.partitions
    ]
    forgotten = [
        TopicIdPartition(*key(k.topic_id, k.topic), k.partition)
        for k in (req.forgotten if version >= 7 else [])
    ]
    return FetchRequestData(
        version=version,
        replica_id=req.replica_id,
        max_wait_ms=req.max_wait_ms,
        min_bytes=req.min_bytes,
        max_bytes=req.max_bytes,
        isolation_level=req.isolation_level,
        session_id=req.session_id if version >= 7 else 0,
        session_epoch=req.session_epoch if version >= 7 else -1,
        partitions=partitions,
        forgotten=forgotten,
        rack_id=req.rack_id if version >= 11 else "",
    )


@st.composite
def fetch_requests(draw: st.DrawFn) -> FetchRequestData:
    def partition_fetch() -> st.SearchStrategy[PartitionFetch]:
        return st.builds(
            lambda t, *rest: PartitionFetch(t[1], t[0], *rest),
            st.sampled_from(TOPICS),
            st.integers(0, 2**31 - 1),
            INT64,
            INT64,
            INT32,
            INT32,
            INT32,
        )

    forgotten = st.builds(
        lambda t, p: TopicIdPartition(t[1], t[0], p), st.sampled_from(TOPICS), INT32
    )
    return FetchRequestData(
        version=0,
        replica_id=draw(st.sampled_from([-1, 0, 7])),
        max_wait_ms=draw(st.integers(0, 2**31 - 1)),
        min_bytes=draw(INT32),
        max_bytes=draw(INT32),
        isolation_level=draw(st.integers(0, 1)),
        session_id=draw(INT32),
        session_epoch=draw(INT32),
        partitions=draw(st.lists(partition_fetch(), max_size=8)),
        forgotten=draw(st.lists(forgotten, max_size=4)),
        rack_id=draw(st.text(max_size=8)),
    )


@settings(max_examples=200, deadline=None)
@given(req=fetch_requests(), version=st.sampled_from(VERSIONS))
def test_fetch_request_matches_kio_both_ways(req: FetchRequestData, version: int) -> None:
    expected = as_sent(req, version)
    kio_bytes = kio_request_bytes(expected, version)
    assert decode_fetch_request(kio_bytes, 0, version) == expected
    assert encode_fetch_request(req, version) == kio_bytes


@settings(max_examples=100, deadline=None)
@given(req=fetch_requests(), version=st.sampled_from(VERSIONS), prefix=st.binary(max_size=9))
def test_fetch_request_round_trips_at_an_offset_in_a_memoryview(
    req: FetchRequestData, version: int, prefix: bytes
) -> None:
    frame = memoryview(prefix + encode_fetch_request(req, version))
    assert decode_fetch_request(frame, len(prefix), version) == as_sent(req, version)


def kafka_python_request(version: int) -> KpFetchRequest:
    partition = KpFetchRequest.FetchTopic.FetchPartition
    return KpFetchRequest(
        replica_id=-1,
        replica_state=KpFetchRequest.ReplicaState(replica_id=-1, replica_epoch=-1),
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=42,
        session_epoch=3,
        topics=[
            KpFetchRequest.FetchTopic(
                topic="alpha",
                topic_id=uuid.UUID(int=1),
                partitions=[
                    partition(
                        partition=p,
                        current_leader_epoch=5,
                        fetch_offset=100 + p,
                        last_fetched_epoch=4,
                        log_start_offset=-1,
                        partition_max_bytes=1048576,
                    )
                    for p in range(3)
                ],
            )
        ],
        forgotten_topics_data=[
            KpFetchRequest.ForgottenTopic(
                topic="beta", topic_id=uuid.UUID(int=2), partitions=[0, 9]
            )
        ],
        rack_id="rack-a",
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_fetch_request_written_by_kafka_python_decodes(version: int) -> None:
    req = decode_fetch_request(kafka_python_request(version).encode(version=version), 0, version)
    assert (req.max_wait_ms, req.min_bytes, req.max_bytes) == (500, 1, 52428800)
    assert req.isolation_level == 1
    assert (req.session_id, req.session_epoch) == ((42, 3) if version >= 7 else (0, -1))
    assert [p.fetch_offset for p in req.partitions] == [100, 101, 102]
    first = req.partitions[0]
    assert first.topic == ("" if version >= 13 else "alpha")
    assert first.topic_id == (uuid.UUID(int=1) if version >= 13 else ZERO_UUID)
    assert first.current_leader_epoch == (5 if version >= 9 else -1)
    assert first.last_fetched_epoch == (4 if version >= 12 else -1)
    assert first.partition_max_bytes == 1048576
    forgotten_topic = ("", uuid.UUID(int=2)) if version >= 13 else ("beta", ZERO_UUID)
    assert [(k.topic, k.topic_id, k.partition) for k in req.forgotten] == (
        [(*forgotten_topic, 0), (*forgotten_topic, 9)] if version >= 7 else []
    )
    assert req.rack_id == ("rack-a" if version >= 11 else "")
    assert req.replica_id == -1


def test_replica_id_comes_from_the_replica_state_tag_from_v15() -> None:
    follower = FetchRequestData(version=15, replica_id=3)
    encoded = encode_fetch_request(follower, 15)
    assert decode_fetch_request(encoded, 0, 15).replica_id == 3
    assert (
        decode_fetch_request(encode_fetch_request(FetchRequestData(15), 15), 0, 15).replica_id == -1
    )


def test_unknown_tags_are_skipped_at_every_level_of_a_flexible_request() -> None:
    req = FetchRequestData(
        version=12,
        partitions=[PartitionFetch(ZERO_UUID, "alpha", p, 10 * p, -1, 100) for p in range(3)],
    )
    plain = encode_fetch_request(req, 12)
    tag = b"\x01\x09\x02zz"  # one unknown tag (9) of two bytes
    topic_start = plain.index(b"\x06alpha")
    partition_size = 4 + 4 + 8 + 4 + 8 + 4
    first_partition = topic_start + 6 + 1
    second_tags = first_partition + partition_size + 1 + partition_size
    topic_tags = first_partition + 3 * (partition_size + 1)
    assert plain[second_tags] == 0 and plain[topic_tags] == 0 and plain[-1] == 0
    patched = (
        plain[:second_tags]
        + tag
        + plain[second_tags + 1 : topic_tags]
        + tag
        + plain[topic_tags + 1 : -1]
        + b"\x02\x00\x02\x01x\x0c\x00"  # cluster_id "x" (tag 0) and an empty tag 12
    )
    assert decode_fetch_request(patched, 0, 12) == as_sent(req, 12)


def test_truncated_fetch_request_is_invalid() -> None:
    req = FetchRequestData(12, partitions=[PartitionFetch(ZERO_UUID, "t", 0, 0)])
    encoded = encode_fetch_request(req, 12)
    for cut in (5, len(encoded) - 9, len(encoded) - 1):
        with pytest.raises(InvalidRequestError):
            decode_fetch_request(encoded[:cut], 0, 12)


def test_unsupported_fetch_version_is_refused() -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_fetch_request(b"", 0, 17)
    with pytest.raises(UnsupportedVersionError):
        encode_fetch_response(FetchResponseData(), 3)


# --- responses ----------------------------------------------------------------


def materialise(records: FileSlice | bytes | None) -> bytes:
    if records is None:
        return b""  # sent as an empty record set, as Kafka does
    return records.read() if isinstance(records, FileSlice) else records


def kio_response_bytes(resp: FetchResponseData, version: int) -> bytes:
    topics = [
        {
            "topic": g[0].topic,
            "topic_id": g[0].topic_id,
            "partitions": [
                {
                    "partition_index": p.partition,
                    "error_code": p.error_code,
                    "high_watermark": p.high_watermark,
                    "last_stable_offset": p.last_stable_offset,
                    "log_start_offset": p.log_start_offset,
                    "aborted_transactions": None
                    if p.aborted_transactions is None
                    else [dataclasses.asdict(a) for a in p.aborted_transactions],
                    "preferred_read_replica": p.preferred_read_replica,
                    "records": materialise(p.records),
                    **(
                        {
                            "diverging_epoch": {
                                "epoch": p.diverging_epoch,
                                "end_offset": p.diverging_end_offset,
                            }
                        }
                        if p.diverging_epoch >= 0
                        else {}
                    ),
                }
                for p in g
            ],
        }
        for g in grouped(resp.partitions, version)
    ]
    data = {
        "throttle_time": resp.throttle_time_ms,
        "error_code": resp.error_code,
        "session_id": resp.session_id,
        "responses": topics,
    }
    return kio_encode_response(build_response(ApiKey.FETCH, version, data))


records_strategy = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.builds(
        lambda position, size: FileSlice(SEGMENT, position, size),  # type: ignore[arg-type]
        st.integers(0, 2048),
        st.integers(0, 2048),
    ),
)

partition_data = st.builds(
    lambda t, *rest: PartitionData(t[1], t[0], *rest),
    st.sampled_from(TOPICS),
    st.integers(0, 2**31 - 1),
    st.sampled_from([0, 1, 3, 6]),
    INT64,
    INT64,
    INT64,
    records_strategy,
    st.none() | st.lists(st.builds(AbortedTransaction, INT64, INT64), max_size=3),
    INT32,
    st.sampled_from([-1, -1, 0, 7]),  # diverging epoch (v12+ tagged field)
    st.integers(0, 2**40),
)

fetch_responses = st.builds(
    FetchResponseData,
    st.sampled_from([0, 70, 71]),  # kio only writes error codes it knows
    INT32,
    st.integers(0, 2**31 - 1),
    st.lists(partition_data, max_size=8),
)


@settings(max_examples=200, deadline=None)
@given(resp=fetch_responses, version=st.sampled_from(VERSIONS))
def test_fetch_response_is_byte_identical_to_kio(resp: FetchResponseData, version: int) -> None:
    body = encode_fetch_response(resp, version)
    expected = kio_response_bytes(resp, version)
    materialised = body.to_bytes()
    assert materialised == expected
    assert body.size == len(expected)


def as_received(resp: FetchResponseData, version: int) -> FetchResponseData:
    partitions = [
        PartitionData(
            topic_id=p.topic_id if version >= 13 else ZERO_UUID,
            topic="" if version >= 13 else p.topic,
            partition=p.partition,
            error_code=p.error_code,
            high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=p.log_start_offset if version >= 5 else -1,
            records=materialise(p.records),
            aborted_transactions=p.aborted_transactions,
            preferred_read_replica=p.preferred_read_replica if version >= 11 else -1,
            diverging_epoch=p.diverging_epoch if version >= 12 else -1,
            diverging_end_offset=(
                p.diverging_end_offset if version >= 12 and p.diverging_epoch >= 0 else -1
            ),
        )
        for p in resp.partitions
    ]
    return FetchResponseData(
        error_code=resp.error_code if version >= 7 else 0,
        session_id=resp.session_id if version >= 7 else 0,
        throttle_time_ms=resp.throttle_time_ms,
        partitions=partitions,
    )


@settings(max_examples=100, deadline=None)
@given(resp=fetch_responses, version=st.sampled_from(VERSIONS))
def test_fetch_response_round_trips_through_the_client_decoder(
    resp: FetchResponseData, version: int
) -> None:
    body = encode_fetch_response(resp, version).to_bytes()
    assert decode_fetch_response(b"head" + body, 4, version) == as_received(resp, version)


class UnreadableFile:
    """A segment file that fails if anyone reads it: the encoder must not."""

    def fileno(self) -> int:
        raise AssertionError("the encoder read a file slice")


def test_file_slices_pass_through_unread_between_coalesced_bytes() -> None:
    file: Any = UnreadableFile()
    first, second = FileSlice(file, 0, 100), FileSlice(file, 500, 7)
    resp = FetchResponseData(
        partitions=[
            PartitionData(ZERO_UUID, "a", 0, records=first),
            PartitionData(ZERO_UUID, "a", 1),
            PartitionData(ZERO_UUID, "a", 2, records=b"small"),
            PartitionData(ZERO_UUID, "b", 0, records=second),
        ]
    )
    body = encode_fetch_response(resp, 12)
    kinds = [type(p) for p in body.parts]
    assert kinds == [bytes, FileSlice, bytes, FileSlice, bytes]
    assert body.parts[1] is first and body.parts[3] is second
    assert body.size == sum(p.size if isinstance(p, FileSlice) else len(p) for p in body.parts)


def test_response_without_record_data_is_a_single_bytes_part() -> None:
    resp = FetchResponseData(partitions=[PartitionData(ZERO_UUID, "t", i) for i in range(1000)])
    body = encode_fetch_response(resp, 12)
    assert len(body.parts) == 1


def test_a_topic_that_reappears_later_gets_its_own_entry() -> None:
    resp = FetchResponseData(
        partitions=[
            PartitionData(ZERO_UUID, "a", 0),
            PartitionData(ZERO_UUID, "b", 0),
            PartitionData(ZERO_UUID, "a", 1),
        ]
    )
    decoded = KpFetchResponse.decode(encode_fetch_response(resp, 11).to_bytes(), version=11)
    assert [t.topic for t in decoded.responses] == ["a", "b", "a"]


@pytest.mark.parametrize("version", VERSIONS)
def test_partition_without_records_is_sent_as_empty_not_null(version: int) -> None:
    resp = FetchResponseData(partitions=[PartitionData(ZERO_UUID, "t", 0, records=None)])
    decoded = decode_fetch_response(encode_fetch_response(resp, version).to_bytes(), 0, version)
    assert decoded.partitions[0].records == b""


@pytest.mark.parametrize("version", VERSIONS)
def test_kafka_python_reads_our_fetch_response(version: int) -> None:
    topic_id = uuid.UUID(int=9)
    resp = FetchResponseData(
        error_code=0,
        session_id=77,
        partitions=[
            PartitionData(topic_id, "t", 0, 0, 10, 10, 2, b"batch", [AbortedTransaction(5, 6)]),
            PartitionData(topic_id, "t", 1, 1, -1, -1, -1, None, None),
        ],
    )
    decoded = KpFetchResponse.decode(
        encode_fetch_response(resp, version).to_bytes(), version=version
    )
    (topic,) = decoded.responses
    if version >= 13:
        assert topic.topic_id == topic_id
    else:
        assert topic.topic == "t"
    first, second = topic.partitions
    assert bytes(first.records) == b"batch"
    assert [(a.producer_id, a.first_offset) for a in first.aborted_transactions] == [(5, 6)]
    assert (second.error_code, bytes(second.records)) == (1, b"")
    assert second.aborted_transactions is None
    assert decoded.session_id == (77 if version >= 7 else 0)


@pytest.mark.parametrize("version", [4, 5, 6])
def test_request_cut_at_a_partition_boundary_is_invalid_not_shorter(version: int) -> None:
    req = FetchRequestData(
        version, partitions=[PartitionFetch(ZERO_UUID, "t", p, 0) for p in range(3)]
    )
    encoded = encode_fetch_request(req, version)
    partition_size = 16 if version == 4 else 24
    with pytest.raises(InvalidRequestError):
        decode_fetch_request(encoded[:-partition_size], 0, version)


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16])
def test_large_requests_and_responses_come_out_the_same_in_steps(version: int) -> None:
    """The sliced codec (a broker's 100,000-partition fetches) changes no byte."""
    count = 2 * CODEC_STEP + 7
    tid = uuid.uuid4()
    topic = "" if version >= 13 else "big"
    req = FetchRequestData(
        version=version,
        session_id=0,
        session_epoch=0,
        partitions=[PartitionFetch(tid if version >= 13 else ZERO_UUID, topic, p, p * 3, 0, 1000)
                    for p in range(count)],
    )  # fmt: skip
    raw = encode_fetch_request(req, version)
    decoded, yields = count_steps(decode_fetch_request_steps(raw, 0, version))
    assert yields >= 2
    assert decoded == decode_fetch_request(raw, 0, version)
    assert [p.fetch_offset for p in decoded.partitions] == [p * 3 for p in range(count)]
    resp = FetchResponseData(
        session_id=7,
        partitions=[PartitionData(tid, "big", p, high_watermark=p, records=b"x" * (p % 3))
                    for p in range(count)],
    )  # fmt: skip
    whole = encode_fetch_response(resp, version)
    sliced, yields = count_steps(encode_fetch_response_steps(resp, version))
    assert yields >= 2
    assert sliced.size == whole.size and sliced.parts == whole.parts
