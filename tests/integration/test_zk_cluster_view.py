"""ClusterView on a real ZooKeeper: changes made through another session reach the
view's subscribers on the event loop thread."""

from __future__ import annotations

import asyncio
import threading

from headwater.cluster.cluster_view import ClusterChange, ClusterView
from headwater.cluster.controller import Controller, create_topic
from headwater.cluster.store import BrokerRegistration, PartitionState, ZkClusterStore


async def wait_for_change(
    changes: asyncio.Queue[ClusterChange], predicate: object, timeout: float = 10.0
) -> ClusterChange:
    async def loop() -> ClusterChange:
        while True:
            change = await changes.get()
            if predicate(change):  # type: ignore[operator]
                return change

    return await asyncio.wait_for(loop(), timeout)


def test_store_changes_reach_the_view_on_the_loop(zk_connect: str) -> None:
    admin = ZkClusterStore(zk_connect, session_timeout_ms=2000)
    admin.start(timeout=10)
    admin.register_broker(BrokerRegistration(1, "127.0.0.1", 9001))
    controller = Controller(admin, 1)
    controller.start()
    create_topic(admin, "before", 3, 1)
    assert controller.wait_idle()

    async def main() -> None:
        store = ZkClusterStore(zk_connect, session_timeout_ms=2000)
        await asyncio.to_thread(store.start, 10)
        view = ClusterView(store)
        await view.start()
        try:
            assert set(view.topics) == {"before"}
            assert all(view.leader("before", p) == 1 for p in range(3))
            changes: asyncio.Queue[ClusterChange] = asyncio.Queue()
            loop_thread = threading.get_ident()
            threads: set[int] = set()

            def listener(change: ClusterChange) -> None:
                threads.add(threading.get_ident())
                changes.put_nowait(change)

            view.on_change(listener)
            await asyncio.to_thread(create_topic, admin, "after", 2, 1)
            await wait_for_change(changes, lambda c: "after" in c.topics_added)
            await wait_for_change(
                changes,
                lambda c: (
                    ("after", 0) in c.partitions_changed or ("after", 1) in c.partitions_changed
                ),
            )
            while len([k for k in view.partition_states if k[0] == "after"]) < 2:
                await wait_for_change(changes, lambda c: bool(c.partitions_changed))
            state = view.partition_states[("after", 0)]
            # A leader's compare-and-set (an ISR change) is seen too.
            new = PartitionState(
                state.leader, state.leader_epoch, state.isr, state.controller_epoch
            )
            version = await asyncio.to_thread(
                admin.update_partition_state, "after", 0, new, state.zk_version
            )
            assert version == state.zk_version + 1
            await wait_for_change(changes, lambda c: ("after", 0) in c.partitions_changed)
            assert view.partition_states[("after", 0)].zk_version == version
            second = ZkClusterStore(zk_connect, session_timeout_ms=2000)
            await asyncio.to_thread(second.start, 10)
            await asyncio.to_thread(second.register_broker, BrokerRegistration(2, "h", 2))
            await wait_for_change(changes, lambda c: c.brokers_changed)
            assert set(view.brokers) == {1, 2}
            await asyncio.to_thread(second.close)
            await wait_for_change(changes, lambda c: c.brokers_changed)
            assert set(view.brokers) == {1}
            assert threads == {loop_thread}
        finally:
            view.stop()
            await asyncio.to_thread(store.close)

    try:
        asyncio.run(main())
    finally:
        controller.stop()
        admin.close()
