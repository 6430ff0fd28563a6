"""Fetch sessions belong to the principal that created them, and tenants have limits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.fetch.contexts import new_fetch_context
from headwater.fetch.session_cache import FetchSessionCache
from headwater.protocol.fetch_types import FetchRequestData, FetchResponseData
from tests.unit.test_fetch_session import World, fetch, request

WORLD = World.with_partitions(10, records=1)
ALICE, MALLORY = "User:alice", "User:mallory"


def serve(
    cache: FetchSessionCache, req: FetchRequestData, owner: str, now_ms: int = 0
) -> FetchResponseData:
    ctx = new_fetch_context(cache, req, now_ms, WORLD, owner=owner)
    if ctx.error_code:
        return ctx.update_and_generate_response([], now_ms)
    results = WORLD.read(ctx.partitions_to_read(), max_bytes=req.max_bytes)
    return ctx.update_and_generate_response(results, now_ms)


def open_session(cache: FetchSessionCache, owner: str, size: int = 3, now_ms: int = 0) -> int:
    resp = serve(cache, request(0, 0, [fetch("t", p) for p in range(size)]), owner, now_ms)
    return resp.session_id


def test_another_principal_gets_70_and_the_session_is_untouched() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, ALICE)
    session = cache.get(sid)
    assert session is not None
    epoch, used, size = session.epoch, session.last_used_ms, session.size
    stolen = serve(cache, request(sid, epoch, [fetch("t", 7)]), MALLORY, now_ms=50)
    assert stolen.error_code == 70 and stolen.partitions == []
    assert (session.epoch, session.last_used_ms, session.size) == (epoch, used, size)
    assert cache.foreign_session_attempts_total == 1
    # The owner continues as if nothing happened, from any connection.
    assert serve(cache, request(sid, epoch), ALICE, now_ms=60).error_code == 0


def test_another_principal_cannot_close_or_reset_the_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, ALICE)
    for epoch in (-1, 0):  # FINAL closes, INITIAL replaces: both only for the owner
        resp = serve(cache, request(sid, epoch, [fetch("t", 1)]), MALLORY)
        assert resp.error_code == 0 and sid in cache
    serve(cache, request(sid, -1, [fetch("t", 1)]), ALICE)
    assert sid not in cache


def test_a_tenant_at_its_limit_replaces_only_its_own_sessions() -> None:
    cache = FetchSessionCache(max_slots=10, slots_per_owner=2)
    alice = open_session(cache, ALICE)
    flood = [open_session(cache, MALLORY, now_ms=i) for i in range(50)]
    assert alice in cache and cache.sessions_of(MALLORY) == 2
    assert cache.sessions_of(ALICE) == 1
    assert flood[-1] in cache and flood[-2] in cache and flood[0] not in cache


def test_followers_are_exempt_from_the_per_principal_limit() -> None:
    cache = FetchSessionCache(max_slots=10, slots_per_owner=1)
    ids = [
        serve(cache, request(0, 0, [fetch("t", p)], replica_id=1), "User:broker").session_id
        for p in range(3)
    ]
    assert all(i in cache for i in ids)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([ALICE, MALLORY]), st.integers(0, 2**31 - 1),
                          st.integers(-1, 5)), max_size=30))  # fmt: skip
def test_no_request_from_mallory_changes_alices_session(
    attacks: list[tuple[str, int, int]],
) -> None:
    cache = FetchSessionCache(slots_per_owner=3)
    sid = open_session(cache, ALICE)
    session = cache.get(sid)
    assert session is not None
    before = (session.epoch, session.last_used_ms, session.size)
    for who, guess, epoch in attacks:
        if who == ALICE:
            continue
        target = sid if guess % 2 else guess
        serve(cache, request(target, epoch, [fetch("t", guess % 10)]), MALLORY, now_ms=1)
    assert cache.get(sid) is session and not session.closed
    assert (session.epoch, session.last_used_ms, session.size) == before


def test_a_consumer_at_its_principal_limit_never_replaces_a_follower_session() -> None:
    # Without authentication followers and consumers share one principal.
    cache = FetchSessionCache(max_slots=10, slots_per_owner=1)
    follower = serve(cache, request(0, 0, [fetch("t", 1)], replica_id=1), ALICE).session_id
    first, second = open_session(cache, ALICE), open_session(cache, ALICE, now_ms=1)
    assert follower in cache and first not in cache and second in cache
    assert cache.sessions_of(ALICE) == 1
