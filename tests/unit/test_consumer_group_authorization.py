"""ACLs on the KIP-848 APIs, as Kafka checks them (no coordinator, no sockets)."""

from __future__ import annotations

from headwater.broker.handlers.group_authorization import (
    GROUP_DENIED,
    TOPIC_DENIED,
    authorize_group_request,
)
from headwater.protocol.apis import ApiKey
from tests.unit.test_group_authorization import RT, Op, ctx_for, req

HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT
TOPICS = ("logs-a", "logs-b", "orders")


def heartbeat(**body: object) -> object:
    return req(
        HEARTBEAT,
        1,
        {"group_id": "g", "member_id": "m", "member_epoch": 0, "topic_partitions": [], **body},
    )


def test_a_heartbeat_needs_read_on_the_group() -> None:
    decision = authorize_group_request(ctx_for(HEARTBEAT, 1), heartbeat())
    assert decision.response is not None
    assert decision.response["error_code"] == GROUP_DENIED
    allowed = authorize_group_request(ctx_for(HEARTBEAT, 1, (RT.GROUP, "g", Op.READ)), heartbeat())
    assert allowed.response is None


def test_named_topics_need_describe() -> None:
    ctx = ctx_for(HEARTBEAT, 1, (RT.GROUP, "g", Op.READ), (RT.TOPIC, "orders", Op.DESCRIBE))
    ok = authorize_group_request(ctx, heartbeat(subscribed_topic_names=["orders"]))
    assert ok.response is None
    denied = authorize_group_request(ctx, heartbeat(subscribed_topic_names=["orders", "logs-a"]))
    assert denied.response is not None and denied.response["error_code"] == TOPIC_DENIED


def test_a_regex_needs_describe_on_every_topic_it_matches() -> None:
    grants = [(RT.GROUP, "g", Op.READ), (RT.TOPIC, "logs-a", Op.DESCRIBE)]
    ctx = ctx_for(HEARTBEAT, 1, *grants)
    denied = authorize_group_request(
        ctx, heartbeat(subscribed_topic_regex="logs-.*"), lambda: TOPICS
    )
    assert denied.response is not None and denied.response["error_code"] == TOPIC_DENIED
    assert "logs-b" in str(denied.response["error_message"])
    ctx = ctx_for(HEARTBEAT, 1, *grants, (RT.TOPIC, "logs-b", Op.DESCRIBE))
    ok = authorize_group_request(ctx, heartbeat(subscribed_topic_regex="logs-.*"), lambda: TOPICS)
    assert ok.response is None


def test_consumer_group_describe_needs_describe_on_each_group() -> None:
    ctx = ctx_for(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, (RT.GROUP, "seen", Op.DESCRIBE))
    request = req(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        1,
        {"group_ids": ["seen", "hidden"], "include_authorized_operations": False},
    )
    decision = authorize_group_request(ctx, request)
    assert list(decision.request.group_ids) == ["seen"]
    finished = decision.finish({"groups": [{"group_id": "seen", "error_code": 0}]})
    assert [(g["group_id"], g["error_code"]) for g in finished["groups"]] == [
        ("seen", 0),
        ("hidden", GROUP_DENIED),
    ]
