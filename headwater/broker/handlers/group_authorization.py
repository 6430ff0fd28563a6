"""Kafka's ACL check points for the group APIs, around the group coordinator.

The coordinator knows nothing of principals. Before it sees a request, the
parts the principal may not touch are answered here (GROUP_AUTHORIZATION_FAILED,
or TOPIC_AUTHORIZATION_FAILED for single topics) and taken out of the
request; after it answers, those errors are merged back in and listings are
filtered. The checks are Kafka's ``KafkaApis``:

============================  =========================================
FindCoordinator (group)       DESCRIBE on the group
JoinGroup, SyncGroup,         READ on the group
Heartbeat, LeaveGroup
OffsetCommit                  READ on the group, READ on each topic
TxnOffsetCommit               WRITE on the transactional id, READ on the
                              group, READ on each topic
OffsetFetch                   DESCRIBE on the group, DESCRIBE on each topic
DescribeGroups                DESCRIBE on each group
ListGroups                    DESCRIBE on the cluster, else only groups
                              with DESCRIBE
DeleteGroups                  DELETE on each group
OffsetDelete                  DELETE on the group, READ on each topic
ConsumerGroupHeartbeat        READ on the group, DESCRIBE on each named
                              topic and on every topic the regex matches
ConsumerGroupDescribe         DESCRIBE on each group
============================  =========================================
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.group.consumer_group_coordinator import compile_regex, topics_matching
from headwater.protocol.apis import ApiKey
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType

Response = dict[str, Any]

GROUP_DENIED = int(E.group_authorization_failed)
TOPIC_DENIED = int(E.topic_authorization_failed)
_GROUP_KEY, _TXN_KEY = 0, 1


@dataclass
class GroupDecision:
    """``response`` answers the request outright; else run ``request`` and ``finish``."""

    request: Any
    response: Response | None = None
    finish: Callable[[Response], Response] = field(default=lambda r: r)


def authorize_group_request(
    ctx: RequestContext, req: Any, topic_names: Callable[[], Iterable[str]] = tuple
) -> GroupDecision:
    """``topic_names`` lists the topics that exist, for regex subscriptions."""
    if not ctx.security.authorizer.enabled:
        return GroupDecision(req)
    api = ctx.header.api_key
    version = ctx.header.api_version

    def group(op: AclOperation, group_id: str) -> bool:
        return ctx.authorize(op, ResourceType.GROUP, group_id)

    if api == ApiKey.FIND_COORDINATOR:
        return _find_coordinator(ctx, req, version)
    if api in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP):
        if group(AclOperation.READ, req.group_id):
            return GroupDecision(req)
        return GroupDecision(req, {"error_code": GROUP_DENIED})
    if api == ApiKey.OFFSET_COMMIT:
        if not group(AclOperation.READ, req.group_id):
            return GroupDecision(req, {"topics": _all_partitions(req.topics, GROUP_DENIED)})
        return _split_topics(ctx, req, AclOperation.READ, "topics")
    if api == ApiKey.TXN_OFFSET_COMMIT:
        if not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
        ):
            code = int(E.transactional_id_authorization_failed)
            return GroupDecision(req, {"topics": _all_partitions(req.topics, code)})
        if not group(AclOperation.READ, req.group_id):
            return GroupDecision(req, {"topics": _all_partitions(req.topics, GROUP_DENIED)})
        return _split_topics(ctx, req, AclOperation.READ, "topics")
    if api == ApiKey.OFFSET_DELETE:
        if not group(AclOperation.DELETE, req.group_id):
            return GroupDecision(req, {"error_code": GROUP_DENIED, "topics": []})
        return _split_topics(ctx, req, AclOperation.READ, "topics")
    if api == ApiKey.OFFSET_FETCH:
        return _offset_fetch(ctx, req, version)
    if api == ApiKey.CONSUMER_GROUP_HEARTBEAT:
        return _consumer_group_heartbeat(ctx, req, topic_names)
    if api == ApiKey.CONSUMER_GROUP_DESCRIBE:
        ids = list(req.group_ids)
        allowed = [g for g in ids if group(AclOperation.DESCRIBE, g)]

        def finish_consumer_describe(resp: Response) -> Response:
            resp["groups"] = list(resp["groups"]) + [
                {"error_code": GROUP_DENIED, "group_id": g, "group_state": "", "members": []}
                for g in ids
                if g not in allowed
            ]
            return resp

        replaced = dataclasses.replace(req, group_ids=tuple(allowed))
        return GroupDecision(replaced, None, finish_consumer_describe)
    if api == ApiKey.DESCRIBE_GROUPS:
        allowed = [g for g in req.groups if group(AclOperation.DESCRIBE, g)]
        denied = [g for g in req.groups if g not in allowed]

        def finish_describe(resp: Response) -> Response:
            resp["groups"] = list(resp["groups"]) + [
                {"error_code": GROUP_DENIED, "group_id": g, "members": []} for g in denied
            ]
            return resp

        return GroupDecision(dataclasses.replace(req, groups=tuple(allowed)), None, finish_describe)
    if api == ApiKey.LIST_GROUPS:
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return GroupDecision(req)

        def finish_list(resp: Response) -> Response:
            resp["groups"] = [
                g for g in resp["groups"] if group(AclOperation.DESCRIBE, g["group_id"])
            ]
            return resp

        return GroupDecision(req, None, finish_list)
    if api == ApiKey.DELETE_GROUPS:
        names = list(req.groups_names)
        allowed = [g for g in names if group(AclOperation.DELETE, g)]

        def finish_delete(resp: Response) -> Response:
            done = {r["group_id"]: r for r in resp["results"]}
            resp["results"] = [
                done.get(g, {"group_id": g, "error_code": GROUP_DENIED}) for g in names
            ]
            return resp

        replaced = dataclasses.replace(req, groups_names=tuple(allowed))
        return GroupDecision(replaced, None, finish_delete)
    return GroupDecision(req)


def _consumer_group_heartbeat(
    ctx: RequestContext, req: Any, topic_names: Callable[[], Iterable[str]]
) -> GroupDecision:
    """READ on the group; DESCRIBE on each named topic and on every existing topic the
    regex matches (a topic created later is checked when the member next subscribes)."""

    def denied(code: int, message: str) -> GroupDecision:
        return GroupDecision(
            req,
            {"error_code": code, "error_message": message, "member_id": None, "member_epoch": -1},
        )

    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return denied(GROUP_DENIED, f"Group {req.group_id} is not authorized.")
    check = ctx.topic_check(AclOperation.DESCRIBE)
    wanted = list(req.subscribed_topic_names or ())
    regex = getattr(req, "subscribed_topic_regex", None)
    if regex:
        with contextlib.suppress(ValueError):  # the coordinator answers INVALID_REGULAR_EXPRESSION
            wanted += sorted(topics_matching(compile_regex(regex), topic_names()))
    refused = sorted({t for t in wanted if not check(t)})
    if refused:
        return denied(TOPIC_DENIED, f"Topics {', '.join(refused)} are not authorized.")
    return GroupDecision(req)


def _all_partitions(topics: Any, code: int) -> list[Response]:
    return [
        {
            "name": t.name,
            "partitions": [{"partition_index": p.partition_index, "error_code": code}
                           for p in t.partitions],
        }
        for t in topics
    ]  # fmt: skip


def _split_topics(ctx: RequestContext, req: Any, op: AclOperation, attr: str) -> GroupDecision:
    """Topics without ``op`` get TOPIC_AUTHORIZATION_FAILED and never reach the coordinator."""
    check = ctx.topic_check(op)
    topics = getattr(req, attr)
    denied = [t for t in topics if not check(t.name)]
    if not denied:
        return GroupDecision(req)
    allowed = tuple(t for t in topics if check(t.name))

    def finish(resp: Response) -> Response:
        resp[attr] = list(resp.get(attr, [])) + _all_partitions(denied, TOPIC_DENIED)
        return resp

    return GroupDecision(dataclasses.replace(req, **{attr: allowed}), None, finish)


def _find_coordinator(ctx: RequestContext, req: Any, version: int) -> GroupDecision:
    def allowed(key_type: int, key: str) -> bool:
        if key_type == _TXN_KEY:
            return ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key)
        return ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key)

    key_type = req.key_type if version >= 1 else _GROUP_KEY
    code = int(E.transactional_id_authorization_failed) if key_type == _TXN_KEY else GROUP_DENIED
    denied_answer = {"error_code": code, "node_id": -1, "host": "", "port": -1}
    if version < 4:
        if allowed(key_type, req.key):
            return GroupDecision(req)
        return GroupDecision(req, dict(denied_answer))
    denied = {k for k in req.coordinator_keys if not allowed(key_type, k)}
    if not denied:
        return GroupDecision(req)

    def finish(resp: Response) -> Response:
        resp["coordinators"] = [
            {"key": c["key"], **denied_answer} if c["key"] in denied else c
            for c in resp["coordinators"]
        ]
        return resp

    return GroupDecision(req, None, finish)


def _offset_fetch(ctx: RequestContext, req: Any, version: int) -> GroupDecision:
    """DESCRIBE on the group; named topics without DESCRIBE are errored, listed ones hidden."""
    check = ctx.topic_check(AclOperation.DESCRIBE)

    def group_ok(group_id: str) -> bool:
        return ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id)

    def filter_topics(topics_out: list[Response], requested: Any) -> list[Response]:
        kept = [t for t in topics_out if check(t["name"])]
        if requested is not None:
            for t in requested:
                if not check(t.name):
                    kept.append(
                        {
                            "name": t.name,
                            "partitions": [
                                {"partition_index": p, "committed_offset": -1,
                                 "error_code": TOPIC_DENIED}
                                for p in t.partition_indexes
                            ],
                        }
                    )  # fmt: skip
        return kept

    if version >= 8:
        requested = {g.group_id: g.topics for g in req.groups}

        def finish_groups(resp: Response) -> Response:
            for g in resp["groups"]:
                if not group_ok(g["group_id"]):
                    g.update(error_code=GROUP_DENIED, topics=[])
                else:
                    g["topics"] = filter_topics(g["topics"], requested.get(g["group_id"]))
            return resp

        return GroupDecision(req, None, finish_groups)
    if not group_ok(req.group_id):
        return GroupDecision(req, {"error_code": GROUP_DENIED, "topics": []})

    def finish(resp: Response) -> Response:
        resp["topics"] = filter_topics(resp["topics"], req.topics)
        return resp

    return GroupDecision(req, None, finish)
