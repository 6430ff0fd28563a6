"""Stepping down without ZooKeeper (issue 31, item 1): the rule at clock points, then
the replica manager applying it on the in-memory ZooKeeper (no sockets, no sleeps
for the clocks: ``check_stale_leadership(now_ms)`` is driven with explicit times)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from headwater.cluster.stale_leader import LedPartition, StaleLeaderGuard
from headwater.protocol.error_codes import ErrorCode
from tests.unit.test_replica_manager_faults import KEY, TOPIC, eventually, leading

SESSION_MS = 3_000
LAG_MS = 2_000
#: The manager tests: longer than the session, so one check point falls between them.
RM_LAG_MS = 5_000


def guard() -> StaleLeaderGuard:
    return StaleLeaderGuard(session_timeout_ms=SESSION_MS, replica_lag_time_max_ms=LAG_MS)


def test_a_leader_steps_down_only_once_both_clocks_ran_out() -> None:
    g = guard()
    led = {KEY: LedPartition(followers=(2, 3), led_since_ms=0)}
    g.zookeeper_lost(1_000)
    g.follower_fetched(2, 3_000)
    g.follower_fetched(3, 2_500)
    # ZooKeeper gone 2.5 s (< session), followers silent 0.5-1 s: keep leading.
    assert g.tick(3_500, led) == []
    # ZooKeeper gone 3.5 s (> session), but broker 2 fetched 1.5 s ago (< lag): keep leading.
    assert g.tick(4_500, led) == []
    # ZooKeeper gone 4 s and every follower silent > 2 s: step down.
    assert g.tick(5_001, led) == [KEY]


def test_only_zookeeper_down_with_followers_fetching_keeps_the_leader() -> None:
    g = guard()
    led = {KEY: LedPartition(followers=(2, 3), led_since_ms=0)}
    g.zookeeper_lost(0)
    for now in range(0, 60_000, 500):
        g.follower_fetched(2, now)  # one follower still fetching is enough
        assert g.tick(now, led) == []


def test_zookeeper_back_resets_the_clock_and_a_single_replica_never_steps_down() -> None:
    g = guard()
    led = {KEY: LedPartition(followers=(2,), led_since_ms=0), ("solo", 0): LedPartition((), 0)}
    g.zookeeper_lost(0)
    g.zookeeper_back()
    assert g.tick(10_000, led) == []
    g.zookeeper_lost(10_000)
    assert g.tick(13_001, led) == [KEY]  # "solo" has no other replica to lead it
    # A leadership taken after the followers' last fetch is not blamed on them.
    late = {KEY: LedPartition(followers=(2,), led_since_ms=12_000)}
    assert g.tick(13_001, late) == []
    assert g.tick(14_001, late) == [KEY]


def test_the_replica_manager_steps_down_a_cut_leader_and_answers_not_leader(
    tmp_path: Path,
) -> None:
    """Broker 1 leads idle-0 (replicas 1, 2). Its ZooKeeper connection drops
    (SUSPENDED, the session not yet known to be lost). While broker 2 fetches, it
    keeps leading however long ZooKeeper is away; once broker 2 is silent for the
    lag time too, it steps down: produce and fetch get NOT_LEADER_OR_FOLLOWER, and a
    waiting acks=all produce fails. When ZooKeeper is back (same session), the
    states are read again and it leads once more at the epoch ZooKeeper holds."""

    async def main() -> None:
        async with leading(tmp_path, lag_ms=RM_LAG_MS) as c:
            rm = c.replicas
            replica = rm.replicas[KEY]
            rm.stale_leader.session_timeout_ms = SESSION_MS
            rm.stale_leader.stall_after_ms = 10**9  # the cut rule alone, not a stall
            session = await c.caught_up_session(2)
            _, waiting = rm.append_records(TOPIC, 0, _batch(), 0, acks=-1)
            assert waiting is not None and not waiting.done()

            await asyncio.to_thread(c.store.suspend)
            assert await eventually(lambda: rm.stale_leader.without_zookeeper_since_ms is not None)
            t0 = rm.stale_leader.without_zookeeper_since_ms
            assert t0 is not None
            await c.follower_fetch(None, session_id=session.id, epoch=2)  # broker 2 fetches
            fetched = rm.stale_leader.last_fetch_ms[2]
            # t0 + session + 1: without ZooKeeper too long, but broker 2 fetched lately.
            assert rm.check_stale_leadership(max(t0 + SESSION_MS + 1, fetched + 1)) == []
            assert rm.serving_error(TOPIC, 0) == ErrorCode.none
            # Both clocks out: broker 2 silent past the lag time as well.
            now = max(t0 + SESSION_MS, fetched + RM_LAG_MS) + 1
            assert rm.check_stale_leadership(now) == [KEY]
            assert not replica.is_leader and rm.stale_step_downs == 1
            assert rm.serving_error(TOPIC, 0) == ErrorCode.not_leader_or_follower
            assert rm.follower_serving_error(2, TOPIC, 0) == ErrorCode.not_leader_or_follower
            assert await eventually(waiting.done)
            assert waiting.result() != ErrorCode.none  # never acknowledged

            await asyncio.to_thread(c.store.resume)  # same session: RECONNECTED
            assert await eventually(lambda: replica.is_leader)
            assert replica.leader_epoch == c.state().leader_epoch

    asyncio.run(main())


def test_the_replica_manager_keeps_leading_while_only_zookeeper_is_away(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with leading(tmp_path, lag_ms=RM_LAG_MS) as c:
            rm = c.replicas
            rm.stale_leader.session_timeout_ms = SESSION_MS
            rm.stale_leader.stall_after_ms = 10**9  # the cut rule alone, not a stall
            session = await c.caught_up_session(1)
            await asyncio.to_thread(c.store.suspend)
            assert await eventually(lambda: rm.stale_leader.without_zookeeper_since_ms is not None)
            t0 = rm.stale_leader.without_zookeeper_since_ms
            assert t0 is not None
            for step in range(1, 4):
                # As if ZooKeeper had been away for `step` sessions, and broker 2 fetches.
                rm.stale_leader.without_zookeeper_since_ms = t0 - step * SESSION_MS
                await c.follower_fetch(None, session_id=session.id, epoch=1 + step)
                fetched = rm.stale_leader.last_fetch_ms[2]
                assert rm.stale_leader.without_zookeeper_too_long(fetched + 1)
                assert rm.check_stale_leadership(fetched + 1) == []
            assert rm.serving_error(TOPIC, 0) == ErrorCode.none

    asyncio.run(main())


def test_a_stall_that_may_have_cost_the_session_is_told_apart() -> None:
    g = guard()
    assert g.stall_threshold_ms == 2_000  # two thirds of the 3 s session
    assert g.alive(10_000) is None  # the first sign of life
    assert g.alive(11_000) is None
    assert g.alive(13_000) is None  # 2 s: a ping may still have reached ZooKeeper
    assert g.alive(15_001) == 2_001  # SIGSTOP-like: the session may be gone
    assert g.alive(15_500) is None


def test_a_long_stall_of_a_busy_loop_in_a_running_process_is_not_a_pause() -> None:
    """Issue 33: applying 50,000 new partition states held a loop 45 s while the
    process ran and kazoo kept its session; the guard took it for a SIGSTOP and the
    leader stepped down from every partition it had just been given."""
    g = guard()
    g.alive(10_000)
    # The process ran (its pulse never stood still past the threshold): busy, not paused.
    assert g.alive(55_000, process_gap_ms=150) is None
    assert g.busy_stall_ms == 45_000
    g.busy_stall_ms = None
    # The process stood still for longer than the threshold: maybe a lost session.
    assert g.alive(60_000, process_gap_ms=2_001) == 5_000
    assert g.busy_stall_ms is None
    # Busy, but ZooKeeper's client was suspended or lost meanwhile: maybe lost too.
    assert g.alive(65_000, process_gap_ms=100, session_troubled=True) == 5_000
    # No pulse known: every long stall is treated as a pause, as before.
    assert g.alive(70_000) == 5_000


def test_a_busy_stall_keeps_the_leader_and_a_paused_or_suspended_one_does_not(
    tmp_path: Path,
) -> None:
    """The replica manager feeds the guard from its ``ProcessPulse`` (driven here by
    hand at explicit times, its thread stopped): a pulse that beat through the stall
    keeps every leadership; one that stopped, or a SUSPENDED heard on the store's session
    thread during the stall, steps down as after a SIGSTOP."""
    from headwater.cluster.store import SessionEvent

    async def main() -> None:
        async with leading(tmp_path, lag_ms=RM_LAG_MS) as c:
            rm = c.replicas
            replica = rm.replicas[KEY]
            pulse = rm.process_pulse
            pulse.stop()
            threshold = rm.stale_leader.stall_threshold_ms
            last = rm.stale_leader.last_alive_ms
            assert last is not None
            rm.check_loop_stall(last)  # one window from here
            # Busy: the loop is held for three thresholds while the pulse beats on.
            end = last + 3 * threshold
            for t in range(last, end + 1, 100):
                pulse.beat(t)
            assert rm.check_loop_stall(end) == []
            assert replica.is_leader
            assert rm.serving_error(TOPIC, 0) == ErrorCode.none
            # Busy again, but kazoo heard the connection drop meanwhile.
            for t in range(end, end + 3 * threshold + 1, 100):
                pulse.beat(t)
            pulse.session_event(SessionEvent.SUSPENDED)
            assert rm.check_loop_stall(end + 3 * threshold) == [KEY]
            assert not replica.is_leader
            assert await eventually(lambda: replica.is_leader)
            # Paused: the pulse stood still as long as the loop.
            start = rm.stale_leader.last_alive_ms
            assert start is not None
            rm.check_loop_stall(start)
            pulse.beat(start + 100)
            assert rm.check_loop_stall(start + 100 + threshold + 1) == [KEY]
            assert not replica.is_leader

    asyncio.run(main())


def test_after_a_stall_the_replica_manager_steps_down_before_answering_and_leads_again(
    tmp_path: Path,
) -> None:
    """A process stopped past two thirds of its session (SIGSTOP) reads the requests
    queued meanwhile before its ZooKeeper client notices anything: the first of them
    (``check_loop_stall`` runs before every request) makes it step down, so none is
    answered from a leadership the controller may have moved. The states are read
    again from ZooKeeper, and it leads once more at the epoch ZooKeeper holds."""

    async def main() -> None:
        async with leading(tmp_path, lag_ms=RM_LAG_MS) as c:
            rm = c.replicas
            replica = rm.replicas[KEY]
            left: list[tuple[str, int]] = []
            rm.leadership_listeners.append(
                lambda topic, partition, led: None if led else left.append((topic, partition))
            )
            last = rm.stale_leader.last_alive_ms
            assert last is not None  # the tick ran
            assert rm.check_loop_stall(last + 1) == []
            assert rm.check_loop_stall(last + 1 + rm.stale_leader.stall_threshold_ms + 1) == [KEY]
            assert not replica.is_leader and left == [KEY]  # coordinators unload
            assert rm.serving_error(TOPIC, 0) == ErrorCode.not_leader_or_follower
            assert await eventually(lambda: replica.is_leader)
            assert replica.leader_epoch == c.state().leader_epoch

    asyncio.run(main())


def _batch() -> bytes:
    from tests.unit.test_replica_manager_faults import batch

    return batch(1)
