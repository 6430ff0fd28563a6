"""Kafka's ZooKeeper layout: connect strings, paths and JSON round trips."""

from __future__ import annotations

import json
import uuid

import pytest

from headwater.cluster import zk_layout as zk


def test_connect_string_with_chroot_and_several_hosts() -> None:
    parsed = zk.parse_zookeeper_connect("a:2181,b:2182/kafka/prod/")
    assert parsed.hosts == "a:2181,b:2182"
    assert parsed.chroot == "/kafka/prod"
    assert str(parsed) == "a:2181,b:2182/kafka/prod"


def test_connect_string_without_chroot() -> None:
    assert zk.parse_zookeeper_connect("127.0.0.1:2181").chroot == ""
    assert zk.parse_zookeeper_connect("127.0.0.1:2181/").chroot == ""


@pytest.mark.parametrize("bad", ["", "/chroot", "host", "host:abc", "h:1/a/../b", "h:70000"])
def test_bad_connect_strings_are_refused(bad: str) -> None:
    with pytest.raises(zk.ZkLayoutError):
        zk.parse_zookeeper_connect(bad)


def test_paths_follow_kafka() -> None:
    assert zk.broker_path(3) == "/brokers/ids/3"
    assert zk.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert zk.topic_config_path("t") == "/config/topics/t"
    assert zk.delete_topic_path("t") == "/admin/delete_topics/t"


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "x" * 250, "sp ace"])
def test_illegal_topic_names(bad: str) -> None:
    with pytest.raises(zk.ZkLayoutError):
        zk.validate_topic_name(bad)


def test_broker_registration_round_trip_and_kafka_fields() -> None:
    data = zk.encode_broker("10.0.0.1", 9092, "r1")
    raw = json.loads(data)
    assert raw["endpoints"] == ["PLAINTEXT://10.0.0.1:9092"]
    assert raw["version"] == 4
    assert zk.decode_broker(data) == ("10.0.0.1", 9092, "r1")


def test_old_style_broker_registration_without_endpoints() -> None:
    assert zk.decode_broker(b'{"host":"h","port":1,"version":1}') == ("h", 1, None)


def test_topic_id_is_kafkas_base64_uuid() -> None:
    topic_id = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    text = zk.encode_topic_id(topic_id)
    assert len(text) == 22 and "=" not in text
    assert zk.decode_topic_id(text) == topic_id
    data = zk.encode_topic(topic_id, {1: [2, 3], 0: [1, 2]})
    assert json.loads(data)["partitions"] == {"0": [1, 2], "1": [2, 3]}
    assert zk.decode_topic(data) == (topic_id, {0: [1, 2], 1: [2, 3]})


def test_partition_state_round_trip() -> None:
    data = zk.encode_partition_state(2, 5, (2, 1), 7)
    assert json.loads(data) == {
        "controller_epoch": 7, "leader": 2, "version": 1, "leader_epoch": 5, "isr": [2, 1]
    }  # fmt: skip
    assert zk.decode_partition_state(data) == (2, 5, (2, 1), 7)


def test_configs_controller_and_cluster_id_round_trip() -> None:
    assert zk.decode_configs(zk.encode_configs({"a": "1"})) == {"a": "1"}
    assert zk.decode_controller(zk.encode_controller(4)) == 4
    assert zk.decode_controller(b"4") == 4
    assert zk.decode_controller_epoch(zk.encode_controller_epoch(12)) == 12
    assert zk.decode_cluster_id(zk.encode_cluster_id("abc")) == "abc"


@pytest.mark.parametrize(
    "decode",
    [zk.decode_broker, zk.decode_topic, zk.decode_partition_state, zk.decode_configs,
     zk.decode_controller, zk.decode_controller_epoch],
)  # fmt: skip
def test_garbage_is_a_layout_error(decode: object) -> None:
    with pytest.raises(zk.ZkLayoutError):
        decode(b"\xffnot json{")  # type: ignore[operator]
