"""Groups across many offsets partitions: load, unload, routing, and replicated writes.

Sans-I/O where possible (GroupApis over CoordinatorShards, a fake `Replicated`
hook); the asyncio service only where loading and `wait_replicated` are awaited.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from headwater.coordinator.partition_state_log import PartitionStateLog
from headwater.coordinator.pending import Pending
from headwater.coordinator.placement import partition_for
from headwater.coordinator.state_log import AppendFailed, InMemoryStateLog, LogEntry
from headwater.group.apis import GroupApis
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.group.membership import GroupState
from headwater.group.offsets import OffsetCommitEntry
from headwater.group.service import GroupService
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.log import Log
from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import (
    build_request,
    build_response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

SESSION_MS = 10_000
PARTITIONS = 2
CONFIG = GroupConfig(initial_rebalance_delay_ms=0)


def group_in(partition: int, prefix: str = "group") -> str:
    """A group id that Kafka's placement puts in `partition` of PARTITIONS."""
    for i in itertools.count():
        group_id = f"{prefix}-{i}"
        if partition_for(group_id, PARTITIONS) == partition:
            return group_id
    raise AssertionError("unreachable")


G0 = group_in(0)
G1 = group_in(1)


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def make_service(
    *,
    coordinator_of: Any = None,
    wait_replicated: Any = None,
    clock: FakeClock | None = None,
) -> GroupService:
    counter = itertools.count(1)
    return GroupService.create(
        lambda topic, partition: topic == "orders",
        num_partitions=PARTITIONS,
        node_id=1,
        host="b1",
        port=9092,
        coordinator_of=coordinator_of,
        wait_replicated=wait_replicated,
        config=CONFIG,
        clock_ms=clock or FakeClock(),
        wall_clock=clock or FakeClock(),
        max_tick_interval_s=0.005,
        member_id_factory=lambda prefix: f"{prefix}-{next(counter)}",
    )


def request(api_key: int, version: int, **data: Any) -> object:
    built = build_request(api_key, version, data)
    return decode_request(api_key, version, encode_request(built))


def handle(apis: GroupApis, api_key: int, version: int, **data: Any) -> Pending[dict[str, Any]]:
    return apis.handle(request(api_key, version, **data), now_ms=0, timestamp_ms=0)  # type: ignore[return-value]


def answer(apis: GroupApis, api_key: int, version: int, **data: Any) -> dict[str, Any]:
    """An immediate answer, checked to survive encoding at this version."""
    pending = handle(apis, api_key, version, **data)
    assert pending.done
    response = pending.result()
    decode_response(api_key, version, encode_response(build_response(api_key, version, response)))
    return response


def join(group_id: str, member_id: str = "", metadata: bytes = b"") -> dict[str, Any]:
    return {
        "group_id": group_id,
        "session_timeout": SESSION_MS,
        "rebalance_timeout": SESSION_MS,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": metadata}],
    }


def commit(group_id: str, offset: int, *, generation: int = -1, member: str = "") -> dict[str, Any]:
    return {
        "group_id": group_id,
        "generation_id_or_member_epoch": generation,
        "member_id": member,
        "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": offset}]}
        ],
    }


def simple_commit(
    coordinator: GroupCoordinator, *entries: OffsetCommitEntry, group_id: str = "g"
) -> Pending[list[ErrorCode]]:
    """OffsetCommit from a consumer that manages its own partitions (generation -1,
    no member), straight to the coordinator; answered once replicated."""
    return coordinator.commit_offsets(
        0,
        group_id=group_id,
        generation_id=-1,
        member_id="",
        entries=list(entries),
        timestamp_ms=0,
    )


def commit_errors(response: dict[str, Any]) -> list[ErrorCode]:
    return [p["error_code"] for t in response["topics"] for p in t["partitions"]]


def fetched(apis: GroupApis, group_id: str) -> int:
    response = answer(
        apis,
        ApiKey.OFFSET_FETCH,
        5,
        group_id=group_id,
        topics=[{"name": "orders", "partition_indexes": [0]}],
    )
    assert response["error_code"] is ErrorCode.none
    return int(response["topics"][0]["partitions"][0]["committed_offset"])


