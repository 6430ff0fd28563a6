"""How often the stream reader asks the broker for log bounds per micro-batch.

The reader's own methods are driven directly, with the broker round trip
(``_bounds``) replaced by a counter: what is checked is which calls need a
fresh snapshot, not the Kafka requests behind one (integration tests)."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from headwater.spark.log_bounds import LogBounds
from headwater.spark.offsets import offsets_to_json
from headwater.spark.options import parse_source_options
from headwater.spark.planning import DataLossError
from headwater.spark.reader import HeadwaterStreamReader
from headwater.spark.task import RangeTask


class CountingReader(HeadwaterStreamReader):
    def __init__(self, bounds: list[LogBounds]) -> None:
        super().__init__(
            parse_source_options(
                {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=True
            )
        )
        self.snapshots = bounds
        self.calls = 0

    def _bounds(self) -> LogBounds:
        self.calls += 1
        return self.snapshots[min(self.calls, len(self.snapshots)) - 1]


def bounds(earliest: int, latest: int, parts: int = 2) -> LogBounds:
    return LogBounds(
        {("t", p): earliest for p in range(parts)}, {("t", p): latest for p in range(parts)}
    )


def test_a_micro_batch_is_planned_from_the_snapshot_its_end_came_from() -> None:
    reader = CountingReader([bounds(0, 10)])
    start = offsets_to_json({("t", 0): 0, ("t", 1): 0})
    end = reader.latestOffset(start, ReadAllAvailable())
    tasks = reader.partitions(start, end)
    assert reader.calls == 1
    assert sorted((t.range.partition, t.range.start, t.range.end) for t in tasks) == [
        (0, 0, 10),
        (1, 0, 10),
    ]
    assert all(isinstance(t, RangeTask) for t in tasks)


def test_the_snapshot_serves_one_plan_only() -> None:
    reader = CountingReader([bounds(0, 10), bounds(5, 10)])
    start = offsets_to_json({("t", 0): 0, ("t", 1): 0})
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.partitions(start, end)
    # Replanning the same batch (as after a restart) asks again, and sees the loss.
    with pytest.raises(DataLossError, match="were deleted"):
        reader.partitions(start, end)
    assert reader.calls == 2


def test_partitions_the_snapshot_does_not_know_are_asked_for() -> None:
    reader = CountingReader([bounds(0, 10, parts=1), bounds(0, 10, parts=2)])
    start = offsets_to_json({("t", 0): 0})
    reader.latestOffset(start, ReadAllAvailable())
    end = offsets_to_json({("t", 0): 10, ("t", 1): 10})
    tasks = reader.partitions(start, end)
    assert reader.calls == 2
    assert len(tasks) == 2


def test_a_deletion_seen_by_latest_offset_is_reported_by_planning() -> None:
    reader = CountingReader([bounds(4, 10)])
    start = offsets_to_json({("t", 0): 0, ("t", 1): 0})
    end = reader.latestOffset(start, ReadAllAvailable())
    with pytest.raises(DataLossError, match="were deleted"):
        reader.partitions(start, end)
