"""The fetch session cache: slots, who may evict whom, and its metrics."""

from __future__ import annotations

from typing import Any

from headwater.fetch.contexts import new_fetch_context
from headwater.fetch.session import FetchSession
from headwater.fetch.session_cache import FetchSessionCache
from tests.unit.test_fetch_session import World, fetch, request

EVICTION_MS = 1000


def make_cache(slots: int = 2, **kw: Any) -> FetchSessionCache:
    return FetchSessionCache(max_slots=slots, eviction_ms=EVICTION_MS, **kw)


WORLD = World.with_partitions(10)


def open_session(
    cache: FetchSessionCache, size: int, now_ms: int, *, follower: bool = False
) -> FetchSession | None:
    """A full (0, 0) fetch of ``size`` partitions; the session, or None if declined."""
    req = request(0, 0, [fetch("t", p) for p in range(size)], replica_id=1 if follower else -1)
    _, resp = WORLD.serve(cache, req, now_ms)
    return cache.get(resp.session_id)


def use(cache: FetchSessionCache, session: FetchSession, now_ms: int) -> None:
    _, resp = WORLD.serve(cache, request(session.id, session.epoch), now_ms)
    assert resp.error_code == 0


def test_declines_a_newcomer_when_full_and_nothing_is_evictable() -> None:
    cache = make_cache(2)
    a, b = open_session(cache, 3, 0), open_session(cache, 3, 0)
    assert a is not None and b is not None
    assert open_session(cache, 9, 500) is None  # all young: declined with id 0
    assert set(cache.sessions()) == {a, b} and cache.evictions_total == 0


def test_newcomer_evicts_the_session_idle_longer_than_the_eviction_time() -> None:
    cache = make_cache(2)
    a, b = open_session(cache, 9, 0), open_session(cache, 9, 0)
    assert a is not None and b is not None
    use(cache, a, EVICTION_MS + 1)
    new = open_session(cache, 1, EVICTION_MS + 1)  # b idle for > eviction ms
    assert new is not None and set(cache.sessions()) == {a, new}
    assert b.closed and cache.evictions_total == 1
    assert a in WORLD.watching(("t", 5))
    assert b not in WORLD.watching(("t", 5))  # the evicted session stopped watching


def test_consumer_never_evicts_an_idle_follower_session() -> None:
    # Kafka would evict it (the globally least recently used, idle past the
    # eviction time); Headwater keeps follower sessions from consumers.
    cache = make_cache(1)
    follower = open_session(cache, 5, 0, follower=True)
    assert open_session(cache, 9, EVICTION_MS) is None
    assert open_session(cache, 9, 10 * EVICTION_MS) is None
    assert follower is not None and not follower.closed and cache.evictions_total == 0


def test_consumer_evicts_the_idle_consumer_not_the_staler_follower() -> None:
    cache = make_cache(2)
    follower = open_session(cache, 5, 0, follower=True)
    consumer = open_session(cache, 5, 1)
    assert follower is not None and consumer is not None
    new = open_session(cache, 1, 10 * EVICTION_MS)  # both idle; the follower is staler
    assert new is not None and consumer.closed and not follower.closed


def test_consumer_never_evicts_an_old_smaller_follower_session() -> None:
    cache = make_cache(2)
    follower = open_session(cache, 1, 0, follower=True)
    consumer = open_session(cache, 3, 0)
    assert follower is not None and consumer is not None
    use(cache, follower, EVICTION_MS + 1)
    use(cache, consumer, EVICTION_MS + 1)
    # Both old and busy; Kafka's rule would evict neither (consumers sort
    # first), and a bigger consumer evicts the old consumer, never the follower.
    new = open_session(cache, 9, EVICTION_MS + 2)
    assert new is not None and consumer.closed and not follower.closed
    assert open_session(cache, 99, EVICTION_MS + 3) is None  # only the follower and new
    assert not follower.closed


def test_follower_still_evicts_an_idle_follower_session() -> None:
    cache = make_cache(1)
    old = open_session(cache, 5, 0, follower=True)
    new = open_session(cache, 1, EVICTION_MS + 1, follower=True)
    assert old is not None and old.closed and new is not None


def test_per_client_limit_counts_consumer_sessions_only() -> None:
    cache = make_cache(5, max_slots_per_client=1)
    follower = open_session(cache, 2, 0, follower=True)
    consumer = open_session(cache, 2, 0)  # same client address as the follower
    assert follower is not None and consumer is not None
    assert open_session(cache, 2, 0) is None  # the consumer's own limit holds


def test_consumer_evicts_an_old_consumer_session_only_when_strictly_larger() -> None:
    cache = make_cache(1)
    old = open_session(cache, 3, 0)
    assert old is not None
    use(cache, old, EVICTION_MS + 1)  # old, but not idle
    assert open_session(cache, 3, EVICTION_MS + 2) is None  # equal size: no
    assert open_session(cache, 2, EVICTION_MS + 2) is None
    new = open_session(cache, 4, EVICTION_MS + 2)
    assert new is not None and old.closed and cache.evictions_total == 1


def test_consumer_never_evicts_a_session_younger_than_the_eviction_time() -> None:
    cache = make_cache(1)
    young = open_session(cache, 1, 0)
    assert open_session(cache, 9, EVICTION_MS) is None  # created exactly the limit ago
    assert young is not None and not young.closed


def test_consumer_never_evicts_a_busy_follower_session_even_an_old_one() -> None:
    cache = make_cache(1)
    follower = open_session(cache, 1, 0, follower=True)
    assert follower is not None
    use(cache, follower, 5 * EVICTION_MS)
    assert open_session(cache, 9, 5 * EVICTION_MS + 1) is None
    assert not follower.closed


