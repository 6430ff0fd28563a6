"""The follower's fetch state, driven against a leader's fetch path without sockets or ZooKeeper.

Each test runs real ``Log`` objects on both sides: ``FollowerFetchState``
builds the request, ``LocalLeader`` answers it as the broker's fetch handler
would (KIP-227 session, planner, divergence rule), and the state's decisions
are applied to the follower's log.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from headwater.cluster.follower_decisions import (
    AppendRecords,
    Backoff,
    StartOver,
    TruncateTo,
    apply_decision,
)
from headwater.cluster.follower_fetch_state import FetcherConfig, FollowerFetchState, Idle
from headwater.cluster.inter_broker import InterBrokerConnector
from headwater.cluster.partition import PartitionReplica, ReplicaAssignment
from headwater.cluster.replica_fetcher import ReplicaFetcher
from headwater.cluster.replication_quota import (
    FOLLOWER_REPLICAS,
    ReplicationQuotaConfig,
    ReplicationThrottles,
)
from headwater.log.divergence import diverging_epoch
from headwater.log.errors import OffsetOutOfRangeError
from headwater.log.log import Log
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_types import FetchRequestData, FetchResponseData
from tests.unit.follower_harness import (
    FOLLOWER,
    LEADER,
    LocalLeader,
    follower_replica,
    new_log,
    new_state,
    round_trip,
    values,
    write_at_epoch,
)

KEY = ("t", 0)


def request_of(state_request: FetchRequestData | Idle) -> FetchRequestData:
    assert isinstance(state_request, FetchRequestData)
    return state_request


def leader_replica(plog: Log, epoch: int, isr: tuple[int, ...]) -> PartitionReplica:
    replica = PartitionReplica("t", 0, plog, local_id=LEADER)
    replica.apply_state(ReplicaAssignment((LEADER, FOLLOWER), LEADER, epoch, isr, 0), now_ms=0)
    return replica


def test_a_follower_catches_up_and_rejoins_the_isr(tmp_path: Path) -> None:
    leader = new_log(tmp_path, "leader")
    follower = new_log(tmp_path, "follower")
    partition = leader_replica(leader, 0, (LEADER,))  # the follower is out of the ISR
    write_at_epoch(leader, 0, "a", 6, per_batch=3)
    state = new_state(
        follower_replica(follower, 0), config=FetcherConfig(max_bytes=1)
    )  # one batch per fetch
    local = LocalLeader({KEY: leader})

    rounds = 0
    while follower.log_end_offset < leader.log_end_offset:
        (decision,) = round_trip(state, local).decisions
        assert isinstance(decision, AppendRecords)
        rounds += 1
        assert rounds <= 6
    assert rounds == 6 and values(follower) == values(leader)
    # The next fetch tells the leader the follower has everything: it rejoins.
    round_trip(state, local)
    partition.update_follower(FOLLOWER, local.follower_offsets[KEY], now_ms=0)
    assert partition.isr_to_expand(FOLLOWER) == (LEADER, FOLLOWER)
    partition.isr = (LEADER, FOLLOWER)
    assert partition.maybe_increment_high_watermark()
    round_trip(state, local)
    assert follower.high_watermark == leader.high_watermark == 18


def test_a_diverged_follower_cuts_to_the_shorter_end_of_the_shared_epoch(tmp_path: Path) -> None:
    """The leader names (epoch 0, its end 5); the follower's own epoch 0 ended at 3."""
    leader = new_log(tmp_path, "leader")
    follower = new_log(tmp_path, "follower")
    for plog in (leader, follower):
        write_at_epoch(plog, 0, "shared", 3)
    write_at_epoch(leader, 0, "leaders", 2)
    write_at_epoch(follower, 1, "lost", 3)
    leader.assign_leader_epoch(2)
    write_at_epoch(leader, 2, "new", 2)
    state = new_state(follower_replica(follower, 2))
    local = LocalLeader({KEY: leader})

    (decision,) = round_trip(state, local).decisions
    assert isinstance(decision, TruncateTo) and decision.offset == 3
    assert KEY not in local.follower_offsets  # a divergence says nothing of the follower
    # Rejoining: the next request asks from the truncation point with its real last epoch.
    request = request_of(state.next_request(0.0))
    (sent,) = request.partitions
    assert (sent.fetch_offset, sent.last_fetched_epoch) == (3, 0)
    for decision in state.on_response(local.answer(request), 0.0).decisions:
        apply_decision(decision, 0)
    assert values(follower) == values(leader)
    assert follower.end_offset_for_epoch(0) == leader.end_offset_for_epoch(0) == (0, 5)
    assert local.follower_offsets[KEY] == 3


