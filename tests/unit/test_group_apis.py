"""Group API handlers: kio requests of every version in, encodable responses out."""

from __future__ import annotations

import io
import itertools
import struct
from typing import Any

import pytest
from kio.schema.consumer_protocol_assignment.v0 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from headwater.coordinator.state_log import InMemoryStateLog
from headwater.group.apis import SUPPORTED_VERSIONS, GroupApis
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import (
    build_request,
    build_response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

NODE = {"node_id": 1, "host": "broker.local", "port": 9092}
SESSION_MS = 10_000


def make_apis() -> GroupApis:
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        InMemoryStateLog(),
        lambda topic, partition: topic == "orders" and partition < 2,
        now_ms=0,
        config=GroupConfig(initial_rebalance_delay_ms=0),
        member_id_factory=lambda prefix: f"{prefix}-{next(counter)}",
    )
    return GroupApis(coordinator, **NODE)


def request(api_key: int, version: int, **data: Any) -> object:
    """A request as the broker would hand it over: encoded, then decoded by kio."""
    built = build_request(api_key, version, data)
    return decode_request(api_key, version, encode_request(built))


def answer(
    handlers: GroupApis, api_key: int, version: int, now_ms: int = 0, **data: Any
) -> dict[str, Any]:
    """Handle a request and check the response survives the trip to bytes and back."""
    pending = handlers.handle(
        request(api_key, version, **data),
        now_ms=now_ms,
        timestamp_ms=1_700_000_000_000,
        client_id="app",
        client_host="/10.0.0.1",
    )
    assert pending.done
    response = pending.result()
    decode_response(api_key, version, encode_response(build_response(api_key, version, response)))
    return response


def assignment_bytes(*partitions: int) -> bytes:
    buffer = io.BytesIO()
    entity_writer(ConsumerProtocolAssignment)(
        buffer,
        ConsumerProtocolAssignment(
            assigned_partitions=(TopicPartition(topic="orders", partitions=partitions),),
            user_data=None,
        ),
    )
    return struct.pack(">h", 0) + buffer.getvalue()


def join_data(member_id: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "group_id": "g",
        "session_timeout": SESSION_MS,
        "rebalance_timeout": 30_000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x06orders"}],
        **extra,
    }


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_names_this_broker(version: int) -> None:
    response = answer(make_apis(), ApiKey.FIND_COORDINATOR, version, key="g", key_type=0)
    assert response["error_code"] is ErrorCode.none
    assert (response["node_id"], response["host"], response["port"]) == (1, "broker.local", 9092)


@pytest.mark.parametrize("version", range(4, 7))
def test_find_coordinator_batched_keys(version: int) -> None:
    response = answer(
        make_apis(), ApiKey.FIND_COORDINATOR, version, key_type=0, coordinator_keys=["a", "b"]
    )
    assert [(c["key"], c["node_id"], c["error_code"]) for c in response["coordinators"]] == [
        ("a", 1, ErrorCode.none),
        ("b", 1, ErrorCode.none),
    ]


def test_find_coordinator_rejects_unknown_key_types() -> None:
    response = answer(make_apis(), ApiKey.FIND_COORDINATOR, 3, key="g", key_type=5)
    assert response["error_code"] is ErrorCode.invalid_request