def stable_leader(apis: GroupApis, group_id: str) -> dict[str, Any]:
    """A one-member group, Stable in generation 1."""
    joined = answer(apis, ApiKey.JOIN_GROUP, 0, **join(group_id))
    assert joined["error_code"] is ErrorCode.none
    synced = answer(
        apis,
        ApiKey.SYNC_GROUP,
        0,
        group_id=group_id,
        generation_id=joined["generation_id"],
        member_id=joined["member_id"],
        assignments=[{"member_id": joined["member_id"], "assignment": b"A"}],
    )
    assert synced["error_code"] is ErrorCode.none
    return joined


def heartbeat(apis: GroupApis, group_id: str, joined: dict[str, Any]) -> ErrorCode:
    beat = answer(
        apis,
        ApiKey.HEARTBEAT,
        0,
        group_id=group_id,
        generation_id=joined["generation_id"],
        member_id=joined["member_id"],
    )
    error: ErrorCode = beat["error_code"]
    return error


def loaded_service(**kwargs: Any) -> tuple[GroupService, list[InMemoryStateLog]]:
    service = make_service(**kwargs)
    logs = [InMemoryStateLog() for _ in range(PARTITIONS)]
    for partition, log in enumerate(logs):
        service.load_partition_now(partition, log)
    return service, logs


# ----------------------------------------------------------------- unloading


def test_unloaded_partition_answers_not_coordinator_while_the_other_keeps_working() -> None:
    service, logs = loaded_service()
    apis = service.apis
    a = stable_leader(apis, G0)
    b = stable_leader(apis, G1)
    # A second member makes G1 rebalance: its JoinGroup waits for the first to rejoin.
    waiting_join = handle(apis, ApiKey.JOIN_GROUP, 0, **join(G1))
    assert not waiting_join.done

    service.unload_partition(1)

    assert waiting_join.done
    assert waiting_join.result()["error_code"] is ErrorCode.not_coordinator
    assert heartbeat(apis, G1, b) is ErrorCode.not_coordinator
    assert commit_errors(answer(apis, ApiKey.OFFSET_COMMIT, 2, **commit(G1, 5))) == [
        ErrorCode.not_coordinator
    ]
    rejoin = answer(apis, ApiKey.JOIN_GROUP, 0, **join(G1, b["member_id"]))
    assert rejoin["error_code"] is ErrorCode.not_coordinator
    fetch = answer(apis, ApiKey.OFFSET_FETCH, 5, group_id=G1, topics=None)
    assert fetch["error_code"] is ErrorCode.not_coordinator
    assert service.shards.coordinator_for(G1) is None  # its groups left memory

    # Partition 0 is untouched.
    assert heartbeat(apis, G0, a) is ErrorCode.none
    generation, member = a["generation_id"], a["member_id"]
    assert commit_errors(
        answer(apis, ApiKey.OFFSET_COMMIT, 2, **commit(G0, 7, generation=generation, member=member))
    ) == [ErrorCode.none]
    assert fetched(apis, G0) == 7
    listed = answer(apis, ApiKey.LIST_GROUPS, 0)
    assert [g["group_id"] for g in listed["groups"]] == [G0]
    # The log of the unloaded partition still has everything for its next coordinator.
    assert logs[1].entries


def test_unload_answers_a_waiting_sync_group_with_not_coordinator() -> None:
    service, _ = loaded_service()
    apis = service.apis
    leader = stable_leader(apis, G1)
    follower_join = handle(apis, ApiKey.JOIN_GROUP, 0, **join(G1))
    leader_join = answer(apis, ApiKey.JOIN_GROUP, 0, **join(G1, leader["member_id"]))
    follower = follower_join.result()
    assert follower["generation_id"] == leader_join["generation_id"] == 2
    follower_sync = handle(
        apis,
        ApiKey.SYNC_GROUP,
        0,
        group_id=G1,
        generation_id=2,
        member_id=follower["member_id"],
        assignments=[],
    )
    assert not follower_sync.done  # waits for the leader's assignment
    service.unload_partition(1)
    assert follower_sync.result()["error_code"] is ErrorCode.not_coordinator


