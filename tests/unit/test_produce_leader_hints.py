"""Produce v10 (KIP-951): the current leader and its endpoint, as tagged fields.

Checked against kio's generated v10 schema (Kafka's ProduceResponse.json), so
real clients (librdkafka 2.4+, the Java client) read what Headwater writes.
"""

from __future__ import annotations

from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import decode_response
from headwater.protocol.metadata_codec import MetadataBroker
from headwater.protocol.produce_codec import (
    ProducePartitionResponse,
    ProduceResponseData,
    ProduceTopicResponse,
    decode_produce_response,
    encode_produce_response,
)

NOT_LEADER_OR_FOLLOWER = 6


def _response() -> ProduceResponseData:
    return ProduceResponseData(
        topics=[
            ProduceTopicResponse(
                "t",
                [
                    ProducePartitionResponse(0, base_offset=41, log_start_offset=0),
                    ProducePartitionResponse(
                        1, error_code=NOT_LEADER_OR_FOLLOWER, current_leader=(2, 7)
                    ),
                ],
            )
        ],
        throttle_time_ms=3,
        node_endpoints=[MetadataBroker(2, "broker-2.example", 9093, "eu-1a")],
    )


def test_kafka_schema_reads_the_current_leader_and_its_endpoint() -> None:
    body = encode_produce_response(_response(), 10)
    kio = decode_response(ApiKey.PRODUCE, 10, body)
    ok, moved = kio.responses[0].partition_responses
    assert int(ok.base_offset) == 41
    assert int(moved.error_code) == NOT_LEADER_OR_FOLLOWER
    assert (int(moved.current_leader.leader_id), int(moved.current_leader.leader_epoch)) == (2, 7)
    assert int(ok.current_leader.leader_id) == -1  # omitted: the schema's default
    (endpoint,) = kio.node_endpoints
    assert (int(endpoint.node_id), endpoint.host, int(endpoint.port), endpoint.rack) == (
        2,
        "broker-2.example",
        9093,
        "eu-1a",
    )
    assert int(kio.throttle_time.total_seconds() * 1000) == 3


def test_our_decoder_reads_them_back_and_v9_carries_none() -> None:
    back = decode_produce_response(encode_produce_response(_response(), 10), 0, 10)
    assert back.topics[0].partitions[1].current_leader == (2, 7)
    assert back.topics[0].partitions[0].current_leader is None
    assert back.node_endpoints == [MetadataBroker(2, "broker-2.example", 9093, "eu-1a")]
    old = decode_produce_response(encode_produce_response(_response(), 9), 0, 9)
    assert old.topics[0].partitions[1].current_leader is None
    assert old.node_endpoints == []
    assert old.throttle_time_ms == 3
