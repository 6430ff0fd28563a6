"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) on the wire.

Kio request entities in, response dicts out, like ``apis.py`` for the classic
APIs; the rules are in ``consumer_group_coordinator.py``. Versions are those
Kafka 4.x serves: v0-v1 of both. In v1 (KIP-1082) the member id is the
client's own UUID, and SubscribedTopicRegex (RE2) is accepted.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from typing import Any, cast

from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.group.consumer_group_coordinator import (
    GroupView,
    HeartbeatRequest,
    HeartbeatResult,
    MemberView,
    owned_from_wire,
)
from headwater.group.consumer_group_records import Assignment
from headwater.group.shards import CoordinatorShards

Response = dict[str, object]

#: Kafka's bit set of operations on a group when no ACLs are in force (as DescribeGroups).
_ALL_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
_NO_AUTHORIZED_OPERATIONS = -(2**31)


def _ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def heartbeat_request(
    request: object, *, client_id: str, client_host: str, version: int
) -> HeartbeatRequest:
    """A kio ConsumerGroupHeartbeatRequest as the coordinator's value."""
    req = cast(Any, request)
    names: Sequence[str] | None = req.subscribed_topic_names
    owned_wire: Sequence[Any] | None = req.topic_partitions
    return HeartbeatRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=int(req.member_epoch),
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=_ms(req.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None),
        server_assignor=req.server_assignor,
        owned=owned_from_wire(
            None
            if owned_wire is None
            else [(tp.topic_id or uuid.UUID(int=0), tuple(tp.partitions)) for tp in owned_wire]
        ),
        client_id=client_id,
        client_host=client_host,
        version=version,
    )


def heartbeat_response(result: HeartbeatResult) -> Response:
    return {
        "error_code": result.error,
        "error_message": result.error_message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": (
            None
            if result.assignment is None
            else {"topic_partitions": _wire_partitions(result.assignment)}
        ),
    }


def _wire_partitions(assignment: Assignment) -> list[Response]:
    return [
        {"topic_id": topic_id, "partitions": sorted(parts)}
        for topic_id, parts in sorted(assignment.items())
        if parts
    ]


def consumer_group_heartbeat(
    shards: CoordinatorShards,
    request: object,
    *,
    now_ms: int,
    client_id: str,
    client_host: str,
    version: int,
) -> Pending[Response]:
    """Route the heartbeat to its group's shard (NOT_COORDINATOR and friends otherwise)."""
    heartbeat = heartbeat_request(
        request, client_id=client_id, client_host=client_host, version=version
    )
    if not heartbeat.group_id:
        failed = HeartbeatResult(ErrorCode.invalid_request, "GroupId can't be empty.")
        return Pending.completed(heartbeat_response(failed))
    routed = shards.route(heartbeat.group_id)
    if isinstance(routed, ErrorCode):
        return Pending.completed(heartbeat_response(HeartbeatResult(routed)))
    return routed.consumer_groups.heartbeat(now_ms, heartbeat).map(heartbeat_response)


def consumer_group_describe(shards: CoordinatorShards, request: object) -> Response:
    """ConsumerGroupDescribe: each group's epochs, assignor and members with their
    current and target assignments; GROUP_ID_NOT_FOUND for a classic or unknown group."""
    req = cast(Any, request)
    include_operations = bool(req.include_authorized_operations)
    described: list[Response] = []
    for group_id in req.group_ids:
        routed = shards.route(group_id)
        if isinstance(routed, ErrorCode):
            described.append(_described_error(group_id, routed, None))
            continue
        view = routed.consumer_groups.describe(group_id)
        if view is None:
            message = (
                f"Group {group_id} is not a consumer group."
                if routed.group(group_id)
                else (f"Group {group_id} not found.")
            )
            described.append(_described_error(group_id, ErrorCode.group_id_not_found, message))
            continue
        described.append(_described(view, include_operations))
    return {"groups": described}


def _described_error(group_id: str, error: ErrorCode, message: str | None) -> Response:
    return {
        "error_code": error,
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
        "authorized_operations": _NO_AUTHORIZED_OPERATIONS,
    }


def _described(view: GroupView, include_operations: bool) -> Response:
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": view.group_id,
        "group_state": view.state,
        "group_epoch": view.group_epoch,
        "assignment_epoch": view.assignment_epoch,
        "assignor_name": view.assignor_name,
        "members": [_described_member(m) for m in view.members],
        "authorized_operations": (
            _ALL_GROUP_OPERATIONS if include_operations else _NO_AUTHORIZED_OPERATIONS
        ),
    }


def _described_member(member: MemberView) -> Response:
    def assignment(parts: Sequence[tuple[uuid.UUID, str, tuple[int, ...]]]) -> Response:
        return {
            "topic_partitions": [
                {"topic_id": topic_id, "topic_name": name, "partitions": list(indexes)}
                for topic_id, name, indexes in parts
            ]
        }

    return {
        "member_id": member.member_id,
        "instance_id": member.instance_id,
        "rack_id": member.rack_id,
        "member_epoch": member.member_epoch,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topic_names": list(member.subscribed_topic_names),
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "assignment": assignment(member.assignment),
        "target_assignment": assignment(member.target_assignment),
        "member_type": 1,
    }