def test_every_group_api_answers_not_coordinator_in_its_own_shape() -> None:
    service = make_service()  # nothing loaded
    apis = service.apis
    assert answer(apis, ApiKey.SYNC_GROUP, 3, group_id=G0, generation_id=1, member_id="m")[
        "error_code"
    ] is (ErrorCode.not_coordinator)
    left = answer(apis, ApiKey.LEAVE_GROUP, 3, group_id=G0, members=[{"member_id": "m"}])
    assert left["error_code"] is ErrorCode.not_coordinator
    old_fetch = answer(
        apis,
        ApiKey.OFFSET_FETCH,
        1,
        group_id=G0,
        topics=[{"name": "orders", "partition_indexes": [0, 1]}],
    )
    assert [p["error_code"] for p in old_fetch["topics"][0]["partitions"]] == [
        ErrorCode.not_coordinator
    ] * 2
    batched = answer(
        apis,
        ApiKey.OFFSET_FETCH,
        8,
        groups=[{"group_id": G0, "topics": None}],
        require_stable=False,
    )
    assert batched["groups"][0]["error_code"] is ErrorCode.not_coordinator
    described = answer(apis, ApiKey.DESCRIBE_GROUPS, 5, groups=[G0, G1])
    assert [g["error_code"] for g in described["groups"]] == [ErrorCode.not_coordinator] * 2
    deleted = answer(apis, ApiKey.DELETE_GROUPS, 2, groups_names=[G0])
    assert deleted["results"][0]["error_code"] is ErrorCode.not_coordinator
    offset_delete = answer(
        apis,
        ApiKey.OFFSET_DELETE,
        0,
        group_id=G0,
        topics=[{"name": "orders", "partitions": [{"partition_index": 0}]}],
    )
    assert offset_delete["error_code"] is ErrorCode.not_coordinator
    # An empty group id is invalid before it is anyone's.
    assert answer(apis, ApiKey.HEARTBEAT, 0, group_id="", generation_id=1, member_id="m")[
        "error_code"
    ] is (ErrorCode.invalid_group_id)


# ------------------------------------------------------------------- loading


def offsets_log_of_many_commits(group_id: str, commits: int) -> InMemoryStateLog:
    """A partition log long enough to take several load steps; the last commit is commits-1."""
    log = InMemoryStateLog()
    writer = GroupCoordinator(log, lambda t, p: True, now_ms=0, config=CONFIG)
    for offset in range(commits):
        simple_commit(writer, OffsetCommitEntry("orders", 0, offset), group_id=group_id)
    return log


def test_groups_of_a_loading_partition_get_load_in_progress() -> None:
    async def scenario() -> None:
        service = make_service()
        big = offsets_log_of_many_commits(G1, 5000)
        service.load_partition_now(0, InMemoryStateLog())
        loading = asyncio.create_task(service.load_partition(1, big))
        await asyncio.sleep(0)
        assert service.shards.is_loading(1)
        fetch = answer(service.apis, ApiKey.OFFSET_FETCH, 5, group_id=G1, topics=None)
        assert fetch["error_code"] is ErrorCode.coordinator_load_in_progress
        join_while_loading = answer(service.apis, ApiKey.JOIN_GROUP, 0, **join(G1))
        assert join_while_loading["error_code"] is ErrorCode.coordinator_load_in_progress
        listed = answer(service.apis, ApiKey.LIST_GROUPS, 0)
        assert listed["error_code"] is ErrorCode.coordinator_load_in_progress
        stable_leader(service.apis, G0)  # the loaded partition serves meanwhile
        await loading
        assert fetched(service.apis, G1) == 4999
        assert answer(service.apis, ApiKey.LIST_GROUPS, 0)["error_code"] is ErrorCode.none

    asyncio.run(scenario())


def test_unload_during_a_load_abandons_it() -> None:
    async def scenario() -> None:
        service = make_service()
        big = offsets_log_of_many_commits(G1, 5000)
        loading = asyncio.create_task(service.load_partition(1, big))
        await asyncio.sleep(0)
        service.unload_partition(1)
        await loading
        assert not service.shards.is_loaded(1)
        fetch = answer(service.apis, ApiKey.OFFSET_FETCH, 5, group_id=G1, topics=None)
        assert fetch["error_code"] is ErrorCode.not_coordinator
        await service.load_partition(1, big)  # leadership came back
        assert fetched(service.apis, G1) == 4999

    asyncio.run(scenario())


