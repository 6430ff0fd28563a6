"""ClusterView on the in-memory ZooKeeper: snapshot, coalesced changes on the loop."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from headwater.cluster import cluster_view, zk_layout
from headwater.cluster.cluster_view import ClusterChange, ClusterView
from headwater.cluster.controller import Controller, create_topic
from headwater.cluster.store import (
    BrokerRegistration,
    PartitionState,
    PartitionStateWrite,
    SessionEvent,
)
from headwater.testing import FakeZooKeeper, InMemoryClusterStore
from tests.unit.test_replica_manager_faults import eventually


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


def paths_requested(client: Any, method: str, suffix: str) -> list[str]:
    """From now on, the paths ending in ``suffix`` that ``client.<method>`` is called
    with (the call itself goes through)."""
    paths: list[str] = []
    request = getattr(client, method)

    def recorded(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith(suffix):
            paths.append(path)
        return request(path, *args, **kwargs)

    setattr(client, method, recorded)
    return paths


def test_a_new_partition_costs_each_broker_one_read_of_its_state() -> None:
    """Issue 33: a view watches a partition's state only once the partition's znode is
    listed (the controller creates it with the first state). Armed as soon as the
    topic was known, each state watch of a new topic first failed (no znode yet),
    then set an exists watch, got its event and read again: four ZooKeeper messages
    per partition and broker where one does. Here the topic is known to the view
    before any state is written, so the old way would have made 40 exists calls."""
    zk = FakeZooKeeper()
    admin = started(zk, 1)
    fence = admin.try_become_controller(1)
    assert fence is not None
    partitions = 40

    async def main() -> None:
        store = started(zk)
        view = ClusterView(store)
        await view.start()
        reads = paths_requested(store.client, "get_async", "/state")
        exists = paths_requested(store.client, "exists_async", "/state")
        await asyncio.to_thread(
            admin.create_topic, "new", uuid.uuid4(), {p: [1] for p in range(partitions)}, {}
        )
        assert await eventually(lambda: "new" in view.topics)
        await asyncio.to_thread(
            admin.write_partition_states,
            fence,
            [
                PartitionStateWrite("new", p, PartitionState(1, 0, (1,), fence.epoch), None)
                for p in range(partitions)
            ],
        )
        assert await eventually(lambda: all(view.leader("new", p) == 1 for p in range(partitions)))
        assert exists == []  # no watch waited on a znode not created yet
        assert sorted(reads) == sorted(
            zk_layout.partition_state_path("new", p) for p in range(partitions)
        )  # one read per partition
        view.stop()

    asyncio.run(main())


def test_a_topic_over_the_listing_bound_is_watched_partition_by_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Listing a topic's partitions re-reads the whole list once per batch the
    controller writes: work that grows with the square of the topic's size (a
    100,000-partition topic on a cluster of one: 54 s instead of 17 s to be known).
    Over ``LISTED_PARTITIONS_MAX`` the view watches each state at once and never
    lists the topic; under it, it lists. Bound lowered to 30 here."""
    monkeypatch.setattr(cluster_view, "LISTED_PARTITIONS_MAX", 30)
    zk = FakeZooKeeper()
    admin = started(zk, 1)
    controller = Controller(admin, 1)
    controller.start()

    async def main() -> None:
        store = started(zk)
        view = ClusterView(store)
        await view.start()
        listed = paths_requested(store.client, "get_children_async", "/partitions")
        for name, partitions in (("big", 40), ("small", 20)):
            await asyncio.to_thread(create_topic, admin, name, partitions, 1)
            await asyncio.to_thread(controller.wait_idle)
            assert await eventually(
                lambda n=name, k=partitions: all(view.leader(n, p) == 1 for p in range(k))  # type: ignore[misc]
            )
        assert listed and all(path.endswith("/small/partitions") for path in listed)
        view.stop()

    asyncio.run(main())
    controller.stop()
