"""A follower whose log diverged from the new leader's truncates and then matches it.

Pure logic, no sockets: the leader's fetch path (session, planner) answers a
follower fetch from real ``Log`` objects, and the follower's fetch state
decides what to do with the answer, applied to the follower's real ``Log``,
exactly as over the wire.
"""

from __future__ import annotations

from pathlib import Path

from headwater.cluster.follower_decisions import (
    AppendRecords,
    Backoff,
    TruncateTo,
    apply_decision,
)
from headwater.cluster.follower_fetch_state import Idle
from headwater.log.handles import FileHandleCache
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchResponseData,
    PartitionData,
    PartitionFetch,
)
from tests.unit.follower_harness import (
    LocalLeader,
    follower_replica,
    new_log,
    new_state,
    round_trip,
    values,
    write_at_epoch,
)


def test_diverged_follower_truncates_to_the_leaders_epoch_end_then_copies_it(
    tmp_path: Path,
) -> None:
    handles = FileHandleCache(32)
    leader = new_log(tmp_path, "leader", handles)
    follower = new_log(tmp_path, "follower", handles)
    for plog in (leader, follower):
        write_at_epoch(plog, 0, "shared", 5)
    # The follower once led at epoch 1 and wrote records nobody else got;
    # the leader was elected at epoch 2 without them and wrote its own.
    write_at_epoch(follower, 1, "lost", 4)
    write_at_epoch(leader, 2, "new", 3)
    assert follower.log_end_offset == 9 and leader.log_end_offset == 8

    state = new_state(follower_replica(follower, 2))
    local = LocalLeader({("t", 0): leader})

    (decision,) = round_trip(state, local).decisions
    assert isinstance(decision, TruncateTo) and decision.offset == 5
    assert follower.log_end_offset == 5
    assert follower.latest_epoch == 0

    (decision,) = round_trip(state, local).decisions
    assert isinstance(decision, AppendRecords)
    assert follower.log_end_offset == leader.log_end_offset == 8
    assert values(follower) == values(leader)
    assert not any(v.startswith(b"lost") for v in values(follower))
    assert follower.end_offset_for_epoch(2) == leader.end_offset_for_epoch(2)
    assert follower.high_watermark == leader.high_watermark


def test_a_follower_in_agreement_is_not_told_to_truncate(tmp_path: Path) -> None:
    leader = new_log(tmp_path, "leader")
    follower = new_log(tmp_path, "follower")
    for plog in (leader, follower):
        write_at_epoch(plog, 0, "a", 3)
    write_at_epoch(leader, 3, "b", 2)
    state = new_state(follower_replica(follower, 3))
    request = state.next_request(0.0)
    assert not isinstance(request, Idle)
    (answer,) = LocalLeader({("t", 0): leader}).answer(request).partitions
    assert answer.diverging_epoch == -1
    assert answer.records_size > 0


def test_a_new_leader_still_applying_its_state_is_asked_again_soon(tmp_path: Path) -> None:
    """Failover (issue 20): the follower heard of the new leader before the leader did
    and got NOT_LEADER_OR_FOLLOWER / UNKNOWN_LEADER_EPOCH. It retries after 50 ms a
    few times, then falls back to replica.fetch.backoff.ms; other errors back off."""
    follower = new_log(tmp_path, "f")
    state = new_state(follower_replica(follower, 2))
    now = 0.0

    def delay_after(error: int) -> float:
        request = state.next_request(now)
        assert not isinstance(request, Idle)
        response = FetchResponseData(
            session_id=0, partitions=[PartitionData(ZERO_UUID, "t", 0, error_code=error)]
        )
        (decision,) = state.on_response(response, now).decisions
        assert isinstance(decision, Backoff)
        return decision.until - now

    for error in [6, 75] * 5:  # NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH
        assert delay_after(error) <= 0.051
        now += 0.06
    assert delay_after(6) > 0.5  # ten quick retries spent: the configured backoff
    now += 1.1
    request = state.next_request(now)
    assert not isinstance(request, Idle)
    ok = FetchResponseData(
        session_id=0, partitions=[PartitionData(ZERO_UUID, "t", 0, high_watermark=0)]
    )
    state.on_response(ok, now)
    assert delay_after(75) <= 0.051  # an answer without error renews them
    now += 0.06
    assert delay_after(74) > 0.5  # FENCED_LEADER_EPOCH: the leader is ahead of us


def test_a_follower_that_led_an_epoch_without_writing_fetches_on_after_truncating(
    tmp_path: Path,
) -> None:
    """Fault campaign (issue 20): the follower led epoch 1 and wrote nothing in it;
    the new leader's epoch 2 starts where both logs end. The divergence answer cuts
    only the follower's epoch history (a truncation at its log end): its next request
    must name its real last epoch, or it gets the same answer forever and never
    fetches again (it stayed out of the ISR of __consumer_offsets-2 for good)."""
    handles = FileHandleCache(32)
    leader = new_log(tmp_path, "leader", handles)
    follower = new_log(tmp_path, "follower", handles)
    for plog in (leader, follower):
        write_at_epoch(plog, 0, "shared", 5)
    follower.assign_leader_epoch(1)  # elected at epoch 1, wrote nothing
    write_at_epoch(leader, 2, "new", 3)
    assert follower.latest_epoch == 1

    state = new_state(follower_replica(follower, 2))
    local = LocalLeader({("t", 0): leader})

    (decision,) = round_trip(state, local).decisions
    assert isinstance(decision, TruncateTo) and decision.offset == 5
    assert follower.log_end_offset == 5 and follower.latest_epoch == 0

    request = state.next_request(0.0)
    assert not isinstance(request, Idle)
    sent: list[PartitionFetch] = request.partitions
    assert [p.last_fetched_epoch for p in sent] == [0]  # its real last epoch
    for decision in state.on_response(local.answer(request), 0.0).decisions:
        apply_decision(decision, 0)
    assert follower.log_end_offset == leader.log_end_offset == 8
    assert values(follower) == values(leader)
