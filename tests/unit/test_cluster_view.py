"""ClusterView on the in-memory ZooKeeper: snapshot, coalesced changes on the loop."""

from __future__ import annotations

import asyncio
import threading
import uuid

from headwater.cluster.cluster_view import ClusterChange, ClusterView
from headwater.cluster.controller import Controller, create_topic
from headwater.cluster.store import (
    BrokerRegistration,
    PartitionState,
    PartitionStateWrite,
    SessionEvent,
)
from headwater.testing import FakeZooKeeper, InMemoryClusterStore


def started(zk: FakeZooKeeper, broker_id: int | None = None) -> InMemoryClusterStore:
    store = InMemoryClusterStore(zk)
    store.start()
    if broker_id is not None:
        store.register_broker(BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id))
    return store


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_snapshot_at_start_and_changes_on_the_loop_thread() -> None:
    zk = FakeZooKeeper()
    admin = started(zk, 1)
    controller = Controller(admin, 1)
    controller.start()
    create_topic(admin, "old", 2, 1)
    assert controller.wait_idle()

    async def main() -> list[ClusterChange]:
        view = ClusterView(started(zk))
        await view.start()
        assert set(view.brokers) == {1}
        assert view.controller_id == 1
        assert set(view.topics) == {"old"}
        assert view.leader("old", 0) == 1 and view.leader("old", 1) == 1
        changes: list[ClusterChange] = []
        loop_thread = threading.get_ident()

        def listener(change: ClusterChange) -> None:
            assert threading.get_ident() == loop_thread
            changes.append(change)

        view.on_change(listener)
        # Changes made from another thread (as kazoo's would arrive).
        await asyncio.to_thread(create_topic, admin, "new", 2, 1)
        await asyncio.to_thread(controller.wait_idle)
        await settle()
        assert view.leader("new", 1) == 1
        assert view.partition_states[("new", 0)].isr == (1,)
        await asyncio.to_thread(started, zk, 2)
        await settle()
        assert set(view.brokers) == {1, 2}
        await asyncio.to_thread(admin.set_topic_configs, "new", {"retention.ms": "1"})
        await settle()
        assert view.topics["new"].configs == {"retention.ms": "1"}
        await asyncio.to_thread(admin.delete_topic, "old")
        await asyncio.to_thread(controller.wait_idle)
        await settle()
        assert set(view.topics) == {"new"}
        assert ("old", 0) not in view.partition_states
        view.stop()
        return changes

    changes = asyncio.run(main())
    controller.stop()
    assert any(c.topics_added == {"new"} for c in changes)
    assert {("new", 0), ("new", 1)} <= set().union(*(c.partitions_changed for c in changes))
    assert any(c.brokers_changed for c in changes)
    assert any(c.configs_changed == {"new"} for c in changes)
    assert any(c.topics_removed == {"old"} for c in changes)


def test_updates_in_one_loop_iteration_are_one_change() -> None:
    zk = FakeZooKeeper()
    admin = started(zk)
    fence = admin.try_become_controller(1)
    assert fence is not None
    admin.create_topic("t", uuid.uuid4(), {0: [1], 1: [1]}, {})
    admin.write_partition_states(
        fence, [PartitionStateWrite("t", p, PartitionState(1, 0, (1,), 0), None) for p in (0, 1)]
    )

    async def main() -> list[ClusterChange]:
        view = ClusterView(started(zk))
        await view.start()
        changes: list[ClusterChange] = []
        view.on_change(changes.append)
        # Both writes land (watch callbacks run here, synchronously) before the loop runs.
        admin.update_partition_state("t", 0, PartitionState(1, 1, (1,), 1), 0)
        admin.update_partition_state("t", 1, PartitionState(1, 1, (1,), 1), 0)
        await settle()
        view.stop()
        admin.update_partition_state("t", 1, PartitionState(1, 2, (1,), 1), 1)
        await settle()
        assert view.partition_states[("t", 1)].leader_epoch == 1  # stopped: no more updates
        return changes

    changes = asyncio.run(main())
    assert changes == [ClusterChange(partitions_changed=frozenset({("t", 0), ("t", 1)}))]


def test_session_events_reach_the_loop() -> None:
    zk = FakeZooKeeper()
    store = started(zk, 1)

    async def main() -> list[SessionEvent]:
        view = ClusterView(store)
        await view.start()
        events: list[SessionEvent] = []
        view.on_session(events.append)
        await asyncio.to_thread(store.expire_session)
        await settle()
        view.stop()
        return events

    assert asyncio.run(main()) == [SessionEvent.LOST, SessionEvent.RESTORED]
    assert set(started(zk).brokers()) == {1}  # re-registered on the new session
