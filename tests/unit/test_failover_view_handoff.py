"""A failover's burst of partition states reaches the loop with one wake-up, not one each.

Why: a failover rewrites every partition's state; each arrives through its own
ZooKeeper watch on kazoo's threads. Handing each to the event loop with its own
``call_soon_threadsafe`` cost a socket write, a handle and a loop wake-up per
partition (issue 33 item 2). The view's inbox wakes the loop once per burst:
the count of wake-ups must not grow with the number of partitions.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from headwater.cluster import cluster_view
from headwater.cluster.cluster_view import ClusterChange, ClusterView
from headwater.cluster.store import (
    BrokerRegistration,
    ControllerFence,
    PartitionState,
    PartitionStateWrite,
)
from headwater.testing import FakeZooKeeper, InMemoryClusterStore

TOPIC_ID = uuid.UUID(int=33)


def started(zk: FakeZooKeeper) -> InMemoryClusterStore:
    store = InMemoryClusterStore(zk)
    store.start()
    return store


def cluster_with(partitions: int) -> tuple[InMemoryClusterStore, ControllerFence, FakeZooKeeper]:
    zk = FakeZooKeeper()
    admin = started(zk)
    for broker in (1, 2):
        admin.register_broker(BrokerRegistration(broker, "127.0.0.1", 9000 + broker))
    admin.create_topic("t", TOPIC_ID, {p: [1, 2] for p in range(partitions)}, {})
    fence = admin.try_become_controller(1)
    assert fence is not None
    admin.write_partition_states(
        fence,
        [
            PartitionStateWrite("t", p, PartitionState(1, 0, (1, 2), fence.epoch), None)
            for p in range(partitions)
        ],
    )
    return admin, fence, zk


def fail_over(admin: InMemoryClusterStore, fence: ControllerFence, partitions: int) -> None:
    """Broker 1 is gone: broker 2 leads every partition at epoch 1 (one state write each)."""
    admin.write_partition_states(
        fence,
        [
            PartitionStateWrite("t", p, PartitionState(2, 1, (2,), fence.epoch), 0)
            for p in range(partitions)
        ],
    )


async def settle(view: ClusterView, partitions: int) -> None:
    for _ in range(10 + partitions // cluster_view.INBOX_SLICE):
        await asyncio.sleep(0)


def wakeups_for_a_failover(partitions: int) -> tuple[int, list[ClusterChange], ClusterView]:
    """Loop wake-ups while every state changes before the loop gets a turn (kazoo's
    threads deliver faster than a busy loop takes them)."""
    admin, fence, zk = cluster_with(partitions)

    async def main() -> tuple[int, list[ClusterChange], ClusterView]:
        view = ClusterView(started(zk))
        await view.start()
        await settle(view, partitions)
        changes: list[ClusterChange] = []
        view.on_change(changes.append)
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe
        woken = 0

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal woken
            woken += 1
            return real(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
        try:
            fail_over(admin, fence, partitions)  # the fake fires every watch right here
            await settle(view, partitions)
        finally:
            loop.call_soon_threadsafe = real  # type: ignore[method-assign]
        view.stop()
        return woken, changes, view

    return asyncio.run(main())


def test_a_burst_of_states_wakes_the_loop_once_whatever_the_partition_count() -> None:
    small, _, view_small = wakeups_for_a_failover(200)
    large, changes_large, view_large = wakeups_for_a_failover(2000)
    assert small == large == 1  # was one per partition: 200 and 2000
    for view, n in ((view_small, 200), (view_large, 2000)):
        assert all(view.leader("t", p) == 2 for p in range(n))
        assert {s.leader_epoch for s in view.partition_states.values()} == {1}
    assert set().union(*(c.partitions_changed for c in changes_large)) == {
        ("t", p) for p in range(2000)
    }


def test_updates_keep_their_order_across_threads_and_slices() -> None:
    """The last state written is the state seen, even when the burst spans several
    turns of the loop (more than ``INBOX_SLICE`` updates) and comes from another thread."""
    partitions = cluster_view.INBOX_SLICE + 300
    admin, fence, zk = cluster_with(partitions)

    async def main() -> ClusterView:
        view = ClusterView(started(zk))
        await view.start()

        def twice() -> None:
            fail_over(admin, fence, partitions)
            admin.write_partition_states(
                fence,
                [
                    PartitionStateWrite("t", p, PartitionState(2, 2, (2,), fence.epoch), 1)
                    for p in range(partitions)
                ],
            )

        await asyncio.to_thread(twice)
        await settle(view, 2 * partitions)
        view.stop()
        return view

    view = asyncio.run(main())
    assert {s.leader_epoch for s in view.partition_states.values()} == {2}
    assert len(view.partition_states) == partitions
