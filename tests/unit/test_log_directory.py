"""The data directory: topic registry, partition logs, shutdown marker, housekeeping."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from headwater.log.config import LogConfig
from headwater.log.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from headwater.log.isolation import Isolation
from headwater.log.log_directory import LogDirectory
from headwater.records import RecordBatchBuilder

NOW = 1_700_000_000_000


def batch(ts: int = NOW) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(ts, b"k", b"v" * 50)
    return builder.build()


def opened(path: Path, config: LogConfig | None = None) -> LogDirectory:
    directory = LogDirectory(path, config or LogConfig())
    directory.open()
    return directory


def test_topic_registry_survives_reopen_with_the_same_ids(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    orders = directory.create_topic("orders", 3, {"retention.ms": "1000"})
    events = directory.create_topic("events.v1", 1)
    directory.close()
    again = opened(tmp_path)
    assert set(again.topics()) == {"orders", "events.v1"}
    assert again.topics()["orders"] == orders
    assert again.topic_by_id(events.topic_id) == events
    assert again.topics()["orders"].configs == {"retention.ms": "1000"}
    assert again.log("orders", 0).config.retention_ms == 1000
    assert again.log("events.v1", 0).config.retention_ms == LogConfig().retention_ms


def test_registry_is_json_written_atomically(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    info = directory.create_topic("a", 2)
    data = json.loads((tmp_path / "topics.json").read_text())
    assert data["topics"]["a"] == {
        "topic_id": str(info.topic_id),
        "num_partitions": 2,
        "configs": {},
    }
    assert not (tmp_path / "topics.json.tmp").exists()


def test_topic_ids_are_random_and_distinct(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    ids = {directory.create_topic(f"t{i}", 1).topic_id for i in range(20)}
    assert len(ids) == 20
    assert all(topic_id.version == 4 for topic_id in ids)


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "tópico", "x" * 250, "a/b"])
def test_illegal_topic_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        opened(tmp_path).create_topic(name, 1)
    assert info.value.kafka_error_code == 17


def test_legal_topic_names_are_accepted(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    for name in ("a", "A-b_c.d", "x" * 249, "..."):
        directory.create_topic(name, 1)


def test_names_differing_only_in_dot_and_underscore_collide(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    directory.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        directory.create_topic("a_b", 1)


def test_existing_topic_and_bad_partition_counts_are_refused(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    directory.create_topic("t", 1)
    with pytest.raises(TopicExistsError) as exists:
        directory.create_topic("t", 1)
    assert exists.value.kafka_error_code == 36
    with pytest.raises(InvalidPartitionsError) as partitions:
        directory.create_topic("u", 0)
    assert partitions.value.kafka_error_code == 37
    with pytest.raises(InvalidConfigError):
        directory.create_topic("v", 1, {"segment.bytes": "lots"})
    assert set(directory.topics()) == {"t"}


def test_logs_are_created_lazily_per_partition(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    directory.create_topic("t", 2)
    log = directory.log("t", 1)
    assert directory.log("t", 1) is log
    assert not (tmp_path / "t-1").exists()
    log.append(batch(), NOW)
    assert (tmp_path / "t-1").is_dir()
    assert [(topic, p) for topic, p, _ in directory.loaded_logs()] == [("t", 1)]
    with pytest.raises(UnknownTopicOrPartitionError):
        directory.log("t", 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        directory.log("nope", 0)


def test_delete_topic_removes_partition_directories_and_the_registry_entry(
    tmp_path: Path,
) -> None:
    directory = opened(tmp_path)
    info = directory.create_topic("t", 2)
    directory.log("t", 0).append(batch(), NOW)
    directory.log("t", 1).append(batch(), NOW)
    directory.close()
    directory = opened(tmp_path)
    assert directory.log("t", 0).log_end_offset == 1  # one loaded, one not
    directory.delete_topic("t")
    assert not (tmp_path / "t-0").exists() and not (tmp_path / "t-1").exists()
    assert directory.topic_by_id(info.topic_id) is None
    with pytest.raises(UnknownTopicOrPartitionError):
        directory.delete_topic("t")
    recreated = directory.create_topic("t", 1)
    assert recreated.topic_id != info.topic_id
    assert directory.log("t", 0).log_end_offset == 0


def test_create_partitions_only_grows(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    directory.create_topic("t", 2)
    with pytest.raises(InvalidPartitionsError):
        directory.create_partitions("t", 2)
    grown = directory.create_partitions("t", 5)
    assert grown.num_partitions == 5
    directory.log("t", 4).append(batch(), NOW)
    directory.close()
    assert opened(tmp_path).topics()["t"].num_partitions == 5


def test_clean_shutdown_marker_decides_recovery(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    directory.create_topic("t", 1)
    directory.log("t", 0).append(batch(), NOW)
    directory.close()
    assert (tmp_path / ".clean_shutdown").exists()

    directory = opened(tmp_path)
    assert directory.clean_shutdown
    assert not (tmp_path / ".clean_shutdown").exists()
    directory.log("t", 0).append(batch(), NOW)
    # "crash": no close(); a torn write lands at the end of the active segment
    with open(tmp_path / "t-0" / "00000000000000000000.log", "ab") as f:
        f.write(batch()[:40])

    crashed = opened(tmp_path)
    assert not crashed.clean_shutdown
    log = crashed.log("t", 0)
    assert log.log_end_offset == 2
    assert log.recovered_bytes == 40
    result = log.read(0, 1 << 20, Isolation.HIGH_WATERMARK, True)
    assert result.records is not None and result.records.size == 2 * len(batch())


def test_housekeeping_rolls_retains_and_flushes(tmp_path: Path) -> None:
    config = LogConfig(segment_ms=1000, retention_ms=5000, flush_interval_ms=100)
    directory = opened(tmp_path, config)
    directory.create_topic("t", 2)
    directory.log("t", 0).append(batch(NOW), NOW)
    assert directory.flush_due(NOW + 50) == 0
    assert directory.flush_due(NOW + 100) == 1
    assert directory.roll_due(NOW + 1001) == 1
    directory.log("t", 0).append(batch(NOW + 1001), NOW + 1001)
    directory.close()

    directory = opened(tmp_path, config)  # retention reaches logs not yet loaded
    assert directory.run_retention(NOW + 6000) == 1
    assert directory.log("t", 0).log_start_offset == 1
    assert not (tmp_path / "t-1").exists()


def test_topic_config_overrides_reach_the_log(tmp_path: Path) -> None:
    directory = opened(tmp_path, LogConfig(segment_bytes=10_000))
    directory.create_topic("small", 1, {"segment.bytes": "200", "cleanup.policy": "delete"})
    log = directory.log("small", 0)
    for _ in range(3):
        log.append(batch(), NOW)
    assert len(log.segments) == 3


def test_loaded_logs_is_a_snapshot_when_a_collection_adds_a_log_midway(tmp_path: Path) -> None:
    """The scrubber lists logs from its own thread; a garbage collection in the
    middle of the listing can hand the GIL to the loop, which adds a log. The
    collection callback below plays the loop, at every allocation."""
    directory = opened(tmp_path)
    # More logs than CPython keeps spare 2-tuples for, so the listing allocates.
    directory.create_topic("t", 3_010)
    for p in range(3_000):
        directory.log("t", p)
    added: list[int] = []

    def loop_adds_a_log(phase: str, _info: dict[str, int]) -> None:
        if phase == "start" and len(added) < 10:
            added.append(3_000 + len(added))
            directory.log("t", added[-1])

    thresholds = gc.get_threshold()
    gc.callbacks.append(loop_adds_a_log)
    gc.set_threshold(1)
    try:
        listed = list(directory.loaded_logs())
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(loop_adds_a_log)
    assert added, "no collection ran during the listing"
    partitions = [p for _, p, _ in listed]
    assert len(set(partitions)) == len(partitions)
    assert set(range(3_000)) <= set(partitions)
    assert [p for _, p, _ in directory.loaded_logs()] == list(range(3_000 + len(added)))