def test_a_follower_behind_the_leaders_log_start_starts_over_there(tmp_path: Path) -> None:
    leader = new_log(tmp_path, "leader")
    follower = new_log(tmp_path, "follower")
    for plog in (leader, follower):
        write_at_epoch(plog, 0, "a", 3)
    write_at_epoch(leader, 0, "b", 7)
    leader.update_high_watermark(10)
    assert leader.delete_records(8) == 8  # retention moved past the follower's end
    state = new_state(follower_replica(follower, 0))
    local = LocalLeader({KEY: leader})

    request = request_of(state.next_request(0.0))
    (answer,) = local.answer(request).partitions
    assert answer.error_code == ErrorCode.offset_out_of_range
    assert answer.log_start_offset == 8
    (decision,) = state.on_response(FetchResponseData(partitions=[answer]), 0.0).decisions
    assert decision == StartOver(state.partitions[KEY], 8)
    apply_decision(decision, 0)
    assert (follower.log_start_offset, follower.log_end_offset) == (8, 8)

    round_trip(state, local)
    assert follower.log_end_offset == 10
    assert values(follower) == values(leader)


def test_a_leader_that_cannot_place_the_last_fetched_epoch_answers_out_of_range(
    tmp_path: Path,
) -> None:
    """The divergence rule's hard case (issue 18). The leader's epoch history knows
    nothing past epoch 0; the follower's last records are of epoch 1, which the
    leader never had. Answering "no divergence" (the old planner's (-1, -1)) let
    the fetch handler take the follower's fetch offset as progress, although its
    records there are not the leader's: ISR and high watermark over lost data,
    and a follower stuck fetching nothing. Kafka's rule, the one kept, answers
    OFFSET_OUT_OF_RANGE: the leader counts nothing, and the follower falls back
    to its high watermark and copies the leader from there."""
    leader = new_log(tmp_path, "leader")
    follower = new_log(tmp_path, "follower")
    for plog in (leader, follower):
        write_at_epoch(plog, 0, "shared", 3)
    write_at_epoch(leader, 0, "leaders", 3)
    write_at_epoch(follower, 1, "lost", 2)
    leader.update_high_watermark(6)
    follower.update_high_watermark(3)
    assert leader.end_offset_for_epoch(1) == (-1, -1)  # the history cannot answer
    # What the follower holds below its fetch offset is not the leader's log:
    # no rule may let the leader count that offset as the follower's progress.
    assert values(follower)[:5] != values(leader)[:5]
    with pytest.raises(OffsetOutOfRangeError):
        diverging_epoch(leader, follower.log_end_offset, follower.latest_epoch)

    state = new_state(follower_replica(follower, 0))
    local = LocalLeader({KEY: leader})
    (decision,) = round_trip(state, local).decisions
    assert KEY not in local.follower_offsets
    assert isinstance(decision, TruncateTo) and decision.offset == 3
    (decision,) = round_trip(state, local).decisions
    assert isinstance(decision, AppendRecords)
    assert values(follower) == values(leader)
    assert local.follower_offsets[KEY] == 3
    round_trip(state, local)
    assert local.follower_offsets[KEY] == leader.log_end_offset == 6


def test_a_follower_at_its_high_watermark_that_the_leader_cannot_place_backs_off(
    tmp_path: Path,
) -> None:
    leader = new_log(tmp_path, "leader")
    follower = new_log(tmp_path, "follower")
    write_at_epoch(leader, 0, "a", 4)
    write_at_epoch(follower, 1, "b", 2)
    leader.update_high_watermark(4)
    follower.update_high_watermark(2)
    state = new_state(follower_replica(follower, 0))
    (decision,) = round_trip(state, LocalLeader({KEY: leader}), now=5.0).decisions
    assert isinstance(decision, Backoff) and decision.until == pytest.approx(6.0)
    assert follower.log_end_offset == 2  # nothing acknowledged is dropped
    # The next request takes it out of the session; then nothing is due until 6.0.
    request = request_of(state.next_request(5.5))
    assert request.partitions == [] and [f.partition for f in request.forgotten] == [0]
    idle = state.next_request(5.6)
    assert isinstance(idle, Idle) and idle.wait_s == pytest.approx(0.4)


def test_a_partition_removed_while_its_fetch_is_out_is_left_alone(tmp_path: Path) -> None:
    leader = new_log(tmp_path, "leader")
    follower = new_log(tmp_path, "follower")
    write_at_epoch(leader, 0, "a", 3)
    replica = follower_replica(follower, 0)
    state = new_state(replica)
    local = LocalLeader({KEY: leader})
    request = request_of(state.next_request(0.0))
    state.remove(KEY)
    assert state.on_response(local.answer(request), 0.0).decisions == []
    assert follower.log_end_offset == 0
    # Re-added, and its log changed under the next fetch: that answer is stale too.
    state.add(replica)
    request = request_of(state.next_request(0.0))
    follower.truncate_fully_and_start_at(1)
    assert state.on_response(local.answer(request), 0.0).decisions == []
    (decision,) = round_trip(state, local).decisions
    assert isinstance(decision, AppendRecords)
    assert follower.log_end_offset == 3