def test_join_sync_heartbeat_leave_at_the_versions_librdkafka_sends() -> None:
    handlers = make_apis()
    first = answer(handlers, ApiKey.JOIN_GROUP, 5, **join_data())
    assert first["error_code"] is ErrorCode.member_id_required
    member_id = first["member_id"]
    assert member_id.startswith("app-")
    joined = answer(handlers, ApiKey.JOIN_GROUP, 5, **join_data(member_id))
    assert joined["error_code"] is ErrorCode.none
    assert joined["leader"] == member_id
    assert joined["protocol_name"] == "range"
    assert [m["member_id"] for m in joined["members"]] == [member_id]

    synced = answer(
        handlers,
        ApiKey.SYNC_GROUP,
        3,
        group_id="g",
        generation_id=joined["generation_id"],
        member_id=member_id,
        assignments=[{"member_id": member_id, "assignment": assignment_bytes(0, 1)}],
    )
    assert synced["error_code"] is ErrorCode.none
    assert synced["assignment"] == assignment_bytes(0, 1)

    beat = answer(
        handlers,
        ApiKey.HEARTBEAT,
        3,
        group_id="g",
        generation_id=joined["generation_id"],
        member_id=member_id,
    )
    assert beat["error_code"] is ErrorCode.none

    described = answer(handlers, ApiKey.DESCRIBE_GROUPS, 5, groups=["g"])["groups"][0]
    assert described["group_state"] == "Stable"
    assert described["members"][0]["client_id"] == "app"
    assert described["members"][0]["client_host"] == "/10.0.0.1"
    assert described["members"][0]["member_assignment"] == assignment_bytes(0, 1)

    left = answer(handlers, ApiKey.LEAVE_GROUP, 1, group_id="g", member_id=member_id)
    assert left["error_code"] is ErrorCode.none
    again = answer(handlers, ApiKey.LEAVE_GROUP, 0, group_id="g", member_id=member_id)
    assert again["error_code"] is ErrorCode.unknown_member_id


def test_join_group_v0_needs_no_member_id_round_trip() -> None:
    joined = answer(make_apis(), ApiKey.JOIN_GROUP, 0, **join_data())
    assert joined["error_code"] is ErrorCode.none
    assert joined["generation_id"] == 1


def test_delayed_join_response_is_completed_later() -> None:
    handlers = make_apis()
    a = answer(handlers, ApiKey.JOIN_GROUP, 1, **join_data())
    repeated = handlers.handle(
        request(ApiKey.JOIN_GROUP, 7, **join_data(a["member_id"])), now_ms=0, timestamp_ms=0
    )
    assert repeated.result()["generation_id"] == 1  # nothing changed: same answer at once
    b = handlers.handle(request(ApiKey.JOIN_GROUP, 1, **join_data()), now_ms=0, timestamp_ms=0)
    assert not b.done  # a new member: the group must rejoin
    answer(handlers, ApiKey.JOIN_GROUP, 1, **join_data(a["member_id"]))
    assert b.done
    assert b.result()["generation_id"] == 2


def test_leave_group_v3_batches_members() -> None:
    handlers = make_apis()
    joined = answer(handlers, ApiKey.JOIN_GROUP, 5, **join_data(group_instance_id="inst"))
    left = answer(
        handlers,
        ApiKey.LEAVE_GROUP,
        5,
        group_id="g",
        members=[
            {"member_id": "", "group_instance_id": "inst"},
            {"member_id": "stranger", "group_instance_id": None},
        ],
    )
    assert left["error_code"] is ErrorCode.none
    assert [m["error_code"] for m in left["members"]] == [
        ErrorCode.none,
        ErrorCode.unknown_member_id,
    ]
    assert joined["error_code"] is ErrorCode.none


def test_offset_commit_and_fetch_round_trip_across_versions() -> None:
    handlers = make_apis()
    committed = answer(
        handlers,
        ApiKey.OFFSET_COMMIT,
        8,
        group_id="solo",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            {
                "name": "orders",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 42,
                        "committed_leader_epoch": 3,
                        "committed_metadata": "meta",
                    },
                    {"partition_index": 7, "committed_offset": 1, "committed_metadata": None},
                ],
            }
        ],
    )
    assert [p["error_code"] for p in committed["topics"][0]["partitions"]] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
    ]

    v1 = answer(
        handlers,
        ApiKey.OFFSET_FETCH,
        1,
        group_id="solo",
        topics=[{"name": "orders", "partition_indexes": [0, 1]}],
    )
    assert [(p["committed_offset"], p["metadata"]) for p in v1["topics"][0]["partitions"]] == [
        (42, "meta"),
        (-1, ""),
    ]
    all_of_them = answer(handlers, ApiKey.OFFSET_FETCH, 7, group_id="solo", topics=None)
    partition = all_of_them["topics"][0]["partitions"][0]
    assert (partition["committed_offset"], partition["committed_leader_epoch"]) == (42, 3)

    batched = answer(
        handlers,
        ApiKey.OFFSET_FETCH,
        8,
        groups=[{"group_id": "solo", "topics": None}, {"group_id": "other", "topics": None}],
    )
    assert [g["group_id"] for g in batched["groups"]] == ["solo", "other"]
    assert batched["groups"][1]["topics"] == []


