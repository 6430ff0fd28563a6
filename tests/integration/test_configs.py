"""DescribeConfigs with types, sources and synonyms; IncrementalAlterConfigs applied live."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from tests.integration.broker_process import BrokerProcess

BrokerFactory = Callable[..., BrokerProcess]


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _describe(admin: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    futures = admin.describe_configs([resource], request_timeout=15)
    return dict(futures[resource].result(15))


def _alter(admin: AdminClient, resource: ConfigResource, *entries: ConfigEntry) -> None:
    for entry in entries:
        resource.add_incremental_config(entry)
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)


def test_topic_configs_have_sources_synonyms_and_apply_live(
    broker_factory: BrokerFactory,
) -> None:
    b = broker_factory("log.retention.ms=3600000")
    admin = _admin(b)
    admin.create_topics([NewTopic("cfg", 1, 1, config={"segment.bytes": "1048576"})])["cfg"].result(
        15
    )
    topic = ConfigResource(ConfigResource.Type.TOPIC, "cfg")
    configs = _describe(admin, topic)
    assert configs["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].is_default
    synonyms = [s.name for s in configs["retention.ms"].synonyms.values()]
    assert "log.retention.ms" in synonyms

    producer = Producer({"bootstrap.servers": b.bootstrap, "message.max.bytes": 100_000_000})
    producer.produce("cfg", b"x" * 20_000)
    assert producer.flush(15) == 0
    _alter(
        admin,
        ConfigResource(ConfigResource.Type.TOPIC, "cfg"),
        ConfigEntry("max.message.bytes", "10000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    )
    configs = _describe(admin, ConfigResource(ConfigResource.Type.TOPIC, "cfg"))
    assert configs["max.message.bytes"].value == "10000"
    assert configs["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"
    errors: list[object] = []
    producer.produce("cfg", b"x" * 20_000, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None and "MSG_SIZE_TOO_LARGE" in str(errors[0])

    bad = ConfigResource(ConfigResource.Type.TOPIC, "cfg")
    bad.add_incremental_config(
        ConfigEntry("segment.bytes", "banana", incremental_operation=AlterConfigOpType.SET)
    )
    try:
        admin.incremental_alter_configs([bad])[bad].result(15)
        raise AssertionError("a bad value was accepted")
    except KafkaException as exc:
        assert "INVALID_CONFIG" in str(exc) or "banana" in str(exc)


def test_dynamic_broker_configs_apply_live_and_survive_a_restart(
    broker_factory: BrokerFactory,
) -> None:
    b = broker_factory()
    admin = _admin(b)
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    _alter(
        admin,
        broker,
        ConfigEntry("max.connections.per.ip", "3", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
    )
    configs = _describe(admin, ConfigResource(ConfigResource.Type.BROKER, "0"))
    assert configs["log.retention.ms"].value == "7200000"
    assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not configs["max.connections.per.ip"].is_read_only
    assert configs["socket.request.max.bytes"].is_read_only
    # Live: admin's connections plus extra ones hit the new per-IP limit.
    extra = [socket.create_connection(("127.0.0.1", b.port)) for _ in range(4)]
    time.sleep(0.5)
    closed = 0
    for s in extra:
        s.settimeout(2)
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            closed += s.recv(1) == b""
        s.close()
    assert closed >= 1

    refused = ConfigResource(ConfigResource.Type.BROKER, "0")
    refused.add_incremental_config(
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)
    )
    try:
        admin.incremental_alter_configs([refused])[refused].result(15)
        raise AssertionError("a static config was altered")
    except KafkaException as exc:
        assert "dynamically" in str(exc) or "INVALID_CONFIG" in str(exc)

    b.restart()
    configs = _describe(_admin(b), ConfigResource(ConfigResource.Type.BROKER, "0"))
    assert configs["log.retention.ms"].value == "7200000"


def test_alter_configs_replaces_a_topics_whole_override_set(broker: BrokerProcess) -> None:
    """AlterConfigs (API 33, confluent-kafka's alter_configs): listed keys are set and
    every override not listed goes back to its default, as in Kafka."""
    admin = _admin(broker)
    for future in admin.create_topics(
        [NewTopic("legacy", 1, 1, config={"retention.ms": "60000", "segment.bytes": "1048576"})]
    ).values():
        future.result(15)
    resource = ConfigResource("topic", "legacy", set_config={"cleanup.policy": "compact"})
    admin.alter_configs([resource], request_timeout=15)[resource].result(15)
    configs = _describe(admin, ConfigResource("topic", "legacy"))
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # Not listed: back to the broker's defaults.
    assert configs["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    bad = ConfigResource("topic", "legacy", set_config={"retention.ms": "abc"})
    try:
        admin.alter_configs([bad], request_timeout=15)[bad].result(15)
    except KafkaException as exc:
        assert exc.args[0].code() == 40  # INVALID_CONFIG
    else:
        raise AssertionError("a bad value was accepted")
    assert _describe(admin, ConfigResource("topic", "legacy"))["cleanup.policy"].value == "compact"


def test_alter_configs_sets_the_brokers_dynamic_configs(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    resource = ConfigResource("broker", "0", set_config={"log.retention.ms": "7200000"})
    admin.alter_configs([resource], request_timeout=15)[resource].result(15)
    configs = _describe(admin, ConfigResource("broker", "0"))
    assert configs["log.retention.ms"].value == "7200000"
    assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    # An empty set resets every dynamic config.
    empty = ConfigResource("broker", "0", set_config={})
    admin.alter_configs([empty], request_timeout=15)[empty].result(15)
    configs = _describe(admin, ConfigResource("broker", "0"))
    assert configs["log.retention.ms"].source != ConfigSource.DYNAMIC_BROKER_CONFIG.value
