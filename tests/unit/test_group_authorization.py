"""Kafka's ACL check points for the group APIs, without a coordinator or sockets."""

from __future__ import annotations

from typing import Any

from headwater.broker.connection import RequestContext
from headwater.broker.connection_security import ConnectionSecurity
from headwater.broker.handlers.group_authorization import authorize_group_request
from headwater.protocol.apis import ApiKey
from headwater.protocol.header import RequestHeader
from headwater.protocol.messages import build_request
from headwater.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from headwater.security.acl_store import InMemoryAclStore
from headwater.security.authorizer import AclAuthorizer
from headwater.security.principal import user

Op, RT = AclOperation, ResourceType


def ctx_for(api_key: int, version: int, *grants: tuple[RT, str, Op]) -> RequestContext:
    authorizer = AclAuthorizer(InMemoryAclStore())
    authorizer.create_acls(
        [
            AclBinding(
                ResourcePattern(rt, name),
                AccessControlEntry("User:alice", "*", op, AclPermissionType.ALLOW),
            )
            for rt, name, op in grants
        ]
    )
    security = ConnectionSecurity(principal=user("alice"), authorizer=authorizer)
    return RequestContext(RequestHeader(api_key, version, 1, "c"), "10.0.0.1:5", 1, security)


def req(api_key: int, version: int, body: dict[str, Any]) -> Any:
    return build_request(api_key, version, body)


def test_join_needs_read_on_the_group() -> None:
    join = req(ApiKey.JOIN_GROUP, 5, {"group_id": "g", "protocol_type": "consumer"})
    denied = authorize_group_request(ctx_for(ApiKey.JOIN_GROUP, 5), join)
    assert denied.response == {"error_code": 30}
    allowed = authorize_group_request(ctx_for(ApiKey.JOIN_GROUP, 5, (RT.GROUP, "g", Op.READ)), join)
    assert allowed.response is None and allowed.request is join


def test_offset_commit_splits_unauthorized_topics_out() -> None:
    commit = req(ApiKey.OFFSET_COMMIT, 8, {"group_id": "g", "topics": [
        {"name": "ok", "partitions": [{"partition_index": 0, "committed_offset": 5}]},
        {"name": "secret", "partitions": [{"partition_index": 1, "committed_offset": 7}]},
    ]})  # fmt: skip
    ctx = ctx_for(ApiKey.OFFSET_COMMIT, 8, (RT.GROUP, "g", Op.READ), (RT.TOPIC, "ok", Op.READ))
    decision = authorize_group_request(ctx, commit)
    assert decision.response is None
    assert [t.name for t in decision.request.topics] == ["ok"]
    coordinator_answer = {"topics": [{"name": "ok", "partitions": [
        {"partition_index": 0, "error_code": 0}]}]}  # fmt: skip
    final = decision.finish(coordinator_answer)
    assert final["topics"][1] == {
        "name": "secret", "partitions": [{"partition_index": 1, "error_code": 29}]
    }  # fmt: skip
    group_denied = authorize_group_request(ctx_for(ApiKey.OFFSET_COMMIT, 8), commit)
    assert group_denied.response is not None
    codes = [p["error_code"] for t in group_denied.response["topics"] for p in t["partitions"]]
    assert codes == [30, 30]


def test_offset_fetch_hides_and_errors_topics_without_describe() -> None:
    fetch = req(ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": None})
    ctx = ctx_for(ApiKey.OFFSET_FETCH, 7, (RT.GROUP, "g", Op.DESCRIBE), (RT.TOPIC, "a", Op.READ))
    decision = authorize_group_request(ctx, fetch)
    answer = {"topics": [{"name": n, "partitions": []} for n in "ab"], "error_code": 0}
    out = decision.finish(answer)
    assert [t["name"] for t in out["topics"]] == ["a"]
    denied = authorize_group_request(ctx_for(ApiKey.OFFSET_FETCH, 7), fetch)
    assert denied.response == {"error_code": 30, "topics": []}


def test_describe_list_and_delete_groups_per_group() -> None:
    grants = ((RT.GROUP, "mine", Op.DESCRIBE), (RT.GROUP, "mine", Op.DELETE))
    describe = req(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["mine", "theirs"]})
    d = authorize_group_request(ctx_for(ApiKey.DESCRIBE_GROUPS, 5, *grants), describe)
    assert list(d.request.groups) == ["mine"]
    out = d.finish({"groups": [{"group_id": "mine", "error_code": 0}]})
    assert [(g["group_id"], g["error_code"]) for g in out["groups"]] == [
        ("mine", 0),
        ("theirs", 30),
    ]

    listing = req(ApiKey.LIST_GROUPS, 4, {})
    lst = authorize_group_request(ctx_for(ApiKey.LIST_GROUPS, 4, *grants), listing)
    out = lst.finish({"groups": [{"group_id": "mine"}, {"group_id": "theirs"}]})
    assert [g["group_id"] for g in out["groups"]] == ["mine"]
    cluster = ctx_for(ApiKey.LIST_GROUPS, 4, (RT.CLUSTER, "kafka-cluster", Op.DESCRIBE))
    assert authorize_group_request(cluster, listing).finish({"groups": [1, 2]}) == {
        "groups": [1, 2]
    }

    delete = req(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["theirs", "mine"]})
    dd = authorize_group_request(ctx_for(ApiKey.DELETE_GROUPS, 2, *grants), delete)
    assert list(dd.request.groups_names) == ["mine"]
    out = dd.finish({"results": [{"group_id": "mine", "error_code": 0}]})
    assert out["results"] == [{"group_id": "theirs", "error_code": 30},
                              {"group_id": "mine", "error_code": 0}]  # fmt: skip


def test_find_coordinator_needs_describe_per_key() -> None:
    v3 = req(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
    denied = authorize_group_request(ctx_for(ApiKey.FIND_COORDINATOR, 3), v3)
    assert denied.response is not None and denied.response["error_code"] == 30
    v4 = req(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g", "h"]})
    ctx = ctx_for(ApiKey.FIND_COORDINATOR, 4, (RT.GROUP, "g", Op.DESCRIBE))
    d = authorize_group_request(ctx, v4)
    out = d.finish({"coordinators": [{"key": "g", "node_id": 0, "error_code": 0},
                                     {"key": "h", "node_id": 0, "error_code": 0}]})  # fmt: skip
    assert [(c["key"], c["error_code"]) for c in out["coordinators"]] == [("g", 0), ("h", 30)]


def test_acls_off_changes_nothing() -> None:
    join = req(ApiKey.JOIN_GROUP, 5, {"group_id": "g", "protocol_type": "consumer"})
    ctx = RequestContext(RequestHeader(ApiKey.JOIN_GROUP, 5, 1, "c"), "h:1", 1)
    d = authorize_group_request(ctx, join)
    assert d.response is None and d.request is join and d.finish({"x": 1}) == {"x": 1}