def test_list_delete_and_offset_delete_groups() -> None:
    handlers = make_apis()
    commit = {
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                ],
            }
        ],
    }
    answer(handlers, ApiKey.OFFSET_COMMIT, 2, group_id="a", **commit)
    answer(handlers, ApiKey.OFFSET_COMMIT, 2, group_id="b", **commit)
    answer(handlers, ApiKey.JOIN_GROUP, 0, **join_data())
    listed = answer(handlers, ApiKey.LIST_GROUPS, 4, states_filter=["Empty"])
    assert sorted(g["group_id"] for g in listed["groups"]) == ["a", "b"]
    assert len(answer(handlers, ApiKey.LIST_GROUPS, 0)["groups"]) == 3

    deleted = answer(handlers, ApiKey.DELETE_GROUPS, 2, groups_names=["a", "g", "zzz"])
    assert [r["error_code"] for r in deleted["results"]] == [
        ErrorCode.none,
        ErrorCode.non_empty_group,
        ErrorCode.group_id_not_found,
    ]

    offset_deleted = answer(
        handlers,
        ApiKey.OFFSET_DELETE,
        0,
        group_id="b",
        topics=[{"name": "orders", "partitions": [{"partition_index": 0}]}],
    )
    assert offset_deleted["error_code"] is ErrorCode.none
    assert offset_deleted["topics"][0]["partitions"][0]["error_code"] is ErrorCode.none
    assert answer(handlers, ApiKey.OFFSET_FETCH, 3, group_id="b", topics=None)["topics"] == []


def test_describe_unknown_group_is_dead() -> None:
    described = answer(make_apis(), ApiKey.DESCRIBE_GROUPS, 3, groups=["nope"])["groups"][0]
    assert described["group_state"] == "Dead"
    assert described["error_code"] is ErrorCode.none


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(key, v) for key, (low, high) in SUPPORTED_VERSIONS.items() for v in range(low, high + 1)],
)
def test_every_supported_version_answers_with_an_encodable_response(
    api_key: int, version: int
) -> None:
    """Run an error path of each API and version through kio's encoder and decoder."""
    data: dict[str, Any] = {
        ApiKey.OFFSET_COMMIT: {"group_id": "g", "generation_id_or_member_epoch": 5, "topics": []},
        ApiKey.OFFSET_FETCH: {"group_id": "g", "groups": [{"group_id": "g"}]},
        ApiKey.FIND_COORDINATOR: {"key": "g", "coordinator_keys": ["g"]},
        ApiKey.JOIN_GROUP: join_data("ghost"),
        ApiKey.HEARTBEAT: {"group_id": "g", "generation_id": 1, "member_id": "ghost"},
        ApiKey.LEAVE_GROUP: {"group_id": "g", "member_id": "x", "members": [{"member_id": "x"}]},
        ApiKey.SYNC_GROUP: {"group_id": "g", "generation_id": 1, "member_id": "ghost"},
        ApiKey.DESCRIBE_GROUPS: {"groups": ["g"]},
        ApiKey.LIST_GROUPS: {},
        ApiKey.DELETE_GROUPS: {"groups_names": ["g"]},
        ApiKey.OFFSET_DELETE: {"group_id": "g", "topics": []},
        ApiKey.TXN_OFFSET_COMMIT: {
            "transactional_id": "t",
            "group_id": "g",
            "producer_id": 1,
            "producer_epoch": 0,
            "generation_id": 3,
            "member_id": "ghost",
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0}]}],
        },
        ApiKey.CONSUMER_GROUP_HEARTBEAT: {
            "group_id": "g",
            "member_id": "ghost",
            "member_epoch": 3,
            "topic_partitions": None,
        },
        ApiKey.CONSUMER_GROUP_DESCRIBE: {"group_ids": ["g"], "include_authorized_operations": True},
    }[api_key]
    response = answer(make_apis(), api_key, version, **data)
    assert response  # and the round trip inside answer() succeeded
