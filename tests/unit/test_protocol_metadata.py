"""The hand-written Metadata encoder is byte-identical to kio's for every version."""

from __future__ import annotations

import uuid

import pytest

from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build_response, encode_response
from headwater.protocol.metadata_codec import (
    MetadataBroker,
    MetadataPartition,
    MetadataTopic,
    encode_metadata_response,
)


def _led_by(leader: int, count: int) -> tuple[MetadataPartition, ...]:
    """``count`` partitions whose only replica, in sync, is ``leader``."""
    return tuple(MetadataPartition(i, leader, 0, (leader,), (leader,)) for i in range(count))


TOPICS = [
    MetadataTopic(0, "orders", uuid.UUID(int=7), False, _led_by(0, 3)),
    MetadataTopic(0, "__consumer_offsets", uuid.UUID(int=9), True, _led_by(0, 1)),
    MetadataTopic(3, "missing", uuid.UUID(int=0), False),
]


def _kio_bytes(version: int, topics: list[MetadataTopic]) -> bytes:
    data = {
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "c1",
        "controller_id": 0,
        "error_code": 0,
        "topics": [
            {
                "error_code": t.error_code,
                "name": t.name,
                "topic_id": t.topic_id,
                "is_internal": t.is_internal,
                "topic_authorized_operations": -(2**31),
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": p.index,
                        "leader_id": p.leader,
                        "leader_epoch": 0,
                        "replica_nodes": [p.leader],
                        "isr_nodes": [p.leader],
                        "offline_replicas": [],
                    }
                    for p in t.partitions or ()
                ],
            }
            for t in topics
        ],
    }
    return encode_response(build_response(ApiKey.METADATA, version, data))


@pytest.mark.parametrize("version", range(14))
def test_metadata_encoding_matches_kio(version: int) -> None:
    ours = encode_metadata_response(
        version,
        [MetadataBroker(0, "127.0.0.1", 9092)],
        TOPICS,
        cluster_id="c1",
        controller_id=0,
    )
    assert ours == _kio_bytes(version, TOPICS)


def test_unknown_topic_id_has_a_null_name_from_v12() -> None:
    topic = [MetadataTopic(100, None, uuid.UUID(int=5), False)]
    broker = [MetadataBroker(0, "127.0.0.1", 9092)]
    ours = encode_metadata_response(12, broker, topic, cluster_id="c1", controller_id=0)
    assert ours == _kio_bytes(12, topic)


def test_partition_arrays_are_encoded_once_per_entry_and_version() -> None:
    entry = MetadataTopic(0, "huge", uuid.UUID(int=1), False, _led_by(0, 100_000), encoded={})
    first = encode_metadata_response(12, [], [entry], cluster_id="c", controller_id=0)
    assert entry.encoded is not None
    cached = entry.encoded[12]
    again = encode_metadata_response(12, [], [entry], cluster_id="c", controller_id=0)
    assert again == first and len(first) > 2_000_000
    assert entry.encoded == {12: cached} and entry.encoded[12] is cached, (
        "the 100k-entry array was reused"
    )


CLUSTER_TOPIC = MetadataTopic(
    0,
    "replicated",
    uuid.UUID(int=11),
    partitions=(
        MetadataPartition(0, 2, 4, (2, 0, 1), (2, 0)),
        MetadataPartition(1, -1, 7, (0, 1, 2), (), offline=(0, 1, 2), error_code=5),
        MetadataPartition(2, 1, 0, (1, 2, 0), (1, 2, 0)),
    ),
)


@pytest.mark.parametrize("version", range(14))
def test_cluster_partitions_spelled_out_match_kio(version: int) -> None:
    ours = encode_metadata_response(
        version,
        [MetadataBroker(0, "127.0.0.1", 9092)],
        [CLUSTER_TOPIC],
        cluster_id="c1",
        controller_id=0,
    )
    assert CLUSTER_TOPIC.partitions is not None
    data = {
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "c1",
        "controller_id": 0,
        "error_code": 0,
        "topics": [
            {
                "error_code": 0,
                "name": "replicated",
                "topic_id": CLUSTER_TOPIC.topic_id,
                "is_internal": False,
                "topic_authorized_operations": -(2**31),
                "partitions": [
                    {
                        "error_code": p.error_code,
                        "partition_index": p.index,
                        "leader_id": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replica_nodes": list(p.replicas),
                        "isr_nodes": list(p.isr),
                        "offline_replicas": list(p.offline),
                    }
                    for p in CLUSTER_TOPIC.partitions
                ],
            }
        ],
    }
    assert ours == encode_response(build_response(ApiKey.METADATA, version, data))
