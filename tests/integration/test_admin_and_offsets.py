"""Topic administration, configs, ListOffsets, retention and the server switches."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build, decode_response, encode_request, request_class
from tests.integration.broker_process import BrokerProcess
from tests.integration.wire import WireClient


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _metadata_v12(b: BrokerProcess, topic: str) -> tuple[int, object]:
    c = WireClient(b.bootstrap)
    try:
        req = build(
            request_class(ApiKey.METADATA, 12),
            {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
        )
        body = c.request(ApiKey.METADATA, 12, encode_request(req))
    finally:
        c.close()
    resp = decode_response(ApiKey.METADATA, 12, body)
    (t,) = resp.topics
    return int(t.error_code), t.topic_id


def test_topic_ids_are_non_zero_and_stable_across_restart(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    for f in admin.create_topics([NewTopic("ids", 2, 1)]).values():
        f.result(10)
    code, topic_id = _metadata_v12(broker, "ids")
    assert code == 0 and topic_id.int != 0
    broker.restart()
    assert _metadata_v12(broker, "ids") == (0, topic_id)


def test_create_describe_partitions_and_delete(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    new = NewTopic("cfg", 2, 1, config={"retention.ms": "3600000"})
    for f in admin.create_topics([new]).values():
        f.result(10)
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic("cfg", 2, 1)])["cfg"].result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"
    admin.create_partitions([NewPartitions("cfg", 5)])["cfg"].result(10)
    assert len(admin.list_topics(timeout=10).topics["cfg"].partitions) == 5
    admin.delete_topics(["cfg"])["cfg"].result(10)
    assert "cfg" not in admin.list_topics(timeout=10).topics


def test_offsets_for_times_and_retention_advance_the_log_start(tmp_path: Path) -> None:
    b = BrokerProcess(
        tmp_path / "d",
        overrides=["log.retention.check.interval.ms=200", "log.segment.bytes=2000"],
    ).start()
    try:
        admin = _admin(b)
        for f in admin.create_topics([NewTopic("old", 1, 1)]).values():
            f.result(10)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        now = int(time.time() * 1000)
        for i in range(100):
            p.produce("old", value=b"x" * 100, partition=0, timestamp=now - 100_000 + i * 1000)
            p.flush(10)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "t"})
        found = c.offsets_for_times([TopicPartition("old", 0, now - 50_000)], 10)
        assert found[0].offset == 50
        lo, hi = c.get_watermark_offsets(TopicPartition("old", 0), 10)
        assert (lo, hi) == (0, 100)
        # Keep only the last ~30 s: whole segments older than that go.
        res = ConfigResource(ConfigResource.Type.TOPIC, "old")
        assert admin.describe_configs([res])[res].result(10)["retention.ms"].value
        c.close()
        b.stop()
        b.overrides.append("log.retention.ms=30000")
        b.start()
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "t"})
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            lo, hi = c.get_watermark_offsets(TopicPartition("old", 0), 10, cached=False)
            if lo > 0:
                break
            time.sleep(0.3)
        # Record i was older than 30 s once 70 + (seconds since `now`) passed i:
        # on a slow machine the restart takes a while, so more has expired.
        expired = 70 + -(-(int(time.time() * 1000) - now) // 1000)
        assert 0 < lo <= expired and hi == 100
        c.close()
    finally:
        b.kill()


@pytest.mark.parametrize(
    "override", ["headwater.event.loop=uvloop", "headwater.zero.copy.enable=false"]
)
def test_round_trip_on_alternative_server_paths(tmp_path: Path, override: str) -> None:
    b = BrokerProcess(tmp_path / "d", overrides=[override]).start()
    try:
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(500):
            p.produce("alt", value=b"%d" % i, partition=0)
        assert p.flush(20) == 0
        c = Consumer(
            {"bootstrap.servers": b.bootstrap, "group.id": "alt", "auto.offset.reset": "earliest"}
        )
        c.assign([TopicPartition("alt", 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 500 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(int(m.value()))
        c.close()
        assert got == list(range(500))
    finally:
        b.kill()


def test_describe_cluster_names_the_broker_as_controller(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster(request_timeout=10).result(10)
    assert cluster.controller is not None and cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", broker.port)]
