"""Sessions built in steps (a broker slices 100,000-partition work) and their compact state."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from pathlib import Path

from headwater.broker.cooperative import BackgroundSteps
from headwater.fetch.contexts import FullFetchContext, new_fetch_context
from headwater.fetch.purgatory import SessionPartitionWatcher
from headwater.fetch.session import FetchSession
from headwater.fetch.session_cache import FetchSessionCache
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.log import Log
from headwater.records.record import build_batch
from headwater.steps import count_steps, drain
from tests.unit.test_fetch_session import World, fetch, request, tpkey


def sliced_full_fetch(
    cache: FetchSessionCache, world: World, partitions: int, between_read_and_answer: list[int]
) -> tuple[FetchSession | None, int]:
    """A full fetch run the way the broker runs it: prepare, read, (changes), answer."""
    req = request(0, 0, [fetch("t", p) for p in range(partitions)])
    ctx = new_fetch_context(cache, req, 0, world)
    assert isinstance(ctx, FullFetchContext)
    steps = sum(1 for _ in ctx.prepare_steps(0))
    results = world.read(ctx.partitions_to_read())
    for p in between_read_and_answer:
        world.append(("t", p))
    resp = drain(ctx.respond_steps(results, 0))
    return cache.get(resp.session_id), steps


def test_a_change_after_the_read_keeps_the_partition_pending() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3000)
    session, steps = sliced_full_fetch(cache, world, 3000, between_read_and_answer=[2500])
    assert steps >= 2  # 3,000 partitions take more than one step
    assert session is not None and session.size == 3000
    assert session.is_pending(tpkey("t", 2500))
    assert session.pending_count == 1  # the rest is caught up (empty logs)
    assert [p.partition for p in session.pending_requests()] == [2500]


def test_a_session_evicted_while_it_is_built_is_answered_with_id_zero() -> None:
    cache, world = FetchSessionCache(max_slots=1), World.with_partitions(10)
    req = request(0, 0, [fetch("t", p) for p in range(5)])
    ctx = new_fetch_context(cache, req, 0, world)
    for _ in ctx.prepare_steps(0):
        pass
    assert ctx.session is not None
    follower = request(0, 0, [fetch("t", p) for p in range(9)], replica_id=1)
    world.serve(cache, follower, 1)  # a follower evicts the young consumer session
    evicted = ctx.session
    assert evicted.closed
    resp = drain(ctx.respond_steps(world.read(ctx.partitions_to_read()), 1))
    assert resp.session_id == 0 and len(resp.partitions) == 5
    assert all(evicted not in world.watching(("t", p)) for p in range(5))


def test_sparse_and_huge_partition_numbers_cost_no_dense_table() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3)
    numbers = [0, 2, 2**31 - 1, 70_000]
    _, resp = world.serve(cache, request(0, 0, [fetch("t", p) for p in numbers]))
    session = cache.get(resp.session_id)
    assert session is not None and session.size == 4
    assert [c.key.partition for c in session.partitions()] == numbers
    assert all(tpkey("t", p) in session for p in numbers)
    assert tpkey("t", 1) not in session and tpkey("t", 2**31 - 2) not in session


def test_forgotten_slots_are_reused_with_fresh_state() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(4, records=2)
    _, resp = world.serve(cache, request(0, 0, [fetch("t", p, 2) for p in range(3)]))
    session = cache.get(resp.session_id)
    assert session is not None and session.pending_count == 0
    forget = [tpkey("t", 1)]
    _, resp = world.serve(cache, request(session.id, 1, forgotten=forget))
    assert resp.error_code == 0 and session.size == 2
    _, resp = world.serve(cache, request(session.id, 2, [fetch("t", 3, 0)]))
    assert [(p.partition, p.high_watermark) for p in resp.partitions] == [(3, 2)]
    assert [c.key.partition for c in session.partitions()] == [0, 2, 3]
    cached = session.get(tpkey("t", 3))
    assert cached is not None and cached.request.fetch_offset == 0 and cached.high_watermark == 2


def test_one_listener_per_log_whatever_the_number_of_sessions(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(), FileHandleCache(8))
    watcher = SessionPartitionWatcher(lambda topic, p: log if (topic, p) == ("t", 0) else None)
    sessions = [
        FetchSession(i, privileged=False, uses_topic_ids=False, now_ms=0, watcher=watcher)
        for i in (1, 2, 3)
    ]
    for s in sessions:
        s.update([fetch("t", 0)], [])
        s.absorb_results([], read_since=0, read_committed=False)
    assert watcher.watching("t", 0) == 3
    assert not isinstance(log._listeners, list)  # one shared listener, not one per session
    for s in sessions:
        s._pending.clear()
    log.append(build_batch([(0, None, b"v")]), 0)
    assert all(s.is_pending(tpkey("t", 0)) for s in sessions)
    for s in sessions[:2]:
        s.close()
    assert watcher.watching("t", 0) == 1
    sessions[2].close()
    assert watcher.watching("t", 0) == 0 and log._listeners is None


def test_a_change_before_a_re_read_is_in_the_read_and_not_left_pending() -> None:
    # A long-polling full fetch is woken by a change and reads again: what
    # woke it is in the final read, so the partition is settled afterwards;
    # only a change after the final read keeps a partition pending.
    cache, world = FetchSessionCache(), World.with_partitions(4)
    req = request(0, 0, [fetch("t", p) for p in range(4)])
    ctx = new_fetch_context(cache, req, 0, world)
    drain(ctx.prepare_steps(0))
    world.read(ctx.partitions_to_read())
    world.notify(("t", 1))  # wakes the long poll (nothing the client lacks)
    results = world.read(ctx.partitions_to_read())
    world.notify(("t", 2))  # after the final read
    session = cache.get(drain(ctx.respond_steps(results, 0)).session_id)
    assert session is not None
    assert not session.is_pending(tpkey("t", 1)) and session.is_pending(tpkey("t", 2))


def test_a_large_closed_session_is_released_in_the_background_and_ignores_changes(
    tmp_path: Path,
) -> None:
    """Unwatching 100,000 partitions at once stalled every client ~190 ms: it runs in slices."""
    logs = {p: Log(tmp_path / f"t-{p}", LogConfig(), FileHandleCache(8)) for p in range(3000)}
    background = BackgroundSteps()
    watcher = SessionPartitionWatcher(lambda topic, p: logs.get(p), background=background)
    big = FetchSession(1, privileged=False, uses_topic_ids=False, now_ms=0, watcher=watcher)
    small = FetchSession(2, privileged=False, uses_topic_ids=False, now_ms=0, watcher=watcher)
    big.update([fetch("t", p) for p in range(3000)], [])
    small.update([fetch("t", p) for p in range(10)], [])

    async def close_both() -> None:
        small.close()  # under RELEASE_IN_BACKGROUND partitions: at once
        assert all(watcher.watching("t", p) == 1 for p in range(10))
        big._pending.clear()
        big.close()
        assert background.pending == 1
        assert watcher.watching("t", 2999) == 1  # not yet released
        logs[2999].append(build_batch([(0, None, b"v")]), 0)
        assert not big.is_pending(tpkey("t", 2999))  # closed: the change is ignored
        await background.wait()

    asyncio.run(close_both())
    assert all(watcher.watching("t", p) == 0 for p in range(3000))
    assert all(log._listeners is None for log in logs.values())


def test_background_steps_finish_at_once_without_a_loop_or_when_cancelled() -> None:
    done: list[int] = []

    def steps(n: int) -> Generator[None, None, None]:
        for i in range(n):
            time.sleep(0.0001)
            done.append(i)
            yield None

    background = BackgroundSteps()
    background(steps(3))  # no running loop
    assert done == [0, 1, 2]
    done.clear()

    async def cancel_midway() -> None:
        background(steps(2000))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert 0 < len(done) < 2000  # mid-way, between slices
        for task in list(background._tasks):
            task.cancel()
        await asyncio.gather(*background._tasks, return_exceptions=True)

    asyncio.run(cancel_midway())
    assert done == list(range(2000))


def test_a_huge_incremental_request_updates_its_session_in_steps() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3000, records=5)
    _, resp = world.serve(cache, request(0, 0, [fetch("t", p, 5) for p in range(3000)]))
    session = cache.get(resp.session_id)
    assert session is not None and session.pending_count == 0
    # The client moved back to offset 2 everywhere: every partition has news again.
    req = request(session.id, 1, [fetch("t", p, 2) for p in range(3000)])
    ctx = new_fetch_context(cache, req, 1, world)
    assert session.pending_count == 0  # nothing applied before the prepare steps
    steps = sum(1 for _ in ctx.prepare_steps(1))
    assert steps >= 2
    assert session.pending_count == 3000
    resp = drain(ctx.respond_steps(world.read(ctx.partitions_to_read()), 1))
    assert resp.error_code == 0 and len(resp.partitions) == 3000
    # Without the prepare steps (a throttled answer), the update still happens.
    req = request(session.id, 2, [fetch("t", p, 5) for p in range(10)])
    _, resp = world.serve(cache, req)
    cached = session.get(tpkey("t", 9))
    assert cached is not None and cached.request.fetch_offset == 5


def test_an_incremental_request_forgetting_everything_still_ends_the_session() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3)
    _, resp = world.serve(cache, request(0, 0, [fetch("t", p) for p in range(3)]))
    forget = [tpkey("t", p) for p in range(3)]
    _, resp = world.serve(cache, request(resp.session_id, 1, forgotten=forget))
    assert resp.session_id == 0 and cache.num_incremental_fetch_sessions == 0
    assert all(not world.watching(("t", p)) for p in range(3))


def test_an_incremental_fetch_reads_and_answers_in_steps_and_keeps_late_changes() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3000, records=5)
    _, resp = world.serve(cache, request(0, 0, [fetch("t", p, 5) for p in range(3000)]))
    session = cache.get(resp.session_id)
    assert session is not None
    # Every partition named again (a new size limit), all caught up at offset 5.
    named = [fetch("t", p, 5, partition_max_bytes=4096) for p in range(3000)]
    ctx = new_fetch_context(cache, request(session.id, 1, named), 1, world)
    drain(ctx.prepare_steps(1))
    to_read, steps = count_steps(ctx.partitions_to_read_steps())
    assert len(to_read) == 3000 and steps >= 2
    results = world.read(to_read)
    world.append(("t", 10))  # after its read, before its answer
    resp, steps = count_steps(ctx.respond_steps(results, 1))
    assert steps >= 2 and resp.error_code == 0 and resp.partitions == []
    assert session.is_pending(tpkey("t", 10)) and session.pending_count == 1


def test_an_incremental_session_evicted_while_answering_gets_error_70() -> None:
    cache, world = FetchSessionCache(max_slots=1), World.with_partitions(3000, records=5)
    _, resp = world.serve(cache, request(0, 0, [fetch("t", p, 5) for p in range(3000)]))
    session = cache.get(resp.session_id)
    assert session is not None
    req = request(session.id, 1, [fetch("t", p, 2) for p in range(3000)])
    ctx = new_fetch_context(cache, req, 1, world)
    drain(ctx.prepare_steps(1))
    steps = ctx.respond_steps(world.read(ctx.partitions_to_read()), 1)
    next(steps)
    cache.remove(session.id)  # closed between two steps
    resp = drain(steps)
    assert resp.error_code == 70 and resp.session_id == 0
