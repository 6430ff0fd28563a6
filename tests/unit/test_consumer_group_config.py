"""The KIP-848 broker configs: Kafka's names, defaults and start-up checks."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.broker.config import BrokerConfig
from headwater.broker.config_def import BROKER_CONFIG_DEF
from headwater.broker.coordinators import Coordinators
from headwater.group.consumer_group_coordinator import ConsumerGroupConfig


def consumer_config(**props: str) -> ConsumerGroupConfig:
    config = BrokerConfig.from_properties(props)
    none: Any = None
    return Coordinators(config, none, none, none, none).consumer_group_config()


def test_defaults_are_kafka_4s() -> None:
    assert consumer_config() == ConsumerGroupConfig(
        heartbeat_interval_ms=5000,
        session_timeout_ms=45000,
        max_size=2**31 - 1,
        assignors=("uniform", "range"),
        migration_policy="bidirectional",
    )
    assert BrokerConfig().group_rebalance_protocols == ("classic", "consumer")


def test_keys_are_read_with_kafkas_names_and_class_names() -> None:
    config = consumer_config(
        **{
            "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.session.timeout.ms": "6000",
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.max.size": "3",
            "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor,"
            "uniform",
            "group.consumer.migration.policy": "Downgrade",
        }
    )
    assert config == ConsumerGroupConfig(500, 6000, 3, ("range", "uniform"), "downgrade")
    assert config.default_assignor == "range"
    protocols = BrokerConfig.from_properties({"group.coordinator.rebalance.protocols": "classic"})
    assert protocols.group_rebalance_protocols == ("classic",)


@pytest.mark.parametrize(
    "props",
    [
        {"group.consumer.session.timeout.ms": "1000"},  # below the minimum
        {"group.consumer.heartbeat.interval.ms": "50000"},  # not below the session
        {"group.consumer.assignors": "sticky"},
        {"group.consumer.migration.policy": "sideways"},
    ],
)
def test_bad_settings_stop_the_broker_at_start(props: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"group\.consumer"):
        consumer_config(**props)


def test_the_config_table_knows_the_keys() -> None:
    BROKER_CONFIG_DEF.validate({"group.consumer.migration.policy": "upgrade"})
    with pytest.raises(ValueError):
        BROKER_CONFIG_DEF.validate({"group.consumer.migration.policy": "sideways"})