def test_a_reloaded_partition_resumes_offsets_and_generation() -> None:
    first, logs = loaded_service()
    joined = stable_leader(first.apis, G1)
    generation, member = joined["generation_id"], joined["member_id"]
    committed = answer(
        first.apis, ApiKey.OFFSET_COMMIT, 2, **commit(G1, 42, generation=generation, member=member)
    )
    assert commit_errors(committed) == [ErrorCode.none]
    first.unload_partition(1)

    async def scenario() -> GroupService:
        second = make_service()  # another broker becomes leader of partition 1
        await second.load_partition(1, logs[1])
        return second

    second = asyncio.run(scenario())
    assert fetched(second.apis, G1) == 42
    described = answer(second.apis, ApiKey.DESCRIBE_GROUPS, 0, groups=[G1])["groups"][0]
    assert described["group_state"] == "Stable"
    assert [m["member_id"] for m in described["members"]] == [member]
    # The member carries on in its generation without rejoining.
    assert heartbeat(second.apis, G1, joined) is ErrorCode.none
    # Partition 0 was never loaded there.
    assert answer(second.apis, ApiKey.OFFSET_FETCH, 5, group_id=G0, topics=None)["error_code"] is (
        ErrorCode.not_coordinator
    )


def test_loading_an_out_of_range_partition_is_refused() -> None:
    service = make_service()
    with pytest.raises(ValueError, match="out of range"):
        service.load_partition_now(PARTITIONS, InMemoryStateLog())


# ----------------------------------------------------------- FindCoordinator


def test_find_coordinator_names_the_leader_of_each_keys_partition() -> None:
    leaders = {0: (7, "b7", 9097), 1: None}
    service = make_service(coordinator_of=leaders.get)
    batched = answer(
        service.apis, ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=[G0, G1]
    )
    assert [
        (c["key"], c["error_code"], c["node_id"], c["host"], c["port"])
        for c in batched["coordinators"]
    ] == [
        (G0, ErrorCode.none, 7, "b7", 9097),
        (G1, ErrorCode.coordinator_not_available, -1, "", -1),
    ]
    single = answer(service.apis, ApiKey.FIND_COORDINATOR, 3, key=G0, key_type=0)
    assert (single["error_code"], single["node_id"]) == (ErrorCode.none, 7)
    missing = answer(service.apis, ApiKey.FIND_COORDINATOR, 0, key=G1)
    assert missing["error_code"] is ErrorCode.coordinator_not_available


# ------------------------------------------------- writes wait for replication


class FakeReplication:
    """A `Replicated` hook whose waits the test completes by hand."""

    def __init__(self) -> None:
        self.waits: list[tuple[int, Pending[ErrorCode]]] = []

    def __call__(self, offset: int) -> Pending[ErrorCode]:
        pending: Pending[ErrorCode] = Pending()
        self.waits.append((offset, pending))
        return pending

    def resolve(self, error: ErrorCode = ErrorCode.none) -> int:
        offset, pending = self.waits.pop(0)
        pending.complete(error)
        return offset


def replicated_coordinator() -> tuple[GroupCoordinator, FakeReplication, InMemoryStateLog]:
    replication = FakeReplication()
    log = InMemoryStateLog()
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        log,
        lambda topic, partition: topic == "orders",
        now_ms=0,
        config=CONFIG,
        replicated=replication,
        member_id_factory=lambda prefix: f"m-{next(counter)}",
    )
    return coordinator, replication, log


def test_a_commit_is_answered_only_once_replicated() -> None:
    coordinator, replication, log = replicated_coordinator()
    pending = simple_commit(coordinator, OffsetCommitEntry("orders", 0, 9))
    assert not pending.done
    assert coordinator.fetch_offsets("g", [("orders", 0)])[0][2] is None  # not visible yet
    assert replication.resolve() == len(log.entries)  # waited for the offset after the write
    assert pending.result() == [ErrorCode.none]
    committed = coordinator.fetch_offsets("g", [("orders", 0)])[0][2]
    assert committed is not None and committed.offset == 9


@pytest.mark.parametrize(
    ("replication_error", "answered"),
    [
        (ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available),
        (ErrorCode.request_timed_out, ErrorCode.coordinator_not_available),
        (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator),
        (ErrorCode.message_too_large, ErrorCode.invalid_commit_offset_size),
    ],
)
def test_a_commit_that_fails_to_replicate_maps_the_error(
    replication_error: ErrorCode, answered: ErrorCode
) -> None:
    coordinator, replication, _ = replicated_coordinator()
    pending = simple_commit(
        coordinator, OffsetCommitEntry("orders", 0, 9), OffsetCommitEntry("missing", 0, 1)
    )
    replication.resolve(replication_error)
    assert pending.result() == [answered, ErrorCode.unknown_topic_or_partition]
    assert coordinator.fetch_offsets("g", [("orders", 0)])[0][2] is None


