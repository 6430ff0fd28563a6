"""Kafka's ACL check points for the transaction APIs (TRANSACTIONAL_ID WRITE/DESCRIBE,
topic WRITE, group READ), through the real handlers and coordinator, without sockets."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from headwater.broker.handlers.group_authorization import authorize_group_request
from headwater.broker.handlers.transactions import TransactionApis
from headwater.coordinator.state_log import InMemoryStateLog
from headwater.protocol.apis import ApiKey
from headwater.txn.marker_sender import MarkerSender
from headwater.txn.service import TransactionCoordinatorService, TxnConfig
from tests.unit.test_group_authorization import RT, Op, ctx_for, req

WRITE_ID = (RT.TRANSACTIONAL_ID, "tx", Op.WRITE)


def make_apis() -> tuple[TransactionApis, TransactionCoordinatorService]:
    ids = itertools.count(10)
    service = TransactionCoordinatorService(
        node_id=1,
        host="h",
        port=1,
        config=TxnConfig(num_partitions=1),
        new_producer_id=lambda: next(ids),
        markers=MarkerSender(1, lambda: None, partition_exists=lambda t, p: True),
    )
    apis = TransactionApis(
        service,
        lambda topic, partition: topic in ("ok", "secret") and partition == 0,
        lambda: 50,
        lambda ctx, request: {"error_code": 0, "producer_id": 99, "producer_epoch": 0},
    )
    return apis, service


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_init_producer_id_needs_write_on_the_transactional_id() -> None:
    async def go() -> None:
        apis, service = make_apis()
        await service.load_partition(0, InMemoryStateLog(), 0)
        body = {"transactional_id": "tx", "transaction_timeout": 5000}
        init = req(ApiKey.INIT_PRODUCER_ID, 4, body)
        denied = await apis.init_producer_id(ctx_for(ApiKey.INIT_PRODUCER_ID, 4), init)
        assert denied["error_code"] == 53
        allowed = await apis.init_producer_id(ctx_for(ApiKey.INIT_PRODUCER_ID, 4, WRITE_ID), init)
        assert (allowed["error_code"], allowed["producer_id"]) == (0, 10)
        # No transactional id: the idempotent path, unchanged.
        idempotent = req(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None})
        plain = await apis.init_producer_id(ctx_for(ApiKey.INIT_PRODUCER_ID, 4), idempotent)
        assert plain["producer_id"] == 99
        await service.stop()

    run(go())


def test_add_partitions_unauthorized_topic_fails_the_request() -> None:
    async def go() -> None:
        apis, service = make_apis()
        await service.load_partition(0, InMemoryStateLog(), 0)
        ctx = ctx_for(ApiKey.INIT_PRODUCER_ID, 4, WRITE_ID)
        init = await apis.init_producer_id(
            ctx, req(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "tx",
                                                  "transaction_timeout": 5000})
        )  # fmt: skip
        body = {
            "v3_and_below_transactional_id": "tx",
            "v3_and_below_producer_id": init["producer_id"],
            "v3_and_below_producer_epoch": init["producer_epoch"],
            "v3_and_below_topics": [
                {"name": "ok", "partitions": [0]},
                {"name": "secret", "partitions": [0]},
            ],
        }
        add = req(ApiKey.ADD_PARTITIONS_TO_TXN, 3, body)
        grants = (WRITE_ID, (RT.TOPIC, "ok", Op.WRITE))
        answer = await apis.add_partitions_to_txn(
            ctx_for(ApiKey.ADD_PARTITIONS_TO_TXN, 3, *grants), add
        )
        codes = {
            (t["name"], p["partition_index"]): p["partition_error_code"]
            for t in answer["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]
        }
        assert codes == {("ok", 0): 55, ("secret", 0): 29}
        meta = service.transaction("tx")
        assert meta is not None and meta.partitions == set()  # nothing was added
        no_id = await apis.add_partitions_to_txn(ctx_for(ApiKey.ADD_PARTITIONS_TO_TXN, 3), add)
        assert {
            p["partition_error_code"]
            for t in no_id["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]
        } == {53}
        await service.stop()

    run(go())


def test_add_offsets_needs_read_on_the_group_and_end_txn_write_on_the_id() -> None:
    async def go() -> None:
        apis, service = make_apis()
        await service.load_partition(0, InMemoryStateLog(), 0)
        add = req(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "tx", "producer_id": 1,
                                                 "producer_epoch": 0, "group_id": "g"})  # fmt: skip
        denied = await apis.add_offsets_to_txn(ctx_for(ApiKey.ADD_OFFSETS_TO_TXN, 3, WRITE_ID), add)
        assert denied["error_code"] == 30
        end = req(ApiKey.END_TXN, 3, {"transactional_id": "tx", "producer_id": 1,
                                      "producer_epoch": 0, "committed": True})  # fmt: skip
        assert (await apis.end_txn(ctx_for(ApiKey.END_TXN, 3), end))["error_code"] == 53
        unknown = await apis.end_txn(ctx_for(ApiKey.END_TXN, 3, WRITE_ID), end)
        assert unknown["error_code"] == 49  # INVALID_PRODUCER_ID_MAPPING
        await service.stop()

    run(go())


def test_describe_and_list_need_describe() -> None:
    async def go() -> None:
        apis, service = make_apis()
        await service.load_partition(0, InMemoryStateLog(), 0)
        await service.init_producer_id("tx", 5000, None)
        await service.init_producer_id("other", 5000, None)
        ctx = ctx_for(ApiKey.LIST_TRANSACTIONS, 1, (RT.TRANSACTIONAL_ID, "tx", Op.DESCRIBE))
        listed = apis.list_transactions(ctx, req(ApiKey.LIST_TRANSACTIONS, 1, {}))
        assert [t["transactional_id"] for t in listed["transaction_states"]] == ["tx"]
        described = apis.describe_transactions(
            ctx_for(ApiKey.DESCRIBE_TRANSACTIONS, 0, (RT.TRANSACTIONAL_ID, "tx", Op.DESCRIBE)),
            req(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx", "other"]}),
        )
        assert [s["error_code"] for s in described["transaction_states"]] == [0, 53]
        await service.stop()

    run(go())


def test_txn_offset_commit_needs_write_on_the_id_and_read_on_group_and_topics() -> None:
    body = {"transactional_id": "tx", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
            "topics": [{"name": "ok", "partitions": [{"partition_index": 0}]},
                       {"name": "secret", "partitions": [{"partition_index": 0}]}]}  # fmt: skip
    commit = req(ApiKey.TXN_OFFSET_COMMIT, 3, body)
    no_id = authorize_group_request(ctx_for(ApiKey.TXN_OFFSET_COMMIT, 3), commit)
    assert no_id.response is not None
    assert {p["error_code"] for t in no_id.response["topics"] for p in t["partitions"]} == {53}
    no_group = authorize_group_request(ctx_for(ApiKey.TXN_OFFSET_COMMIT, 3, WRITE_ID), commit)
    assert no_group.response is not None
    assert {p["error_code"] for t in no_group.response["topics"] for p in t["partitions"]} == {30}
    split = authorize_group_request(
        ctx_for(
            ApiKey.TXN_OFFSET_COMMIT, 3, WRITE_ID, (RT.GROUP, "g", Op.READ),
            (RT.TOPIC, "ok", Op.READ),
        ),
        commit,
    )  # fmt: skip
    assert split.response is None
    assert [t.name for t in split.request.topics] == ["ok"]
    merged = split.finish({"topics": [{"name": "ok", "partitions": [
        {"partition_index": 0, "error_code": 0}]}]})  # fmt: skip
    errors = {t["name"]: t["partitions"][0]["error_code"] for t in merged["topics"]}
    assert errors == {"ok": 0, "secret": 29}
