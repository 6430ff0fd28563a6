"""An idle follower's round trip costs the same at 100 and at 1,000 followed partitions.

Issue 33 item 2: a broker following thousands of idle partitions spent most of
its idle CPU rebuilding and comparing its whole fetch request on every round
trip (twice a second per leader). The follower's fetch state now keeps what the
session holds and touches only the partitions that changed. Work is counted
(partitions visited, log fields read, partitions named), never timed.
"""

from __future__ import annotations

from typing import cast

import pytest

from headwater.cluster.follower_fetch_state import FetcherConfig, FollowerFetchState, Idle
from headwater.cluster.partition import PartitionReplica, ReplicaAssignment
from headwater.log.log import Log
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchRequestData,
    FetchResponseData,
    PartitionData,
)

LEADER, FOLLOWER = 0, 1
SESSION = 42


class StillLog:
    """A follower log that never changes, counting how often its end is read."""

    def __init__(self) -> None:
        self.reads = 0
        self.partition_leader_epoch = 0
        self.log_start_offset = 0
        self.latest_epoch = 0
        self.high_watermark = 5

    @property
    def log_end_offset(self) -> int:
        self.reads += 1
        return 5


def followed(n: int) -> tuple[FollowerFetchState, list[StillLog]]:
    state = FollowerFetchState(FOLLOWER, LEADER, FetcherConfig())
    logs = [StillLog() for _ in range(n)]
    for i, plog in enumerate(logs):
        replica = PartitionReplica("t", i, cast(Log, plog), local_id=FOLLOWER)
        replica.apply_state(
            ReplicaAssignment((LEADER, FOLLOWER), LEADER, 3, (LEADER, FOLLOWER), 0), now_ms=0
        )
        state.add(replica)
    return state, logs


def caught_up(p: tuple[str, int]) -> PartitionData:
    return PartitionData(ZERO_UUID, p[0], p[1], high_watermark=5, log_start_offset=0)


def request(state: FollowerFetchState) -> FetchRequestData:
    req = state.next_request(0.0)
    assert not isinstance(req, Idle)
    return req


def idle_round_trip_cost(n: int) -> tuple[int, int, int]:
    """(partitions visited, log ends read, partitions named) by one idle round trip,
    after the full request that opens the session."""
    state, logs = followed(n)
    full = request(state)
    assert len(full.partitions) == n and full.session_epoch == 0
    state.on_response(
        FetchResponseData(
            session_id=SESSION,
            partitions=[caught_up((p.topic, p.partition)) for p in full.partitions],
        ),
        0.0,
    )
    for _ in range(3):  # settle: a few idle round trips
        request(state)
        state.on_response(FetchResponseData(session_id=SESSION), 0.0)
    visited, reads = state.visited, sum(log.reads for log in logs)
    idle = request(state)
    state.on_response(FetchResponseData(session_id=SESSION), 0.0)
    assert idle.session_id == SESSION and idle.session_epoch > 1
    assert idle.forgotten == []
    return (
        state.visited - visited,
        sum(log.reads for log in logs) - reads,
        len(idle.partitions),
    )


def test_an_idle_round_trip_does_not_grow_with_the_partitions_followed() -> None:
    small, large = idle_round_trip_cost(100), idle_round_trip_cost(1_000)
    assert small == large == (0, 0, 0)


@pytest.mark.parametrize("n", [100, 1_000])
def test_one_changed_partition_costs_one_visit_and_is_the_only_one_sent(n: int) -> None:
    state, _logs = followed(n)
    full = request(state)
    state.on_response(
        FetchResponseData(
            session_id=SESSION,
            partitions=[caught_up((p.topic, p.partition)) for p in full.partitions],
        ),
        0.0,
    )
    request(state)
    state.on_response(FetchResponseData(session_id=SESSION), 0.0)
    visited = state.visited
    state.log_changed(("t", 7))  # its log moved: the one request rebuilt
    req = request(state)
    assert state.visited - visited == 1
    # Same fetch state (the fake log did not really move): nothing to resend.
    assert req.partitions == []
    state.remove(("t", 7))
    req = request(state)
    assert [(f.topic, f.partition) for f in req.forgotten] == [("t", 7)]
    assert state.visited - visited == 2