def test_a_group_whose_first_commit_is_replicating_is_not_removed_as_idle() -> None:
    """Kafka counts pending commits as offsets (GroupMetadata.hasOffsets): a tick
    while the commit replicates must not forget the group it created."""
    coordinator, replication, _ = replicated_coordinator()
    pending = simple_commit(coordinator, OffsetCommitEntry("orders", 0, 9))
    coordinator.tick(1)
    replication.resolve()
    assert pending.result() == [ErrorCode.none]
    assert [g.group_id for g in coordinator.list_groups()] == ["g"]
    coordinator.tick(2)
    assert [g.group_id for g in coordinator.list_groups()] == ["g"]


def test_a_group_whose_only_commit_failed_to_replicate_is_removed_as_idle() -> None:
    coordinator, replication, _ = replicated_coordinator()
    simple_commit(coordinator, OffsetCommitEntry("orders", 0, 9))
    replication.resolve(ErrorCode.not_enough_replicas)
    coordinator.tick(1)
    assert coordinator.list_groups() == []


def test_the_leaders_assignment_is_answered_once_replicated() -> None:
    coordinator, replication, _ = replicated_coordinator()
    members = two_members_completing_rebalance(coordinator)
    follower_sync, leader_sync = sync_both(coordinator, members)
    assert not follower_sync.done and not leader_sync.done
    assert state_of(coordinator) is GroupState.COMPLETING_REBALANCE
    replication.resolve()
    assert leader_sync.result().assignment == b"L"
    assert follower_sync.result().assignment == b"F"
    assert state_of(coordinator) is GroupState.STABLE


@pytest.mark.parametrize(
    ("replication_error", "answered"),
    [
        (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator),
        (ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available),
        (ErrorCode.request_timed_out, ErrorCode.coordinator_not_available),
    ],
)
def test_a_failed_assignment_write_sends_the_group_back_to_rebalance(
    replication_error: ErrorCode, answered: ErrorCode
) -> None:
    coordinator, replication, _ = replicated_coordinator()
    members = two_members_completing_rebalance(coordinator)
    follower_sync, leader_sync = sync_both(coordinator, members)
    replication.resolve(replication_error)
    assert leader_sync.result().error is answered
    assert follower_sync.result().error is answered
    assert state_of(coordinator) is GroupState.PREPARING_REBALANCE


def state_of(coordinator: GroupCoordinator) -> GroupState:
    group = coordinator.group("g")
    assert group is not None
    return group.state


def two_members_completing_rebalance(coordinator: GroupCoordinator) -> list[Any]:
    def join_group(member_id: str = "") -> Any:
        return coordinator.join_group(
            0,
            group_id="g",
            member_id=member_id,
            protocol_type="consumer",
            protocols=[("range", b"")],
            session_timeout_ms=SESSION_MS,
            require_known_member_id=False,
        )

    first = join_group().result()
    second = join_group()
    first_again = join_group(first.member_id).result()
    joined = [first_again, second.result()]
    assert {j.generation_id for j in joined} == {2}
    return joined


def sync_both(coordinator: GroupCoordinator, members: list[Any]) -> tuple[Any, Any]:
    leader = next(m for m in members if m.leader_id == m.member_id)
    follower = next(m for m in members if m is not leader)

    def sync(member: Any, assignments: list[tuple[str, bytes]]) -> Any:
        return coordinator.sync_group(
            0,
            group_id="g",
            generation_id=member.generation_id,
            member_id=member.member_id,
            assignments=assignments,
        )

    follower_sync = sync(follower, [])
    leader_sync = sync(leader, [(leader.member_id, b"L"), (follower.member_id, b"F")])
    return follower_sync, leader_sync


