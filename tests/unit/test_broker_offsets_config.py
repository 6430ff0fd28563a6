"""The offsets topic's broker settings, under Kafka's key names."""

from __future__ import annotations

import pytest

from headwater.broker.config import BrokerConfig


def test_defaults_are_kafkas() -> None:
    config = BrokerConfig.from_properties({})
    assert config.offsets_topic_num_partitions == 50
    assert config.offsets_topic_replication_factor == 3


def test_keys_are_read() -> None:
    config = BrokerConfig.from_properties(
        {"offsets.topic.num.partitions": "7", "offsets.topic.replication.factor": "1"}
    )
    assert config.offsets_topic_num_partitions == 7
    assert config.offsets_topic_replication_factor == 1
    assert "offsets.topic.num.partitions" not in config.extra


@pytest.mark.parametrize(
    "key", ["offsets.topic.num.partitions", "offsets.topic.replication.factor"]
)
def test_less_than_one_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match=key):
        BrokerConfig.from_properties({key: "0"})
