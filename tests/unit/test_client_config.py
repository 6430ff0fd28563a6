"""Client settings under Kafka's names, and Kafka's error names."""

from __future__ import annotations

import pickle

import pytest

from headwater.client.cluster import parse_bootstrap
from headwater.client.config import ConsumerConfig, ProducerConfig
from headwater.client.errors import KafkaConnectionError, KafkaError, error_name


def test_consumer_defaults_are_kafkas() -> None:
    c = ConsumerConfig.from_mapping({})
    assert (c.fetch_max_bytes, c.max_partition_fetch_bytes) == (52_428_800, 1_048_576)
    assert (c.fetch_min_bytes, c.fetch_max_wait_ms) == (1, 500)
    assert (c.isolation_level, c.auto_offset_reset) == ("read_uncommitted", "latest")
    assert c.headwater_fetch_session_enable is True


def test_string_values_are_converted_and_checked() -> None:
    c = ConsumerConfig.from_mapping(
        {
            "fetch.max.bytes": "1024",
            "isolation.level": "READ_COMMITTED",
            "headwater.fetch.session.enable": "false",
        }
    )
    assert c.fetch_max_bytes == 1024 and c.isolation == 1
    assert c.headwater_fetch_session_enable is False
    with pytest.raises(ValueError, match=r"auto\.offset\.reset"):
        ConsumerConfig.from_mapping({"auto.offset.reset": "smallest"})
    with pytest.raises(ValueError, match=r"fetch\.min\.bytes"):
        ConsumerConfig.from_mapping({"fetch.min.bytes": "lots"})


def test_keyword_arguments_use_underscores_for_dots() -> None:
    c = ConsumerConfig.from_mapping({"client.id": "x"}, bootstrap_servers="h:1")
    assert (c.bootstrap_servers, c.client_id) == ("h:1", "x")


def test_unknown_keys_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    ConsumerConfig.from_mapping({"interceptor.classes": "x"})
    assert "interceptor.classes" in caplog.text


def test_group_keys() -> None:
    c = ConsumerConfig.from_mapping({"group.id": "g", "group.protocol": "CONSUMER"})
    assert (c.group_id, c.group_protocol) == ("g", "consumer")
    assert ConsumerConfig.from_mapping({}).group_protocol == "classic"
    with pytest.raises(ValueError, match=r"group\.protocol"):
        ConsumerConfig.from_mapping({"group.protocol": "eager"})


def test_idempotence_follows_kafka_3_defaults() -> None:
    assert ProducerConfig.from_mapping({}).idempotent
    assert not ProducerConfig.from_mapping({"acks": 1}).idempotent
    assert not ProducerConfig.from_mapping({"enable.idempotence": "false"}).idempotent
    assert ProducerConfig.from_mapping({"acks": "-1"}).required_acks == -1
    with pytest.raises(ValueError, match="acks=all"):
        _ = ProducerConfig.from_mapping({"acks": "0", "enable.idempotence": True}).idempotent


def test_producer_rejects_unknown_compression() -> None:
    with pytest.raises(ValueError, match=r"compression\.type"):
        ProducerConfig.from_mapping({"compression.type": "brotli"})


def test_kafka_error_names_the_code_in_kafkas_words() -> None:
    err = KafkaError(36, "topic 'x' already exists")
    assert err.name == "TOPIC_ALREADY_EXISTS"
    assert str(err) == "TOPIC_ALREADY_EXISTS (36): topic 'x' already exists"
    assert error_name(70) == "FETCH_SESSION_ID_NOT_FOUND"
    assert error_name(9999) == "UNKNOWN_ERROR_CODE_9999"
    assert not err.retriable and KafkaError(6).retriable


def test_kafka_errors_survive_pickling() -> None:
    for err in (KafkaError(3, "gone"), KafkaConnectionError("reset")):
        copy = pickle.loads(pickle.dumps(err))
        assert (copy.code, copy.message, str(copy)) == (err.code, err.message, str(err))


def test_bootstrap_servers_accept_kafka_forms() -> None:
    assert parse_bootstrap("a:1, PLAINTEXT://b:2,[::1]:3,c") == [
        ("a", 1),
        ("b", 2),
        ("::1", 3),
        ("c", 9092),
    ]
    with pytest.raises(ValueError):
        parse_bootstrap(" , ")