def test_the_service_awaits_wait_replicated_before_answering_a_commit() -> None:
    async def scenario() -> None:
        waits: list[tuple[int, int, asyncio.Future[int]]] = []

        def wait_replicated(partition: int, offset: int) -> Awaitable[int]:
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            waits.append((partition, offset, future))
            return future

        service, logs = loaded_service(wait_replicated=wait_replicated)
        await service.start()
        try:
            ok = asyncio.create_task(
                service.handle(request(ApiKey.OFFSET_COMMIT, 2, **commit(G1, 3)))
            )
            await asyncio.sleep(0.01)
            assert not ok.done()
            assert [(p, o) for p, o, _ in waits] == [(1, len(logs[1].entries))]
            waits.pop()[2].set_result(0)
            assert commit_errors(await ok) == [ErrorCode.none]
            assert fetched(service.apis, G1) == 3

            moved = asyncio.create_task(
                service.handle(request(ApiKey.OFFSET_COMMIT, 2, **commit(G0, 4)))
            )
            await asyncio.sleep(0.01)
            waits.pop()[2].set_result(int(ErrorCode.not_leader_or_follower))
            assert commit_errors(await moved) == [ErrorCode.not_coordinator]
            assert fetched(service.apis, G0) == -1
        finally:
            await service.stop()

    asyncio.run(scenario())


def test_without_wait_replicated_writes_count_as_replicated_at_once() -> None:
    service, _ = loaded_service()
    response = answer(service.apis, ApiKey.OFFSET_COMMIT, 2, **commit(G0, 11))
    assert commit_errors(response) == [ErrorCode.none]
    assert fetched(service.apis, G0) == 11


# ------------------------------------------------------ the log refuses a write


class RefusingLog(InMemoryStateLog):
    """An offsets log that refuses writes while `refuse` is set (not leader, too large...)."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: ErrorCode | None = None

    def append(self, entries: Sequence[LogEntry]) -> int:
        if self.refuse is not None:
            raise AppendFailed(self.refuse)
        return super().append(entries)


def refusing_coordinator() -> tuple[GroupCoordinator, RefusingLog]:
    log = RefusingLog()
    coordinator = GroupCoordinator(log, lambda topic, partition: True, now_ms=0, config=CONFIG)
    return coordinator, log


def test_a_refused_commit_is_answered_with_the_coordinators_error() -> None:
    coordinator, log = refusing_coordinator()
    log.refuse = ErrorCode.message_too_large
    pending = simple_commit(coordinator, OffsetCommitEntry("orders", 0, 1))
    assert pending.result() == [ErrorCode.invalid_commit_offset_size]
    assert coordinator.fetch_offsets("g", None) == []


def test_a_refused_assignment_is_answered_and_the_group_rebalances() -> None:
    coordinator, log = refusing_coordinator()
    members = two_members_completing_rebalance(coordinator)
    log.refuse = ErrorCode.not_leader_or_follower
    follower_sync, leader_sync = sync_both(coordinator, members)
    assert leader_sync.result().error is ErrorCode.not_coordinator
    assert follower_sync.result().error is ErrorCode.not_coordinator
    assert state_of(coordinator) is GroupState.PREPARING_REBALANCE


def test_a_refused_group_deletion_keeps_the_group() -> None:
    coordinator, log = refusing_coordinator()
    simple_commit(coordinator, OffsetCommitEntry("orders", 0, 1))
    log.refuse = ErrorCode.kafka_storage_error
    assert coordinator.delete_groups(["g"]) == [ErrorCode.not_coordinator]
    assert coordinator.delete_offsets("g", [("orders", 0)]) == (ErrorCode.not_coordinator, [])
    assert coordinator.fetch_offsets("g", [("orders", 0)])[0][2] is not None
    log.refuse = None
    assert coordinator.delete_groups(["g"]) == [ErrorCode.none]


def test_the_partition_adapter_turns_log_errors_into_append_failed(tmp_path: Path) -> None:
    log = Log(
        tmp_path / "__consumer_offsets-0", LogConfig(max_message_bytes=200), FileHandleCache(4)
    )
    offsets_log = PartitionStateLog(log)
    assert offsets_log.append([(b"k", b"v")]) == 1
    assert offsets_log.append([(b"k2", None), (b"k3", b"w")]) == 3  # the next offset after
    with pytest.raises(AppendFailed) as refused:
        offsets_log.append([(b"big", b"x" * 500)])
    assert refused.value.error is ErrorCode.message_too_large
    assert list(offsets_log.replay()) == [(b"k", b"v"), (b"k2", None), (b"k3", b"w")]
    log.close()
