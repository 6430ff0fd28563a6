"""Broker work on an incremental fetch grows with what changed, not with session size.

Kafka re-reads every partition of a session on each incremental fetch
(KAFKA-9039); Headwater reads only the pending ones.
"""

from __future__ import annotations

import time

import pytest

from headwater.fetch.contexts import new_fetch_context
from headwater.fetch.session import FetchSession
from headwater.fetch.session_cache import FetchSessionCache
from tests.unit.test_fetch_session import RECORD_SIZE, World, fetch, request

BIG = 100_000


def big_session(count: int) -> tuple[FetchSessionCache, World, FetchSession]:
    cache, world = FetchSessionCache(), World.with_partitions(count)
    _, resp = world.serve(cache, request(0, 0, [fetch("t", p) for p in range(count)]))
    session = cache.get(resp.session_id)
    assert session is not None and session.size == count
    return cache, world, session


@pytest.fixture(scope="module")
def big() -> tuple[FetchSessionCache, World, FetchSession]:
    return big_session(BIG)


def idle_fetch(cache: FetchSessionCache, world: World, session: FetchSession) -> int:
    """One empty incremental fetch, as the broker runs it; returns partitions read."""
    ctx = new_fetch_context(cache, request(session.id, session.epoch), 0, world)
    to_read = ctx.partitions_to_read()
    resp = ctx.update_and_generate_response(world.read(to_read), 0)
    assert resp.error_code == 0 and resp.partitions == []
    return ctx.partitions_read


def best_seconds(cache: FetchSessionCache, world: World, session: FetchSession) -> float:
    best = float("inf")
    for _ in range(200):
        start = time.perf_counter()
        idle_fetch(cache, world, session)
        best = min(best, time.perf_counter() - start)
    return best


def test_idle_incremental_fetch_on_100k_partitions_reads_nothing_and_costs_like_100(
    big: tuple[FetchSessionCache, World, FetchSession],
) -> None:
    cache, world, session = big
    before = cache.incremental_partitions_read_total
    assert idle_fetch(cache, world, session) == 0
    assert cache.incremental_partitions_read_total == before
    small = big_session(100)
    large_cost, small_cost = best_seconds(*big), best_seconds(*small)
    # Best-of-200 timings of the same O(1) path (about 4 µs here); walking the
    # 100,000-partition session even once, however cheaply, costs far more.
    assert large_cost < 2 * small_cost + 10e-6, (large_cost, small_cost)


def test_incremental_fetch_with_one_percent_changed_reads_about_a_thousand(
    big: tuple[FetchSessionCache, World, FetchSession],
) -> None:
    cache, world, session = big
    changed = range(0, BIG, 100)
    for p in changed:
        world.append(("t", p))
    ctx = new_fetch_context(cache, request(session.id, session.epoch), 0, world)
    to_read = ctx.partitions_to_read()
    assert [p.partition for p in to_read] == list(changed)  # session order, nothing else
    resp = ctx.update_and_generate_response(world.read(to_read), 0)
    assert len(resp.partitions) == len(changed) == ctx.partitions_read == 1000
    assert all(p.records_size == RECORD_SIZE for p in resp.partitions)
    # The client names the 1,000 with their new offsets: read once more, then idle.
    advanced = [fetch("t", p, 1) for p in changed]
    ctx = new_fetch_context(cache, request(session.id, session.epoch, advanced), 0, world)
    assert ctx.partitions_read == 0 and len(ctx.partitions_to_read()) == 1000
    assert ctx.update_and_generate_response(world.read(advanced), 0).partitions == []
    assert idle_fetch(cache, world, session) == 0
