"""KIP-392's replica selection and the follower's consumer read, without sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.fetch.planner import read_partitions
from headwater.fetch.replica_selector import (
    NO_PREFERRED_REPLICA,
    RACK_AWARE,
    RACK_AWARE_SELECTOR_CLASS,
    ReplicaView,
    parse_replica_selector,
    preferred_read_replica,
)
from headwater.log.config import LogConfig
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.log.log_directory import LogDirectory
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_types import ZERO_UUID, PartitionFetch
from headwater.records.record import RecordBatchBuilder


def view(
    broker_id: int, rack: str | None, end: int = 100, hw: int = 100, start: int = 0, lag: int = 0
) -> ReplicaView:
    return ReplicaView(broker_id, rack, start, end, hw, lag)


LEADER = view(1, "a")


def test_the_selector_takes_kafkas_class_name_or_a_short_name() -> None:
    assert parse_replica_selector(RACK_AWARE_SELECTOR_CLASS) == RACK_AWARE
    assert parse_replica_selector(" rack-aware ") == RACK_AWARE
    assert parse_replica_selector("") is None
    with pytest.raises(ValueError, match="RackAwareReplicaSelector"):
        parse_replica_selector("com.example.MySelector")


def test_a_consumer_without_a_rack_or_in_the_leaders_rack_stays_on_the_leader() -> None:
    followers = [view(2, "b"), view(3, "c")]
    assert preferred_read_replica("", 10, LEADER, followers) == NO_PREFERRED_REPLICA
    assert preferred_read_replica("a", 10, LEADER, [*followers, view(4, "a")]) == -1


def test_a_consumer_goes_to_the_in_sync_replica_of_its_rack() -> None:
    followers = [view(2, "b"), view(3, "c")]
    assert preferred_read_replica("b", 10, LEADER, followers) == 2
    assert preferred_read_replica("c", 10, LEADER, followers) == 3
    assert preferred_read_replica("d", 10, LEADER, followers) == NO_PREFERRED_REPLICA


def test_the_most_caught_up_replica_of_the_rack_wins() -> None:
    followers = [view(2, "b", end=90, hw=90), view(3, "b", end=100), view(4, "b", end=100, lag=5)]
    assert preferred_read_replica("b", 10, LEADER, followers) == 3


def test_a_replica_that_does_not_hold_the_offset_is_not_chosen() -> None:
    # Kafka's rule: log start <= fetch offset <= log end on the follower.
    assert preferred_read_replica("b", 150, LEADER, [view(2, "b", end=100)]) == -1
    assert preferred_read_replica("b", 5, LEADER, [view(2, "b", start=10)]) == -1


def test_a_replica_that_has_not_heard_the_offset_is_committed_is_not_chosen() -> None:
    """It would answer OFFSET_NOT_AVAILABLE and bounce the consumer back."""
    assert preferred_read_replica("b", 100, LEADER, [view(2, "b", end=100, hw=90)]) == -1
    assert preferred_read_replica("b", 90, LEADER, [view(2, "b", end=100, hw=90)]) == 2


def _batch(n: int) -> bytes:
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(1_700_000_000_000, None, b"v%d" % i)
    return b.build()


def _follower_log(tmp_path: Path, high_watermark: int) -> Log:
    """A replicated log of 10 records (two batches of 5) whose HW the leader set."""
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    logs.create_topic("t", 1)
    log = logs.log("t", 0)
    log.enable_replication(0)
    log.append(_batch(5), 0)
    log.append(_batch(5), 0)
    log.update_high_watermark(high_watermark)
    return log


def _read(
    log: Log, offset: int, *, follower: bool = True, redirect: int = -1
) -> tuple[int, int, int, int]:
    result = read_partitions(
        [PartitionFetch(ZERO_UUID, "t", 0, offset, partition_max_bytes=1 << 20)],
        lambda t, p: log,
        max_bytes=1 << 20,
        isolation=Isolation.HIGH_WATERMARK,
        follower_read=lambda t, p: follower,
        redirect=lambda t, p, o: redirect,
    )
    data = result.partitions[0]
    return data.error_code, data.records_size, data.high_watermark, data.preferred_read_replica


def test_a_follower_serves_a_consumer_up_to_the_high_watermark_it_knows(tmp_path: Path) -> None:
    log = _follower_log(tmp_path, high_watermark=5)
    error, size, hw, _ = _read(log, 0)
    assert (error, hw) == (ErrorCode.none, 5)
    assert size == len(_batch(5))  # the first batch only: the second is not committed
    assert _read(log, 5)[:2] == (ErrorCode.none, 0)  # caught up: nothing yet, no error


def test_a_follower_behind_an_offset_the_leader_made_visible_answers_not_available(
    tmp_path: Path,
) -> None:
    log = _follower_log(tmp_path, high_watermark=5)
    assert _read(log, 7)[0] == ErrorCode.offset_not_available
    assert _read(log, 10)[0] == ErrorCode.offset_not_available
    # The same offsets on a leader whose HW lags (a new leader) read nothing, as Kafka's.
    assert _read(log, 7, follower=False)[:2] == (ErrorCode.none, 0)


def test_an_offset_beyond_the_followers_log_is_out_of_range_with_its_bounds(
    tmp_path: Path,
) -> None:
    """librdkafka goes back to the leader on OFFSET_OUT_OF_RANGE from a follower when
    its position is above the high watermark the follower reports."""
    log = _follower_log(tmp_path, high_watermark=5)
    error, size, hw, _ = _read(log, 12)
    assert (error, size, hw) == (ErrorCode.offset_out_of_range, 0, 5)


def test_a_leader_that_redirects_reads_nothing_and_answers_at_once(tmp_path: Path) -> None:
    log = _follower_log(tmp_path, high_watermark=10)
    result = read_partitions(
        [PartitionFetch(ZERO_UUID, "t", 0, 0, partition_max_bytes=1 << 20)],
        lambda t, p: log,
        max_bytes=1 << 20,
        isolation=Isolation.HIGH_WATERMARK,
        redirect=lambda t, p, o: 3,
    )
    data = result.partitions[0]
    assert (data.preferred_read_replica, data.records_size, data.high_watermark) == (3, 0, 10)
    assert result.redirected and not result.has_error
