"""A single broker is a cluster of one: the in-process metadata tree and the
partition layer over it, driven without sockets or ZooKeeper."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path

import pytest
from kazoo.exceptions import NoNodeError

from headwater.cluster.controller import create_topic
from headwater.cluster.local_zookeeper import (
    SNAPSHOT_FILE,
    LocalClusterStore,
    LocalKazooClient,
    LocalZooKeeper,
)
from headwater.coordinator.runtime import StateTopicRuntime
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory
from headwater.protocol.error_codes import ErrorCode
from headwater.records.record import RecordBatchBuilder
from headwater.testing.cluster_of_one import cluster_of_one

NOW = 1_700_000_000_000


def _batch(n: int = 3) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(NOW + i, b"k", b"v" * 10)
    return builder.build()


def _client(tree: LocalZooKeeper) -> LocalKazooClient:
    client = LocalKazooClient(tree)
    client.start()
    return client


# -- the in-process tree ----------------------------------------------------------------


def test_persistent_znodes_survive_a_restart_with_their_versions(tmp_path: Path) -> None:
    snapshot = tmp_path / SNAPSHOT_FILE
    tree = LocalZooKeeper(snapshot)
    client = _client(tree)
    client.create_async("/brokers/topics/t", b"v0", makepath=True).get()
    client.set_async("/brokers/topics/t", b"v1").get()
    client.create_async("/controller", b"me", ephemeral=True).get()
    tree.close()

    again = LocalZooKeeper(snapshot)
    client = _client(again)
    data, stat = client.get_async("/brokers/topics/t").get()
    assert (data, stat.version) == (b"v1", 1)
    with pytest.raises(NoNodeError):  # an ephemeral lives as long as its session
        client.get_async("/controller").get()
    # zxids go on from where they were: a new znode is newer than every old one
    client.create_async("/later", b"").get()
    assert client.get_async("/later").get()[1].czxid > stat.mzxid
    again.close()


def test_changes_reach_the_snapshot_without_a_close(tmp_path: Path) -> None:
    """A kill -9 skips close(): the flusher writes each change within moments."""
    snapshot = tmp_path / SNAPSHOT_FILE
    tree = LocalZooKeeper(snapshot)
    _client(tree).create_async("/a", b"x").get()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if snapshot.exists() and "/a" in json.loads(snapshot.read_text())["nodes"]:
            break
        time.sleep(0.01)
    assert "/a" in json.loads(snapshot.read_text())["nodes"]
    tree.close()


def test_an_unreadable_snapshot_is_a_clear_error(tmp_path: Path) -> None:
    snapshot = tmp_path / SNAPSHOT_FILE
    snapshot.write_text("{not json")
    with pytest.raises(RuntimeError, match="cannot read the broker metadata"):
        LocalZooKeeper(snapshot)


def test_watches_run_on_the_event_thread_in_order(tmp_path: Path) -> None:
    tree = LocalZooKeeper(event_thread=True)
    client = _client(tree)
    client.create_async("/w", b"0").get()
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def watch(event: object) -> None:
        seen.append((threading.current_thread().name, getattr(event, "type", "")))
        done.set()

    client.get_async("/w", watch=watch).get()
    client.set_async("/w", b"1").get()
    assert done.wait(5.0)
    assert seen == [("hw-metadata-events", "CHANGED")]
    tree.close()


# -- the partition layer of a cluster of one ----------------------------------------------


def _logs(path: Path) -> LogDirectory:
    logs = LogDirectory(path, LogConfig())
    logs.open()
    return logs


def test_topics_found_on_disk_join_the_metadata_led_here(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    info = logs.create_topic("t", 2, {"retention.ms": "1000"})

    async def run() -> None:
        async with cluster_of_one(logs, tmp_path) as node:
            assignment = node.view.topics["t"]
            assert assignment.topic_id == info.topic_id
            assert dict(assignment.configs) == {"retention.ms": "1000"}
            assert assignment.replicas == {0: [0], 1: [0]}
            for p in (0, 1):
                state = node.view.partition_states[("t", p)]
                assert (state.leader, state.isr) == (0, (0,))
                assert node.replicas.serving_error("t", p) == ErrorCode.none

    asyncio.run(run())
    logs.close()
    # ...and stay there with the same id after a restart (read from the snapshot)
    logs = _logs(tmp_path)

    async def again() -> None:
        async with cluster_of_one(logs, tmp_path) as node:
            assert node.view.topics["t"].topic_id == info.topic_id

    asyncio.run(again())
    logs.close()


def test_acks_all_completes_at_once_when_the_isr_is_this_broker(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    logs.create_topic("t", 1)

    async def run() -> None:
        async with cluster_of_one(logs, tmp_path) as node:
            plog = node.replicas.leader_log("t", 0)
            assert not isinstance(plog, int)
            result = plog.append(_batch(3), NOW)
            end = result.last_offset + 1
            assert plog.high_watermark == end  # ISR = {self}: nothing to wait for
            code = await asyncio.wait_for(
                node.replicas.wait_replicated("t", 0, end, timeout_s=5.0), 1.0
            )
            assert code == ErrorCode.none

    asyncio.run(run())
    logs.close()


def test_a_topic_created_in_the_metadata_gets_a_local_log_led_here(tmp_path: Path) -> None:
    logs = _logs(tmp_path)

    async def run() -> None:
        async with cluster_of_one(logs, tmp_path) as node:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, create_topic, node.store, "new", 3, 1)
            deadline = time.monotonic() + 10.0
            while "new" not in logs.topics() or not await node.leading_everything(0.0):
                assert time.monotonic() < deadline, "the new topic was never led here"
                await asyncio.sleep(0.01)
            assert "new" in node.view.topics
            assert logs.topics()["new"].num_partitions == 3
            assert logs.topics()["new"].topic_id == node.view.topics["new"].topic_id
            with pytest.raises(Exception, match=r"(?i)replication factor"):
                await loop.run_in_executor(None, create_topic, node.store, "rf2", 1, 2)

    asyncio.run(run())
    logs.close()


def test_the_local_store_is_a_cluster_store_on_its_own_tree(tmp_path: Path) -> None:
    store = LocalClusterStore.in_dir(tmp_path)
    store.start(1.0)
    assert store.topics() == []
    topic_id = uuid.uuid4()
    store.create_topic("t", topic_id, {0: [0]}, {})
    store.close()
    again = LocalClusterStore.in_dir(tmp_path)
    again.start(1.0)
    assignment = again.topic("t")
    assert assignment is not None and assignment.topic_id == topic_id
    again.close()


def test_a_state_topic_runtime_creates_on_first_need_and_loads_on_leadership(
    tmp_path: Path,
) -> None:
    logs = _logs(tmp_path)

    async def run() -> None:
        async with cluster_of_one(logs, tmp_path) as node:
            loop = asyncio.get_running_loop()
            created: list[int] = []
            loaded: list[tuple[int, int]] = []

            def create(partitions: int) -> None:
                created.append(partitions)
                loop.run_in_executor(None, create_topic, node.store, "__state", partitions, 1)

            async def load(partition: int, _log: object, epoch: int) -> None:
                loaded.append((partition, epoch))

            runtime = StateTopicRuntime(
                "__state",
                2,
                node.view,
                node.replicas,
                logs,
                create=create,
                write_timeout_s=1.0,
                spawn=lambda coro, name: loop.create_task(coro, name=name),  # type: ignore[arg-type]
            )
            runtime.follow_leadership(load, lambda _p: None, "test-load")
            assert runtime.coordinator_of(0) is None  # not there yet: being created
            assert created == [2]
            deadline = time.monotonic() + 10.0
            while runtime.coordinator_of(1) is None or len(loaded) < 2:
                assert time.monotonic() < deadline, "never coordinated here"
                await asyncio.sleep(0.01)
            assert runtime.coordinator_of(1) == (0, "127.0.0.1", 9092)
            assert sorted(loaded) == [(0, 0), (1, 0)]
            plog = logs.log("__state", 1)
            end = plog.append(_batch(1), NOW).last_offset + 1
            assert await runtime.wait_replicated(1, end) == ErrorCode.none

    asyncio.run(run())
    logs.close()


def test_a_failed_multi_leaves_the_tree_as_it_was() -> None:
    tree = LocalZooKeeper()
    client = _client(tree)
    client.create_async("/a", b"1").get()
    client.create_async("/a/kid", b"k").get()
    txn = client.transaction()
    txn.set_data("/a", b"2")
    txn.create("/a/new", b"n")
    txn.delete("/a/kid")
    txn.check("/a", 99)  # wrong version: everything above is rolled back
    results = txn.commit()
    assert isinstance(results[-1], Exception)
    data, stat = client.get_async("/a").get()
    assert (data, stat.version, stat.cversion) == (b"1", 0, 1)
    assert client.get_children_async("/a").get() == ["kid"]
    assert client.exists_async("/a/new").get() is None
