"""TxnOffsetCommit in the group coordinator: held until the transaction's marker,
KIP-447 fencing, OffsetFetch require_stable, and replay honouring markers."""

from __future__ import annotations

import itertools
from typing import Any

from kio.schema.errors import ErrorCode

from headwater.coordinator.state_log import InMemoryStateLog, TxnLogEntry
from headwater.group.apis import GroupApis
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.protocol.apis import ApiKey
from tests.unit.test_group_apis import NODE, answer, join_data


def make(log: InMemoryStateLog | None = None) -> tuple[GroupApis, InMemoryStateLog]:
    log = log or InMemoryStateLog()
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        log,
        lambda topic, partition: topic == "orders" and partition < 2,
        now_ms=0,
        config=GroupConfig(initial_rebalance_delay_ms=0),
        member_id_factory=lambda prefix: f"{prefix}-{next(counter)}",
    )
    return GroupApis(coordinator, **NODE), log


def txn_commit(apis: GroupApis, offset: int, pid: int = 7, **extra: Any) -> list[int]:
    response = answer(
        apis,
        ApiKey.TXN_OFFSET_COMMIT,
        3,
        transactional_id="tx",
        group_id="g",
        producer_id=pid,
        producer_epoch=0,
        topics=[
            {
                "name": "orders",
                "partitions": [{"partition_index": 0, "committed_offset": offset}],
            }
        ],
        **extra,
    )
    return [p["error_code"] for t in response["topics"] for p in t["partitions"]]


def fetched(apis: GroupApis, *, stable: bool = False) -> dict[str, Any]:
    response = answer(
        apis,
        ApiKey.OFFSET_FETCH,
        7,
        group_id="g",
        topics=[{"name": "orders", "partition_indexes": [0]}],
        require_stable=stable,
    )
    partition: dict[str, Any] = response["topics"][0]["partitions"][0]
    return partition


def test_offsets_become_visible_only_on_commit() -> None:
    apis, log = make()
    assert txn_commit(apis, 42) == [ErrorCode.none]
    assert isinstance(log.entries[-1], TxnLogEntry)  # a transactional batch of producer 7
    assert fetched(apis)["committed_offset"] == -1
    assert fetched(apis, stable=True)["error_code"] is ErrorCode.unstable_offset_commit
    apis.complete_txn(7, 0, True)
    assert fetched(apis, stable=True)["committed_offset"] == 42


def test_abort_drops_them() -> None:
    apis, _ = make()
    txn_commit(apis, 42)
    apis.complete_txn(7, 0, False)
    assert fetched(apis, stable=True) == {
        **fetched(apis),
        "committed_offset": -1,
        "error_code": ErrorCode.none,
    }


def test_replay_honours_markers() -> None:
    apis, log = make()
    txn_commit(apis, 10, pid=7)
    log.append_marker(7, True)
    txn_commit(apis, 20, pid=8)
    log.append_marker(8, False)
    txn_commit(apis, 30, pid=9)  # still open when the coordinator moves
    reloaded, _ = make(log)
    assert fetched(reloaded)["committed_offset"] == 10
    assert fetched(reloaded, stable=True)["error_code"] is ErrorCode.unstable_offset_commit
    reloaded.complete_txn(9, 0, True)
    assert fetched(reloaded)["committed_offset"] == 30


def test_kip447_stale_generation_and_unknown_member_are_fenced() -> None:
    apis, _ = make()
    joined = answer(apis, ApiKey.JOIN_GROUP, 3, **join_data())
    member, generation = joined["member_id"], joined["generation_id"]
    assert txn_commit(apis, 1, generation_id=generation + 1, member_id=member) == [
        ErrorCode.illegal_generation
    ]
    assert txn_commit(apis, 1, generation_id=generation, member_id="ghost") == [
        ErrorCode.unknown_member_id
    ]
    assert txn_commit(apis, 1, generation_id=generation, member_id=member) == [ErrorCode.none]
    # Unknown partitions are answered per partition.
    response = answer(
        apis,
        ApiKey.TXN_OFFSET_COMMIT,
        0,
        transactional_id="tx",
        group_id="g",
        producer_id=7,
        producer_epoch=0,
        topics=[{"name": "nope", "partitions": [{"partition_index": 0}]}],
    )
    assert response["topics"][0]["partitions"][0]["error_code"] is (
        ErrorCode.unknown_topic_or_partition
    )


def test_fenced_static_member() -> None:
    apis, _ = make()
    joined = answer(apis, ApiKey.JOIN_GROUP, 5, **join_data(group_instance_id="i-1"))
    generation = joined["generation_id"]
    assert txn_commit(
        apis, 1, generation_id=generation, member_id="other", group_instance_id="i-1"
    ) == [ErrorCode.fenced_instance_id]


def test_find_coordinator_for_transactional_ids() -> None:
    apis, _ = make()
    waiting = answer(apis, ApiKey.FIND_COORDINATOR, 3, key="tx", key_type=1)
    assert waiting["error_code"] is ErrorCode.coordinator_not_available
    apis.transaction_coordinator_of = lambda key: (7, "txn.host", 9999) if key == "tx" else None
    found = answer(apis, ApiKey.FIND_COORDINATOR, 3, key="tx", key_type=1)
    assert (found["node_id"], found["host"], found["port"]) == (7, "txn.host", 9999)
    batched = answer(apis, ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["tx", "gone"])
    assert [(c["key"], c["error_code"], c["node_id"]) for c in batched["coordinators"]] == [
        ("tx", ErrorCode.none, 7),
        ("gone", ErrorCode.coordinator_not_available, -1),
    ]
    # Groups still go to the offsets partition's leader.
    group = answer(apis, ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0)
    assert group["node_id"] == NODE["node_id"]
