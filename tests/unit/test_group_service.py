"""The asyncio adapter: delayed answers are awaited, timers fire on their own."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from kio.schema.errors import ErrorCode

from headwater.coordinator.state_log import InMemoryStateLog
from headwater.group.apis import GroupApis
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.group.offsets import OffsetCommitEntry
from headwater.group.service import GroupService
from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build_request

SESSION_MS = 6_000


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def make_service(clock: FakeClock, *, initial_delay_ms: int = 0) -> GroupService:
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        InMemoryStateLog(),
        lambda topic, partition: True,
        now_ms=clock(),
        config=GroupConfig(initial_rebalance_delay_ms=initial_delay_ms),
        member_id_factory=lambda prefix: f"{prefix}-{next(counter)}",
    )
    return GroupService(
        GroupApis(coordinator, node_id=0, host="localhost", port=9092),
        clock_ms=clock,
        wall_clock=clock,
        max_tick_interval_s=0.005,
    )


def coordinator_of(service: GroupService) -> GroupCoordinator:
    """The coordinator of group "g" (every test here uses that one group)."""
    coordinator = service.shards.coordinator_for("g")
    assert coordinator is not None
    return coordinator


def join_request(member_id: str = "") -> object:
    return build_request(
        ApiKey.JOIN_GROUP,
        1,
        {
            "group_id": "g",
            "session_timeout": SESSION_MS,
            "rebalance_timeout": SESSION_MS,
            "member_id": member_id,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )


def sync_request(joined: dict[str, Any], assignments: list[dict[str, Any]]) -> object:
    return build_request(
        ApiKey.SYNC_GROUP,
        1,
        {
            "group_id": "g",
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "assignments": assignments,
        },
    )


async def settle() -> None:
    """Give the ticker a few turns."""
    await asyncio.sleep(0.03)


async def run_clock_until_done(clock: FakeClock, *tasks: asyncio.Task[Any], step_ms: int) -> None:
    """Advance time in steps, letting the ticker run, until the tasks finish.

    Stepping rather than jumping keeps the test right however late the ticker
    runs on a busy machine.
    """
    for _ in range(2000):
        if all(task.done() for task in tasks):
            return
        clock.now_ms += step_ms
        await asyncio.sleep(0.002)
    raise AssertionError("tasks never finished")


async def until_state(service: GroupService, state: str) -> None:
    """Wait (on a busy machine, a while) for the ticker to move the group along."""
    for _ in range(400):
        if coordinator_of(service).describe_group("g").state == state:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"group never reached {state}")


def test_concurrent_joins_are_answered_when_the_initial_delay_ends() -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        clock = FakeClock()
        service = make_service(clock, initial_delay_ms=3000)
        await service.start()
        try:
            a = asyncio.create_task(service.handle(join_request(), client_id="a"))
            b = asyncio.create_task(service.handle(join_request(), client_id="b"))
            await settle()
            assert not a.done() and not b.done()
            await run_clock_until_done(clock, a, b, step_ms=100)
            # b arrived during the first delay, so the group waited one more.
            assert clock.now_ms >= 6000
            return a.result(), b.result()
        finally:
            await service.stop()

    a, b = asyncio.run(scenario())
    assert a["generation_id"] == b["generation_id"] == 1
    assert a["leader"] == b["leader"]


def test_follower_sync_waits_for_the_leader() -> None:
    async def scenario() -> dict[str, Any]:
        clock = FakeClock()
        service = make_service(clock, initial_delay_ms=10)
        await service.start()
        try:
            a_task = asyncio.create_task(service.handle(join_request()))
            b_task = asyncio.create_task(service.handle(join_request()))
            await run_clock_until_done(clock, a_task, b_task, step_ms=5)
            a, b = a_task.result(), b_task.result()
            leader, follower = (a, b) if a["leader"] == a["member_id"] else (b, a)
            waiting = asyncio.create_task(service.handle(sync_request(follower, [])))
            await settle()
            assert not waiting.done()
            await service.handle(
                sync_request(
                    leader,
                    [
                        {"member_id": leader["member_id"], "assignment": b"L"},
                        {"member_id": follower["member_id"], "assignment": b"F"},
                    ],
                )
            )
            return await asyncio.wait_for(waiting, timeout=2)
        finally:
            await service.stop()

    assert asyncio.run(scenario())["assignment"] == b"F"


def test_a_waiter_that_gave_up_does_not_break_later_answers() -> None:
    async def scenario() -> dict[str, Any]:
        clock = FakeClock()
        service = make_service(clock, initial_delay_ms=10)
        await service.start()
        try:
            abandoned = asyncio.create_task(service.handle(join_request()))
            await settle()
            abandoned.cancel()  # the client's connection closed
            clock.now_ms = 10
            await until_state(service, "CompletingRebalance")
            return await service.handle(build_request(ApiKey.LIST_GROUPS, 4, {"states_filter": []}))
        finally:
            await service.stop()

    listed = asyncio.run(scenario())
    assert [g["group_state"] for g in listed["groups"]] == ["CompletingRebalance"]


def test_ticker_expires_silent_members() -> None:
    async def scenario() -> dict[str, Any]:
        clock = FakeClock()
        service = make_service(clock)
        await service.start()
        try:
            joined = await service.handle(join_request())
            await service.handle(sync_request(joined, []))
            clock.now_ms = SESSION_MS
            await until_state(service, "Empty")
            return await service.handle(
                build_request(
                    ApiKey.HEARTBEAT,
                    1,
                    {
                        "group_id": "g",
                        "generation_id": joined["generation_id"],
                        "member_id": joined["member_id"],
                    },
                )
            )
        finally:
            await service.stop()

    assert asyncio.run(scenario())["error_code"] is ErrorCode.unknown_member_id


def test_open_replays_the_log_and_knows_its_apis() -> None:
    log = InMemoryStateLog()
    first = GroupService.open(log, lambda t, p: True, node_id=3, host="h", port=1)
    coordinator_of(first).commit_offsets(
        0,
        group_id="g",
        generation_id=-1,
        member_id="",
        entries=[OffsetCommitEntry("t", 0, 5)],
        timestamp_ms=0,
    )
    second = GroupService.open(log, lambda t, p: True, node_id=3, host="h", port=1)
    assert coordinator_of(second).fetch_offsets("g", None)[0][2] is not None
    assert GroupService.handles(ApiKey.OFFSET_COMMIT)
    assert not GroupService.handles(1)  # Fetch is not ours
