"""The fetch purgatory wakes a parked fetch for every change it has not read (issue 21).

A broker reads in time slices, so an append can land between a fetch's read
and the moment it parks. Such a change notifies nobody; the purgatory must
still see it, or a follower waits ``replica.fetch.wait.max.ms`` for a record
the leader already has (and every ``acks=all`` produce waits with it).
"""

from __future__ import annotations

import asyncio

from headwater.fetch.contexts import FetchContext, new_fetch_context
from headwater.fetch.purgatory import FetchPurgatory
from headwater.fetch.session_cache import FetchSessionCache
from headwater.steps import drain
from tests.unit.test_fetch_session import World, fetch, request

#: Long enough that a fetch answered by its timeout could not pass for a woken one.
MAX_WAIT_S = 10.0


async def parked(ctx: FetchContext, world: World, *, append_while_parked: bool) -> bool:
    """Park ``ctx`` as the broker does; whether it was woken before MAX_WAIT_S."""
    async with FetchPurgatory().watch(ctx, ctx.request.partitions, lambda _t, _p: None) as waiter:
        if append_while_parked:
            asyncio.get_running_loop().call_soon(world.append, ("t", 0))
        return await waiter.wait(MAX_WAIT_S)


def follower_session(world: World, cache: FetchSessionCache) -> int:
    """A follower's session on partition t-0, caught up (its full fetch answered)."""
    _, resp = world.serve(cache, request(0, 0, [fetch("t", 0)], replica_id=1))
    assert resp.session_id
    return resp.session_id


def test_an_append_between_the_read_and_the_park_wakes_the_fetch_at_once() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    session_id = follower_session(world, cache)
    ctx = new_fetch_context(cache, request(session_id, 1, replica_id=1), 1, world)
    drain(ctx.prepare_steps(1))
    assert world.read(drain(ctx.partitions_to_read_steps())) == []  # nothing new: it parks
    world.append(("t", 0))  # the leader appends while the read's slice yields
    assert asyncio.run(parked(ctx, world, append_while_parked=False))


def test_a_full_fetch_that_created_a_session_also_sees_a_missed_append() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    ctx = new_fetch_context(cache, request(0, 0, [fetch("t", 0)], replica_id=1), 0, world)
    drain(ctx.prepare_steps(0))
    world.read(drain(ctx.partitions_to_read_steps()))
    world.append(("t", 0))
    assert ctx.session is not None
    assert asyncio.run(parked(ctx, world, append_while_parked=False))


def test_an_append_while_parked_wakes_the_fetch() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    session_id = follower_session(world, cache)
    ctx = new_fetch_context(cache, request(session_id, 1, replica_id=1), 1, world)
    drain(ctx.prepare_steps(1))
    world.read(drain(ctx.partitions_to_read_steps()))
    assert asyncio.run(parked(ctx, world, append_while_parked=True))


def test_a_fetch_with_nothing_new_stays_parked() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    session_id = follower_session(world, cache)
    ctx = new_fetch_context(cache, request(session_id, 1, replica_id=1), 1, world)
    drain(ctx.prepare_steps(1))
    world.read(drain(ctx.partitions_to_read_steps()))

    async def run() -> bool:
        async with FetchPurgatory().watch(ctx, [], lambda _t, _p: None) as waiter:
            return await waiter.wait(0.05)

    assert not asyncio.run(run())