def test_the_fetch_session_epoch_advances_and_resets_on_errors(tmp_path: Path) -> None:
    """KIP-227 as a follower runs it: (0, 0) full, then (id, 1), (id, 2)... incremental
    requests that name nothing while nothing changed; a failed round trip makes the
    next request full on the same id, and an unknown session starts over at (0, 0)."""
    leader = new_log(tmp_path, "leader")
    follower = new_log(tmp_path, "follower")
    write_at_epoch(leader, 0, "a", 2)
    state = new_state(follower_replica(follower, 0))
    local = LocalLeader({KEY: leader})

    round_trip(state, local)
    first = local.requests[-1]
    assert (first.session_id, first.session_epoch, first.replica_id) == (0, 0, FOLLOWER)
    session = state.session.session_id
    assert session > 0
    round_trip(state, local)  # the follower's new log end is news
    assert (local.requests[-1].session_id, local.requests[-1].session_epoch) == (session, 1)
    assert [p.fetch_offset for p in local.requests[-1].partitions] == [2]
    round_trip(state, local)
    idle = local.requests[-1]
    assert (idle.session_id, idle.session_epoch, idle.partitions) == (session, 2, [])

    state.on_error(TimeoutError("lost"))
    round_trip(state, local)
    full = local.requests[-1]
    assert (full.session_id, full.session_epoch) == (session, 0)
    assert [p.fetch_offset for p in full.partitions] == [2]
    assert state.session.session_id not in (0, session)  # the leader made a new one

    request = request_of(state.next_request(0.0))
    outcome = state.on_response(
        FetchResponseData(error_code=ErrorCode.fetch_session_id_not_found), 0.0
    )
    assert outcome.pause_s == pytest.approx(1.0) and outcome.decisions == []
    assert request.session_epoch > 0
    request = request_of(state.next_request(0.0))
    assert (request.session_id, request.session_epoch) == (0, 0)


def test_the_replica_fetcher_loop_copies_through_an_endpoint(tmp_path: Path) -> None:
    """The asyncio task is only the loop: state -> endpoint -> state -> log."""
    leader = new_log(tmp_path, "leader")
    follower = new_log(tmp_path, "follower")
    write_at_epoch(leader, 0, "a", 5)
    leader.update_high_watermark(5)
    local = LocalLeader({KEY: leader})

    async def scenario() -> int:
        fetcher = ReplicaFetcher(
            FOLLOWER,
            LEADER,
            InterBrokerConnector(FOLLOWER, lambda _b, _l: None),
            FetcherConfig(max_wait_ms=0),
            endpoint=local,
        )
        fetcher.add(follower_replica(follower, 0))
        fetcher.start()
        try:
            deadline = time.monotonic() + 10
            while follower.high_watermark < 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        finally:
            await fetcher.stop()
        return fetcher.fetches

    assert asyncio.run(scenario()) >= 1
    assert values(follower) == values(leader)
    assert follower.high_watermark == 5
    assert local.closed == ["replica fetcher stopped"]


def test_over_the_follower_budget_throttled_replicas_outside_the_isr_sit_out(
    tmp_path: Path,
) -> None:
    """KIP-73, follower side: the bytes fetched for throttled replicas use the budget;
    over it, those outside the ISR are left out of the next fetch, the rest fetch on."""
    throttled = {FOLLOWER_REPLICAS: "*"}
    throttles = ReplicationThrottles(
        FOLLOWER,
        lambda topic: throttled if topic == "slow" else {},
        ReplicationQuotaConfig(follower_rate=10.0),
    )
    leader_logs = {("slow", 0): new_log(tmp_path, "ls"), ("t", 0): new_log(tmp_path, "lt")}
    for plog in leader_logs.values():
        write_at_epoch(plog, 0, "x", 4, per_batch=50)
    slow = follower_replica(new_log(tmp_path, "fs"), 0, topic="slow")
    slow.isr = (LEADER,)  # catching up, outside the ISR
    state = FollowerFetchState(FOLLOWER, LEADER, FetcherConfig(), throttles=throttles)
    state.add(slow)
    state.add(follower_replica(new_log(tmp_path, "ft"), 0))
    local = LocalLeader(leader_logs)

    round_trip(state, local, now=100.0)  # both copied, the throttled bytes recorded
    assert throttles.follower.exceeded(100.0 * 1000)
    write_at_epoch(leader_logs[("slow", 0)], 0, "y", 1)
    write_at_epoch(leader_logs[("t", 0)], 0, "y", 1)
    request = request_of(state.next_request(100.1))
    assert [p.topic for p in request.partitions] == ["t"]
    assert [f.topic for f in request.forgotten] == ["slow"]
    assert state.until_next_retry(100.1) == pytest.approx(1.0)
