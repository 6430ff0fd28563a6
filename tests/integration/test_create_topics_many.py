"""CreateTopics with many topics in one request, on a real broker.

The broker writes every topic before it waits for any leader, and waits for
all of them together. Before, it created and waited topic by topic: a request
for 50 topics of 1,000 partitions outlasted the client's 60 s timeout, the
client closed its connection, and the topics not yet written were never
created (35 of 50 in ``bench/bench_scale.py --partitions 50000``).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient

from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build_request, decode_response, encode_request
from tests.integration.broker_process import BrokerProcess
from tests.integration.cluster_process import wait_for
from tests.integration.wire import WireClient

VERSION = 7
INVALID_REQUEST = 42


def _create_request(names: list[str], timeout_ms: int = 30_000) -> bytes:
    topics = [
        {"name": n, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
        for n in names
    ]
    data = {"topics": topics, "timeout_ms": timeout_ms, "validate_only": False}
    return encode_request(build_request(ApiKey.CREATE_TOPICS, VERSION, data))


def _topics(admin: AdminClient) -> dict[str, Any]:
    return dict(admin.list_topics(timeout=15).topics)


def test_every_topic_of_a_request_is_created_when_the_client_gives_up(
    broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    names = [f"given-up-{i:02d}" for i in range(40)]
    client = WireClient(broker.bootstrap)
    client.send_request(ApiKey.CREATE_TOPICS, VERSION, _create_request(names))
    # The client gives up as soon as the first topic shows (librdkafka closes its
    # connection on a request timeout); the request is already being served.
    wait_for(lambda: set(names) & set(_topics(admin)), timeout=60, what="a first topic")
    client.close()
    wait_for(
        lambda: set(names) <= set(_topics(admin)),
        timeout=60,
        what=f"all {len(names)} topics",
    )
    led = _topics(admin)
    for name in names:
        assert sorted(led[name].partitions) == [0, 1]
    # and the broker serves a new request for more topics at once, every one answered
    more = [f"more-{i:02d}" for i in range(20)]
    answer = WireClient(broker.bootstrap)
    try:
        body = answer.request(ApiKey.CREATE_TOPICS, VERSION, _create_request(more))
    finally:
        answer.close()
    response = decode_response(ApiKey.CREATE_TOPICS, VERSION, body)
    assert [t.name for t in response.topics] == more
    assert {int(t.error_code) for t in response.topics} == {0}
    assert {int(t.num_partitions) for t in response.topics} == {2}


def test_a_topic_named_twice_is_refused_and_the_others_created(broker: BrokerProcess) -> None:
    client = WireClient(broker.bootstrap)
    try:
        body = client.request(
            ApiKey.CREATE_TOPICS, VERSION, _create_request(["twice", "once", "twice"])
        )
    finally:
        client.close()
    response = decode_response(ApiKey.CREATE_TOPICS, VERSION, body)
    errors = [(t.name, int(t.error_code), t.error_message) for t in response.topics]
    assert errors == [
        ("twice", INVALID_REQUEST, "Duplicate topic name."),
        ("once", 0, None),
        ("twice", INVALID_REQUEST, "Duplicate topic name."),
    ]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = _topics(admin)
    assert "once" in topics and "twice" not in topics


def test_a_zero_timeout_is_answered_at_once_and_the_topic_still_gets_its_leader(
    broker: BrokerProcess,
) -> None:
    client = WireClient(broker.bootstrap)
    try:
        body = client.request(ApiKey.CREATE_TOPICS, VERSION, _create_request(["now"], 0))
    finally:
        client.close()
    response = decode_response(ApiKey.CREATE_TOPICS, VERSION, body)
    assert [(t.name, int(t.error_code)) for t in response.topics] == [("now", 0)]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def led() -> bool:
        topic = _topics(admin).get("now")
        return topic is not None and all(p.leader >= 0 for p in topic.partitions.values())

    wait_for(led, timeout=30, what="a leader for every partition of 'now'")
