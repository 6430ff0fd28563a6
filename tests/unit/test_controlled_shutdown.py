"""A broker's controlled shutdown (ClusterNode) against a controller on the in-memory ZooKeeper."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from headwater.cluster.cluster_view import ClusterView
from headwater.cluster.controller import Controller, create_topic
from headwater.cluster.node import ClusterNode, ControlledShutdownConfig, ControllerConfig
from headwater.cluster.replica_manager import ReplicaManager, ReplicationConfig
from headwater.cluster.store import BrokerRegistration
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory
from headwater.testing import FakeZooKeeper, InMemoryClusterStore

ME = 1


def _registered(zk: FakeZooKeeper, broker_id: int) -> InMemoryClusterStore:
    store = InMemoryClusterStore(zk)
    store.start()
    store.register_broker(BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id))
    return store


def _three_brokers(tmp_path: Path, replicas: list[int]) -> tuple[Controller, ClusterNode]:
    """Brokers 2 (the controller), 3 and ME, topic ``t`` with one partition on
    ``replicas``; ME's node, not yet started."""
    zk = FakeZooKeeper()
    other = _registered(zk, 2)
    controller = Controller(other, 2)
    controller.start()
    _registered(zk, 3)
    mine = _registered(zk, ME)
    create_topic(other, "t", 1, 3, replica_assignment={0: replicas})
    assert controller.wait_idle()
    return controller, _member(tmp_path, mine)


def _member(tmp_path: Path, store: InMemoryClusterStore) -> ClusterNode:
    """Broker ME of a three-broker cluster, its ZooKeeper replaced by the in-memory one."""
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    node = ClusterNode(
        ME,
        "127.0.0.1:2181",
        logs,
        tmp_path,
        session_timeout_ms=6_000,
        connect_timeout_ms=6_000,
        replication=ReplicationConfig(),
        controller=ControllerConfig(),
    )
    node.store = store
    node.view = ClusterView(store)
    node.replicas = ReplicaManager(
        ME, logs, node.view, store, ReplicationConfig(), data_dir=tmp_path
    )
    node.joined = True
    return node


def test_a_follower_whose_view_fell_behind_reads_the_controllers_decision(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The controller takes this follower out of the ISR, but the watch that would
    tell its view is lost: the shutdown reads the state from ZooKeeper and ends at
    once, instead of waiting out every attempt (it once stopped 25 s late)."""
    controller, node = _three_brokers(tmp_path, [2, ME, 3])

    async def main() -> bool:
        await node.view.start()
        key = ("t", 0)
        assert node.view.partition_states[key].isr == (2, ME, 3)
        node.view._partition_watches[key].cancel()  # type: ignore[union-attr]
        return await node.controlled_shutdown(
            ControlledShutdownConfig(max_retries=1, retry_backoff_ms=0, attempt_timeout_ms=3_000)
        )

    try:
        with caplog.at_level(logging.INFO, logger="headwater.cluster.node"):
            assert asyncio.run(main()) is True
        assert node.view.partition_states[("t", 0)].isr == (2, 3)
        messages = [r.getMessage() for r in caplog.records]
        assert any("view of 1 partition(s) was behind ZooKeeper: t-0" in m for m in messages)
        assert any("controlled shutdown succeeded" in m for m in messages)
    finally:
        node.view.stop()
        controller.stop()
        node.logs.close()


def test_a_view_that_keeps_up_needs_no_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    controller, node = _three_brokers(tmp_path, [ME, 2, 3])

    async def main() -> bool:
        await node.view.start()
        return await node.controlled_shutdown(ControlledShutdownConfig(max_retries=1))

    try:
        with caplog.at_level(logging.INFO, logger="headwater.cluster.node"):
            assert asyncio.run(main()) is True
        state = node.view.partition_states[("t", 0)]
        assert state.leader == 2 and ME not in state.isr  # leadership moved by the controller
        assert not any("was behind" in r.getMessage() for r in caplog.records)
    finally:
        node.view.stop()
        controller.stop()
        node.logs.close()
