"""The classic rebalance protocol, driven directly with a fake clock."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.coordinator.state_log import InMemoryStateLog
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.group.membership import GroupState
from headwater.group.offsets import OffsetCommitEntry
from headwater.group.results import JoinResult, SyncResult

SESSION_MS = 10_000
REBALANCE_MS = 30_000
GROUP = "g"


def make_coordinator(
    *, initial_delay_ms: int = 0, max_size: int = 2**31 - 1, log: InMemoryStateLog | None = None
) -> GroupCoordinator:
    counter = itertools.count(1)
    return GroupCoordinator(
        log or InMemoryStateLog(),
        lambda topic, partition: topic.startswith("t") and 0 <= partition < 4,
        now_ms=0,
        config=GroupConfig(initial_rebalance_delay_ms=initial_delay_ms, max_size=max_size),
        member_id_factory=lambda prefix: f"{prefix}-{next(counter)}",
    )


def join(
    coordinator: GroupCoordinator,
    now_ms: int,
    member_id: str = "",
    *,
    client_id: str = "c",
    instance_id: str | None = None,
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),),
    require_known_member_id: bool = True,
    supports_skip_assignment: bool = False,
    session_timeout_ms: int = SESSION_MS,
) -> Pending[JoinResult]:
    return coordinator.join_group(
        now_ms,
        group_id=GROUP,
        member_id=member_id,
        group_instance_id=instance_id,
        client_id=client_id,
        client_host="/127.0.0.1",
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=REBALANCE_MS,
        protocol_type="consumer",
        protocols=protocols,
        require_known_member_id=require_known_member_id,
        supports_skip_assignment=supports_skip_assignment,
    )


def new_member(coordinator: GroupCoordinator, now_ms: int, client_id: str) -> str:
    """The MEMBER_ID_REQUIRED step: returns the id the member must rejoin with."""
    first = join(coordinator, now_ms, client_id=client_id)
    assert first.done
    assert first.result().error is ErrorCode.member_id_required
    return first.result().member_id


def sync(
    coordinator: GroupCoordinator,
    now_ms: int,
    result: JoinResult,
    assignments: dict[str, bytes] | None = None,
    instance_id: str | None = None,
) -> Pending[SyncResult]:
    return coordinator.sync_group(
        now_ms,
        group_id=GROUP,
        generation_id=result.generation_id,
        member_id=result.member_id,
        group_instance_id=instance_id,
        assignments=list((assignments or {}).items()),
    )


def heartbeat(coordinator: GroupCoordinator, now_ms: int, result: JoinResult) -> ErrorCode:
    return coordinator.heartbeat(
        now_ms, group_id=GROUP, generation_id=result.generation_id, member_id=result.member_id
    )


def stable_pair(coordinator: GroupCoordinator) -> tuple[JoinResult, JoinResult]:
    """Two members in generation 1, A the leader, assignments synced."""
    a_id = new_member(coordinator, 0, "a")
    b_id = new_member(coordinator, 0, "b")
    a = join(coordinator, 0, a_id)
    b = join(coordinator, 0, b_id)
    assert a.done and b.done
    leader, follower = a.result(), b.result()
    follower_sync = sync(coordinator, 0, follower)
    assert not follower_sync.done
    sync(coordinator, 0, leader, {leader.member_id: b"A", follower.member_id: b"B"})
    assert follower_sync.result().assignment == b"B"
    return leader, follower


def test_two_members_join_and_the_leader_gets_both_metadata() -> None:
    coordinator = make_coordinator()
    a_id = new_member(coordinator, 0, "a")
    b_id = new_member(coordinator, 0, "b")
    a = join(coordinator, 0, a_id, protocols=(("range", b"A-meta"),))
    assert not a.done  # b was told its id and is expected back
    b = join(coordinator, 0, b_id, protocols=(("range", b"B-meta"),))
    leader, follower = a.result(), b.result()
    assert leader.error is ErrorCode.none and follower.error is ErrorCode.none
    assert leader.generation_id == follower.generation_id == 1
    assert leader.leader_id == follower.leader_id == a_id
    assert leader.protocol_name == "range"
    assert {(m.member_id, m.metadata) for m in leader.members} == {
        (a_id, b"A-meta"),
        (b_id, b"B-meta"),
    }
    assert follower.members == ()

    follower_sync = sync(coordinator, 0, follower)
    assert not follower_sync.done  # waits for the leader's assignment
    leader_sync = sync(coordinator, 0, leader, {a_id: b"for-a", b_id: b"for-b"})
    assert leader_sync.result() == SyncResult(ErrorCode.none, b"for-a", "consumer", "range")
    assert follower_sync.result().assignment == b"for-b"
    assert coordinator.describe_group(GROUP).state == "Stable"


def test_initial_rebalance_delay_gathers_members_into_one_generation() -> None:
    coordinator = make_coordinator(initial_delay_ms=3000)
    a = join(coordinator, 0, require_known_member_id=False, client_id="a")
    b = join(coordinator, 1000, require_known_member_id=False, client_id="b")
    coordinator.tick(2999)
    assert not a.done and not b.done
    coordinator.tick(3000)  # b arrived during the delay: wait one more delay
    assert not a.done
    coordinator.tick(6000)
    assert a.result().generation_id == b.result().generation_id == 1
    assert len(a.result().members) == 2


def test_third_member_causes_rebalance_in_progress_then_a_new_generation() -> None:
    coordinator = make_coordinator()
    leader, follower = stable_pair(coordinator)
    c_id = new_member(coordinator, 100, "c")
    c = join(coordinator, 100, c_id)
    assert not c.done
    assert heartbeat(coordinator, 200, leader) is ErrorCode.rebalance_in_progress
    assert heartbeat(coordinator, 200, follower) is ErrorCode.rebalance_in_progress
    # A sync of the old generation is told the same.
    assert sync(coordinator, 200, follower).result().error is ErrorCode.rebalance_in_progress

    a2 = join(coordinator, 300, leader.member_id)
    assert not a2.done
    b2 = join(coordinator, 300, follower.member_id)
    results = [a2.result(), b2.result(), c.result()]
    assert {r.generation_id for r in results} == {2}
    assert {r.leader_id for r in results} == {leader.member_id}
    assert len(a2.result().members) == 3
    # The old generation is now illegal.
    assert heartbeat(coordinator, 400, leader) is ErrorCode.illegal_generation


def test_member_leaving_triggers_a_rebalance_of_the_rest() -> None:
    coordinator = make_coordinator()
    leader, follower = stable_pair(coordinator)
    result = coordinator.leave_group(100, group_id=GROUP, members=[(leader.member_id, None)])
    assert result.members[0].error is ErrorCode.none
    assert coordinator.describe_group(GROUP).state == "PreparingRebalance"
    assert heartbeat(coordinator, 200, follower) is ErrorCode.rebalance_in_progress
    rejoin = join(coordinator, 200, follower.member_id)
    assert rejoin.result().generation_id == 2
    assert rejoin.result().leader_id == follower.member_id  # leadership moved
    assert [m.member_id for m in rejoin.result().members] == [follower.member_id]


def test_last_member_leaving_empties_the_group() -> None:
    coordinator = make_coordinator()
    a_id = new_member(coordinator, 0, "a")
    a = join(coordinator, 0, a_id).result()
    sync(coordinator, 0, a, {a_id: b"x"})
    coordinator.leave_group(10, group_id=GROUP, members=[(a_id, None)])
    description = coordinator.describe_group(GROUP)
    assert description.state == "Empty"
    assert description.generation_id == 2


def test_session_timeout_expels_a_silent_member_within_one_rebalance() -> None:
    coordinator = make_coordinator()
    leader, follower = stable_pair(coordinator)
    now = 0
    # The leader heartbeats every 3 s; the follower goes silent at t=0.
    while now < SESSION_MS:
        now += 3000
        coordinator.tick(now)
        if now < SESSION_MS:
            assert heartbeat(coordinator, now, leader) is ErrorCode.none
    # By session.timeout.ms the follower is gone and a rebalance has begun.
    assert coordinator.describe_group(GROUP).state == "PreparingRebalance"
    assert heartbeat(coordinator, now, follower) is ErrorCode.unknown_member_id
    assert heartbeat(coordinator, now, leader) is ErrorCode.rebalance_in_progress
    rejoin = join(coordinator, now, leader.member_id)
    # Only the leader is left, so one rebalance completes it at once.
    assert rejoin.result().generation_id == 2
    assert [m.member_id for m in rejoin.result().members] == [leader.member_id]


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    coordinator = make_coordinator()
    leader, follower = stable_pair(coordinator)
    c = join(coordinator, 0, new_member(coordinator, 0, "c"))
    a2 = join(coordinator, 0, leader.member_id)
    # The follower keeps heartbeating but never rejoins.
    for now in range(3000, REBALANCE_MS, 3000):
        assert heartbeat(coordinator, now, follower) is ErrorCode.rebalance_in_progress
        coordinator.tick(now)
    assert not a2.done
    coordinator.tick(REBALANCE_MS)
    assert a2.result().generation_id == 2
    assert {m.member_id for m in a2.result().members} == {leader.member_id, c.result().member_id}
    assert heartbeat(coordinator, REBALANCE_MS, follower) is ErrorCode.unknown_member_id


def test_leader_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    coordinator = make_coordinator()
    a_id = new_member(coordinator, 0, "a")
    b_id = new_member(coordinator, 0, "b")
    join(coordinator, 0, a_id)
    follower = join(coordinator, 0, b_id).result()
    follower_sync = sync(coordinator, 0, follower)
    coordinator.tick(REBALANCE_MS)
    assert follower_sync.result().error is ErrorCode.rebalance_in_progress
    rejoin = join(coordinator, REBALANCE_MS, b_id)
    assert rejoin.result().leader_id == b_id
    assert rejoin.result().generation_id == 2


def test_member_id_required_round_trip() -> None:
    coordinator = make_coordinator()
    first = join(coordinator, 0, client_id="consumer-1")
    assert first.result().error is ErrorCode.member_id_required
    member_id = first.result().member_id
    assert member_id.startswith("consumer-1-")
    assert coordinator.describe_group(GROUP).members == ()  # not a member yet
    second = join(coordinator, 10, member_id, client_id="consumer-1")
    assert second.result().error is ErrorCode.none
    assert second.result().member_id == member_id
    assert second.result().leader_id == member_id


def test_unclaimed_member_id_expires_after_the_session_timeout() -> None:
    coordinator = make_coordinator()
    member_id = new_member(coordinator, 0, "a")
    coordinator.tick(SESSION_MS)
    assert join(coordinator, SESSION_MS, member_id).result().error is (ErrorCode.unknown_member_id)


def test_old_join_versions_get_a_member_id_without_the_extra_round_trip() -> None:
    coordinator = make_coordinator()
    result = join(coordinator, 0, require_known_member_id=False).result()
    assert result.error is ErrorCode.none
    assert result.member_id


def test_static_member_restart_keeps_generation_and_assignment() -> None:
    coordinator = make_coordinator(initial_delay_ms=100)
    a = join(coordinator, 0, instance_id="inst-a", client_id="a")
    b = join(coordinator, 0, instance_id="inst-b", client_id="b")
    coordinator.tick(100)  # b joined during the delay, which therefore runs once more
    coordinator.tick(200)
    leader, follower = a.result(), b.result()
    assert leader.generation_id == 1
    sync(coordinator, 0, follower, instance_id="inst-b")
    sync(
        coordinator,
        0,
        leader,
        {leader.member_id: b"A", follower.member_id: b"B"},
        instance_id="inst-a",
    )

    # b restarts: empty member id, same instance id, same metadata.
    restarted = join(coordinator, 500, instance_id="inst-b", client_id="b").result()
    assert restarted.error is ErrorCode.none
    assert restarted.member_id != follower.member_id
    assert restarted.generation_id == 1  # no rebalance
    assert restarted.leader_id == leader.member_id
    assert coordinator.describe_group(GROUP).state == "Stable"
    assignment = sync(coordinator, 500, restarted, instance_id="inst-b").result()
    assert assignment.assignment == b"B"
    assert heartbeat(coordinator, 600, leader) is ErrorCode.none


def test_stale_static_member_is_fenced() -> None:
    coordinator = make_coordinator()
    old = join(coordinator, 0, instance_id="inst", client_id="x").result()
    sync(coordinator, 0, old, {old.member_id: b"A"}, instance_id="inst")
    new = join(coordinator, 100, instance_id="inst", client_id="x").result()
    assert new.error is ErrorCode.none
    fenced = coordinator.heartbeat(
        200,
        group_id=GROUP,
        generation_id=old.generation_id,
        member_id=old.member_id,
        group_instance_id="inst",
    )
    assert fenced is ErrorCode.fenced_instance_id
    stale_commit = coordinator.commit_offsets(
        200,
        group_id=GROUP,
        generation_id=old.generation_id,
        member_id=old.member_id,
        group_instance_id="inst",
        entries=[_entry()],
        timestamp_ms=0,
    ).result()
    assert stale_commit == [ErrorCode.fenced_instance_id]


def test_static_leader_restart_with_skip_assignment() -> None:
    coordinator = make_coordinator()
    old = join(coordinator, 0, instance_id="inst", client_id="x").result()
    sync(coordinator, 0, old, {old.member_id: b"A"}, instance_id="inst")
    below_v9 = join(coordinator, 100, instance_id="inst").result()
    assert below_v9.leader_id == old.member_id  # acts as a follower
    assert below_v9.members == ()
    v9 = join(coordinator, 200, instance_id="inst", supports_skip_assignment=True).result()
    assert v9.skip_assignment
    assert v9.leader_id == v9.member_id
    assert [m.member_id for m in v9.members] == [v9.member_id]
    assert v9.generation_id == old.generation_id


def test_static_member_with_a_new_protocol_causes_a_rebalance() -> None:
    coordinator = make_coordinator()
    old = join(coordinator, 0, instance_id="inst", client_id="x").result()
    sync(coordinator, 0, old, {old.member_id: b"A"}, instance_id="inst")
    new = join(
        coordinator, 100, instance_id="inst", protocols=(("roundrobin", b""), ("range", b""))
    )
    assert new.result().generation_id == old.generation_id + 1
    assert new.result().protocol_name == "roundrobin"
    # A protocol the group's other members (here: its old self) lack is refused.
    refused = join(coordinator, 200, instance_id="inst", protocols=(("sticky", b""),))
    assert refused.result().error is ErrorCode.inconsistent_group_protocol


def test_static_member_leaves_by_instance_id() -> None:
    coordinator = make_coordinator()
    old = join(coordinator, 0, instance_id="inst", client_id="x").result()
    result = coordinator.leave_group(100, group_id=GROUP, members=[("", "inst"), ("", "nope")])
    assert [m.error for m in result.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert heartbeat(coordinator, 100, old) is ErrorCode.unknown_member_id


def test_protocol_selection_uses_what_all_members_support() -> None:
    coordinator = make_coordinator(initial_delay_ms=10)
    a = join(
        coordinator, 0, require_known_member_id=False, protocols=(("sticky", b""), ("range", b""))
    )
    b = join(coordinator, 0, require_known_member_id=False, protocols=(("range", b""),))
    coordinator.tick(10)
    coordinator.tick(20)
    assert a.result().protocol_name == b.result().protocol_name == "range"


def test_inconsistent_protocols_are_refused() -> None:
    coordinator = make_coordinator()
    join(coordinator, 0, require_known_member_id=False, protocols=(("range", b""),))
    other = join(coordinator, 0, require_known_member_id=False, protocols=(("sticky", b""),))
    assert other.result().error is ErrorCode.inconsistent_group_protocol
    no_protocols = coordinator.join_group(
        0,
        group_id="fresh",
        member_id="",
        protocol_type="consumer",
        protocols=[],
        session_timeout_ms=SESSION_MS,
    )
    assert no_protocols.result().error is ErrorCode.inconsistent_group_protocol


@pytest.mark.parametrize("session_timeout_ms", [5999, 1_800_001])
def test_session_timeout_outside_the_broker_limits_is_refused(session_timeout_ms: int) -> None:
    coordinator = make_coordinator()
    result = join(coordinator, 0, session_timeout_ms=session_timeout_ms).result()
    assert result.error is ErrorCode.invalid_session_timeout


def test_empty_group_id_is_invalid() -> None:
    coordinator = make_coordinator()
    result = coordinator.join_group(
        0,
        group_id="",
        member_id="",
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=SESSION_MS,
    )
    assert result.result().error is ErrorCode.invalid_group_id


def test_group_max_size_turns_away_extra_members() -> None:
    coordinator = make_coordinator(max_size=1)
    a = join(coordinator, 0, require_known_member_id=False).result()
    sync(coordinator, 0, a, {a.member_id: b""})
    extra = join(coordinator, 10, require_known_member_id=False).result()
    assert extra.error is ErrorCode.group_max_size_reached
    assert heartbeat(coordinator, 10, a) is ErrorCode.none  # the group is undisturbed


def test_full_group_still_takes_back_a_restarted_static_member() -> None:
    coordinator = make_coordinator(max_size=1)
    old = join(coordinator, 0, instance_id="inst").result()
    sync(coordinator, 0, old, {old.member_id: b"A"}, instance_id="inst")
    restarted = join(coordinator, 10, instance_id="inst").result()
    assert restarted.error is ErrorCode.none
    assert restarted.generation_id == old.generation_id


def test_unknown_member_and_group_errors() -> None:
    coordinator = make_coordinator()
    assert join(coordinator, 0, "ghost").result().error is ErrorCode.unknown_member_id
    ghost = JoinResult(ErrorCode.none, "ghost", generation_id=1)
    assert heartbeat(coordinator, 0, ghost) is ErrorCode.unknown_member_id
    assert sync(coordinator, 0, ghost).result().error is ErrorCode.unknown_member_id
    leader, _ = stable_pair(coordinator)
    wrong_generation = JoinResult(ErrorCode.none, leader.member_id, generation_id=7)
    assert sync(coordinator, 0, wrong_generation).result().error is ErrorCode.illegal_generation


def test_repeated_join_during_completing_rebalance_repeats_the_answer() -> None:
    coordinator = make_coordinator()
    a_id = new_member(coordinator, 0, "a")
    first = join(coordinator, 0, a_id).result()
    again = join(coordinator, 5, a_id).result()
    assert again == first


def test_follower_rejoining_a_stable_group_unchanged_does_not_rebalance() -> None:
    coordinator = make_coordinator()
    leader, follower = stable_pair(coordinator)
    again = join(coordinator, 10, follower.member_id).result()
    assert again.generation_id == follower.generation_id
    assert coordinator.describe_group(GROUP).state == "Stable"
    # The leader rejoining does rebalance (it may have seen new partitions).
    join(coordinator, 20, leader.member_id)
    assert coordinator.describe_group(GROUP).state == "PreparingRebalance"


def test_leaving_while_waiting_for_join_answers_unknown_member() -> None:
    coordinator = make_coordinator()
    leader, follower = stable_pair(coordinator)
    waiting = join(coordinator, 10, leader.member_id)
    assert not waiting.done
    coordinator.leave_group(20, group_id=GROUP, members=[(leader.member_id, None)])
    assert waiting.result().error is ErrorCode.unknown_member_id
    # The follower alone completes the rebalance.
    assert join(coordinator, 30, follower.member_id).result().generation_id == 2


def test_unclaimed_new_group_is_forgotten_on_tick() -> None:
    coordinator = make_coordinator()
    new_member(coordinator, 0, "a")
    coordinator.tick(SESSION_MS)  # the member id lapses, leaving a group that never ran
    assert coordinator.describe_group(GROUP).state == "Dead"
    assert coordinator.list_groups() == []


def test_empty_group_with_a_history_is_kept_for_the_retention_period() -> None:
    coordinator = make_coordinator()
    a_id = new_member(coordinator, 0, "a")
    join(coordinator, 0, a_id)
    coordinator.leave_group(10, group_id=GROUP, members=[(a_id, None)])
    coordinator.tick(20)
    assert coordinator.describe_group(GROUP).state == "Empty"
    # Coming back continues the generation count.
    assert join(coordinator, 30, require_known_member_id=False).result().generation_id == 3
    coordinator.leave_group(
        40, group_id=GROUP, members=[(coordinator.describe_group(GROUP).members[0].member_id, None)]
    )
    coordinator.tick(40 + coordinator.config.empty_group_retention_ms)
    assert coordinator.describe_group(GROUP).state == "Dead"


def test_next_deadline_tracks_the_earliest_timer() -> None:
    coordinator = make_coordinator()
    assert coordinator.next_deadline_ms() is None
    leader, _ = stable_pair(coordinator)
    assert coordinator.next_deadline_ms() == SESSION_MS
    heartbeat(coordinator, 4000, leader)
    assert coordinator.next_deadline_ms() == SESSION_MS  # the follower's


def test_list_and_describe_groups() -> None:
    coordinator = make_coordinator()
    leader, follower = stable_pair(coordinator)
    assert [(g.group_id, g.protocol_type, g.state) for g in coordinator.list_groups()] == [
        (GROUP, "consumer", "Stable")
    ]
    assert coordinator.list_groups(["empty"]) == []
    assert len(coordinator.list_groups(["STABLE"])) == 1
    description = coordinator.describe_group(GROUP)
    assert description.protocol_name == "range"
    assert {(m.member_id, m.assignment) for m in description.members} == {
        (leader.member_id, b"A"),
        (follower.member_id, b"B"),
    }
    assert description.members[0].client_host == "/127.0.0.1"
    group = coordinator.group(GROUP)
    assert group is not None and group.state is GroupState.STABLE


def _entry() -> OffsetCommitEntry:
    return OffsetCommitEntry("t1", 0, 42)
