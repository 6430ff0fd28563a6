"""LogConfig: Kafka defaults and Kafka property names."""

from __future__ import annotations

import pytest

from headwater.log.config import LogConfig
from headwater.log.errors import InvalidConfigError


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.flush_interval_messages == 2**63 - 1
    assert config.flush_interval_ms is None
    assert config.max_message_bytes == 1048588
    assert config.file_handle_cache_size == 1024


def test_broker_and_topic_keys_set_the_same_fields() -> None:
    broker = LogConfig.from_properties(
        {
            "log.segment.bytes": "1000",
            "log.roll.ms": "60000",
            "log.index.interval.bytes": "512",
            "log.retention.bytes": "99999",
            "log.flush.interval.messages": "10",
            "log.flush.interval.ms": "250",
            "message.max.bytes": "2000",
            "headwater.log.open.files.max": "64",
        }
    )
    topic = LogConfig.from_properties(
        {
            "segment.bytes": "1000",
            "segment.ms": "60000",
            "index.interval.bytes": "512",
            "retention.bytes": "99999",
            "flush.messages": "10",
            "flush.ms": "250",
            "max.message.bytes": "2000",
        },
        base=LogConfig(file_handle_cache_size=64),
    )
    assert broker == topic
    assert broker.segment_bytes == 1000 and broker.flush_interval_ms == 250


def test_finer_retention_units_win_and_minus_one_means_forever() -> None:
    assert LogConfig.from_properties({"log.retention.hours": "2"}).retention_ms == 7_200_000
    both = {"log.retention.hours": "2", "log.retention.minutes": "3", "log.retention.ms": "5"}
    assert LogConfig.from_properties(both).retention_ms == 5
    assert LogConfig.from_properties({"log.retention.hours": "-1"}).retention_ms == -1
    assert LogConfig.from_properties({"log.roll.hours": "1"}).segment_ms == 3_600_000


def test_topic_overrides_apply_over_the_broker_config() -> None:
    broker = LogConfig(segment_bytes=5000, retention_ms=100)
    topic = broker.with_topic_overrides({"retention.ms": "-1", "segment.index.bytes": "10"})
    assert (topic.segment_bytes, topic.retention_ms) == (5000, -1)


def test_unknown_keys_are_ignored_and_bad_values_refused() -> None:
    assert LogConfig.from_properties({"segment.index.bytes": "10"}) == LogConfig()
    for props in (
        {"cleanup.policy": "compress"},
        {"cleanup.policy": ""},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.cleanable.dirty.ratio": "x"},
        {"min.compaction.lag.ms": "-1"},
        {"max.compaction.lag.ms": "0"},
        {"delete.retention.ms": "-5"},
        {"segment.bytes": "x"},
        {"segment.bytes": "5"},
        {"segment.bytes": str(2**31)},
        {"flush.messages": "0"},
    ):
        with pytest.raises(InvalidConfigError) as info:
            LogConfig.from_properties(props)
        assert info.value.kafka_error_code == 40
    assert LogConfig.from_properties({"flush.ms": str(2**63 - 1)}).flush_interval_ms is None


def test_cleanup_policy_and_cleaner_keys() -> None:
    config = LogConfig.from_properties(
        {
            "log.cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": "0.1",
            "min.compaction.lag.ms": "5",
            "max.compaction.lag.ms": "1000",
            "delete.retention.ms": "7",
        }
    )
    assert config.compact and not config.delete
    assert (config.min_cleanable_dirty_ratio, config.min_compaction_lag_ms) == (0.1, 5)
    assert (config.max_compaction_lag_ms, config.delete_retention_ms) == (1000, 7)
    assert config.roll_ms == 1000  # a compacted log rolls by max.compaction.lag.ms too
    both = config.with_topic_overrides({"cleanup.policy": "delete, compact"})
    assert both.compact and both.delete
    assert LogConfig().cleanup_policy == ("delete",) and not LogConfig().compact
