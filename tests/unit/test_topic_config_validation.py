"""CreateTopics' config and count checks, as Kafka's ConfigDef and AdminManager answer."""

from __future__ import annotations

import pytest

from headwater.broker.topic_config_validation import (
    partitions_error,
    replication_factor_error,
    topic_configs_error,
)
from headwater.log.config import LogConfig


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("retention.ms", "abc", "Not a number of type LONG"),
        ("retention.ms", "1.5", "Not a number of type LONG"),
        ("segment.bytes", str(2**31), "Not a number of type INT"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("unclean.leader.election.enable", "maybe", "either true or false"),
        ("compression.type", "brotli", "String must be one of"),
        ("message.timestamp.type", "Now", "String must be one of"),
        ("cleanup.policy", "delete,shred", "must be a list of"),
        ("cleanup.policy", "", "must be a list of"),
    ],
)
def test_bad_values_are_named(key: str, value: str, reason: str) -> None:
    message = topic_configs_error({key: value}, LogConfig())
    assert message is not None
    assert message.startswith(f"Invalid value {value} for configuration {key}")
    assert reason in message


def test_ranges_of_the_log_config_apply() -> None:
    message = topic_configs_error({"segment.bytes": "12"}, LogConfig())
    assert message is not None and "segment.bytes" in message and "at least 14" in message


@pytest.mark.parametrize(
    "configs",
    [
        {},
        {"retention.ms": "-1", "segment.bytes": "1048576"},
        {"cleanup.policy": "compact,delete", "compression.type": "zstd"},
        {"unclean.leader.election.enable": "TRUE", "min.insync.replicas": "2"},
        {"message.timestamp.type": "LogAppendTime"},
    ],
)
def test_good_values_pass(configs: dict[str, str]) -> None:
    assert topic_configs_error(configs, LogConfig()) is None


def test_counts() -> None:
    assert partitions_error(1) is None
    assert partitions_error(0) == partitions_error(-3) is not None
    assert replication_factor_error(3) is None
    assert replication_factor_error(0) is not None
