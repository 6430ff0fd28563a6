"""The planner's authorization hook: denied partitions are answered, never read."""

from __future__ import annotations

from pathlib import Path

from headwater.fetch.planner import read_partitions
from headwater.log.config import LogConfig
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.log.log_directory import LogDirectory
from tests.unit.test_fetch_planner import _batch, _req


def test_unauthorized_partitions_get_29_and_are_not_read(tmp_path: Path) -> None:
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    for topic in ("open", "closed"):
        logs.create_topic(topic, 1)
        logs.log(topic, 0).append(_batch(100), 0)
    looked_up: list[str] = []

    def lookup(topic: str, partition: int) -> Log | None:
        looked_up.append(topic)
        return logs.existing_log(topic, partition)

    result = read_partitions(
        [_req(0, topic="closed"), _req(0, topic="open"), _req(0, topic="missing")],
        lookup,
        max_bytes=1 << 20,
        isolation=Isolation.HIGH_WATERMARK,
        authorized=lambda topic: topic != "closed" and topic != "missing",
    )
    assert [(p.topic, p.error_code) for p in result.partitions] == [
        ("closed", 29),
        ("open", 0),
        ("missing", 29),  # a denied name does not reveal whether the topic exists
    ]
    assert looked_up == ["open"]
    assert result.has_error and result.bytes_read == result.partitions[1].records_size > 0