def test_follower_evicts_the_smallest_consumer_session_even_a_young_one() -> None:
    cache = make_cache(3)
    big, small, mid = (
        open_session(cache, 5, 0),
        open_session(cache, 2, 0),
        open_session(cache, 3, 0),
    )
    assert big is not None and small is not None and mid is not None
    follower = open_session(cache, 1, 10, follower=True)
    assert follower is not None and follower.privileged
    assert small.closed and not big.closed and not mid.closed
    assert cache.evictions_total == 1


def test_follower_evicts_an_old_follower_session_only_when_larger() -> None:
    cache = make_cache(1)
    old = open_session(cache, 3, 0, follower=True)
    assert old is not None
    use(cache, old, EVICTION_MS // 2)
    assert open_session(cache, 9, EVICTION_MS // 2, follower=True) is None  # young follower
    use(cache, old, EVICTION_MS + 1)
    assert open_session(cache, 3, EVICTION_MS + 1, follower=True) is None  # not larger
    new = open_session(cache, 4, EVICTION_MS + 1, follower=True)
    assert new is not None and old.closed


def test_smallest_evictable_goes_first_size_then_id() -> None:
    ids = iter([30, 10, 20, 40])
    cache = FetchSessionCache(
        max_slots=3, eviction_ms=EVICTION_MS, new_session_id=lambda: next(ids)
    )
    s30, s10, s20 = (open_session(cache, 2, t) for t in (0, 1, 2))
    assert s30 is not None and s10 is not None and s20 is not None
    for s in (s30, s10, s20):
        use(cache, s, EVICTION_MS + 5)  # all old, none idle
    new = open_session(cache, 3, EVICTION_MS + 5)
    assert new is not None and new.id == 40
    assert s10.closed and not s20.closed and not s30.closed


def test_a_session_shrinking_by_forgetting_partitions_is_reindexed() -> None:
    ids = iter([1, 2, 3])
    cache = FetchSessionCache(
        max_slots=2, eviction_ms=EVICTION_MS, new_session_id=lambda: next(ids)
    )
    a, b = open_session(cache, 5, 0), open_session(cache, 3, 0)
    assert a is not None and b is not None
    forget = [fetch("t", p).key for p in range(1, 5)]
    _, resp = WORLD.serve(cache, request(a.id, 1, forgotten=forget), EVICTION_MS + 1)
    assert resp.error_code == 0 and a.size == 1
    use(cache, b, EVICTION_MS + 1)
    assert cache.num_incremental_fetch_partitions_cached == 4
    new = open_session(cache, 2, EVICTION_MS + 1)  # beats a (1 partition), not b (3)
    assert new is not None and a.closed and not b.closed


def test_minimum_session_size_declines_small_fetches() -> None:
    cache = make_cache(5, min_session_size=3)
    assert open_session(cache, 2, 0) is None
    assert open_session(cache, 3, 0) is not None


def test_consumer_slots_keep_room_for_followers() -> None:
    cache = make_cache(3, consumer_slots=1)
    consumer = open_session(cache, 5, 0)
    assert consumer is not None
    assert open_session(cache, 9, 0) is None  # consumer pool full, nothing evictable
    f1, f2 = open_session(cache, 1, 0, follower=True), open_session(cache, 1, 0, follower=True)
    assert f1 is not None and f2 is not None and cache.num_incremental_fetch_sessions == 3
    use(cache, consumer, EVICTION_MS + 1)
    # An old consumer session yields to a bigger consumer, within the consumer pool.
    bigger = open_session(cache, 6, EVICTION_MS + 1)
    assert bigger is not None and consumer.closed and not f1.closed and not f2.closed


def test_zero_slots_never_create_a_session() -> None:
    cache = make_cache(0)
    assert open_session(cache, 5, 0) is None
    assert open_session(cache, 5, 0, follower=True) is None


def test_metrics_follow_creation_use_and_closing() -> None:
    cache = make_cache(10)
    a, b = open_session(cache, 4, 0), open_session(cache, 2, 0)
    assert a is not None and b is not None
    assert cache.num_incremental_fetch_sessions == 2
    assert cache.num_incremental_fetch_partitions_cached == 6
    _, resp = WORLD.serve(cache, request(a.id, 1, [fetch("t", 7)]), 1)
    assert resp.error_code == 0 and cache.num_incremental_fetch_partitions_cached == 7
    WORLD.serve(cache, request(b.id, -1), 2)
    assert cache.num_incremental_fetch_sessions == 1
    assert cache.num_incremental_fetch_partitions_cached == 5
    assert cache.evictions_total == 0
    assert (cache.full_fetches_total, cache.incremental_fetches_total) == (3, 1)


def _open_from(cache: FetchSessionCache, client: str, now_ms: int = 0) -> FetchSession | None:
    req = request(0, 0, [fetch("t", p) for p in range(3)])
    ctx = new_fetch_context(cache, req, now_ms, WORLD, client=client)
    results = WORLD.read(ctx.partitions_to_read(), max_bytes=req.max_bytes, read_committed=False)
    return cache.get(ctx.update_and_generate_response(results, now_ms).session_id)


def test_one_client_address_cannot_take_every_slot() -> None:
    cache = make_cache(10, max_slots_per_client=2)
    mine = [_open_from(cache, "10.0.0.1") for _ in range(3)]
    assert mine[0] is not None and mine[1] is not None
    assert mine[2] is None  # declined: its fetches stay sessionless
    assert cache.client_limit_declines_total == 1
    assert _open_from(cache, "10.0.0.2") is not None  # others still get slots
    cache.remove(mine[0].id)
    assert _open_from(cache, "10.0.0.1") is not None  # a freed slot is the client's again
