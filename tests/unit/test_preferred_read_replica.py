"""KIP-392 in the replica manager, on the in-memory ZooKeeper: which follower a
leader prefers for a consumer's rack, and when a follower serves consumers.

Broker 1 (rack a) leads ``idle-0`` with broker 2 (rack b) as its follower;
broker 2's fetches are driven as its replica fetcher would send them: no sockets.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from headwater.broker.config import BrokerConfig
from headwater.broker.handlers.fetch import FetchApi
from headwater.broker.metrics import BrokerMetrics
from headwater.cluster.cluster_view import ClusterView
from headwater.cluster.replica_manager import ReplicaManager, ReplicationConfig
from headwater.cluster.store import BrokerRegistration, PartitionState, PartitionStateWrite
from headwater.fetch.purgatory import FetchPurgatory
from headwater.fetch.replica_selector import RACK_AWARE
from headwater.fetch.session_cache import FetchSessionCache
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory
from headwater.protocol.error_codes import ErrorCode
from headwater.testing import FakeZooKeeper, InMemoryClusterStore
from tests.unit.test_replica_manager_faults import KEY, TOPIC, Leader, eventually


def _registered(zk: FakeZooKeeper, broker_id: int, rack: str | None) -> InMemoryClusterStore:
    store = InMemoryClusterStore(zk)
    store.start()
    store.register_broker(BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id, rack))
    return store


@asynccontextmanager
async def leading_in_rack_a(tmp_path: Path, selector: str | None) -> AsyncIterator[Leader]:
    zk = FakeZooKeeper()
    admin = InMemoryClusterStore(zk)
    admin.start()
    fence = admin.try_become_controller(9)
    assert fence is not None
    admin.create_topic(TOPIC, uuid.uuid4(), {0: [1, 2]}, {})
    admin.write_partition_states(
        fence, [PartitionStateWrite(TOPIC, 0, PartitionState(1, 0, (1, 2), 1), None)]
    )
    store = _registered(zk, 1, "a")
    _registered(zk, 2, "b")
    view = ClusterView(store)
    await view.start()
    logs = LogDirectory(tmp_path / "data", LogConfig())
    logs.open()
    replicas = ReplicaManager(
        1, logs, view, store, ReplicationConfig(replica_selector=selector), data_dir=tmp_path
    )
    sessions = FetchSessionCache()
    fetch = FetchApi(
        BrokerConfig(data_dir=tmp_path), logs, sessions, FetchPurgatory(), BrokerMetrics(), replicas
    )
    await replicas.start()
    try:
        yield Leader(zk, admin, store, view, replicas, fetch, sessions)
    finally:
        await replicas.stop()
        view.stop()
        logs.close()


def test_the_leader_prefers_its_rack_b_follower_once_it_knows_the_offset_is_committed(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with leading_in_rack_a(tmp_path, RACK_AWARE) as c:
            rm = c.replicas
            assert await eventually(lambda: KEY in rm.replicas and rm.replicas[KEY].is_leader)
            # Broker 2 has not fetched yet: it may not hold offset 0.
            assert rm.preferred_read_replica(TOPIC, 0, 0, "b") == -1
            session = await c.caught_up_session(5)  # broker 2 has all 5; the HW is 5
            # The answer that carried HW 5 has not reached broker 2 yet ...
            assert rm.preferred_read_replica(TOPIC, 0, 5, "b") == -1
            # ... an offset below the HW it was last sent is safe to send it.
            assert rm.preferred_read_replica(TOPIC, 0, 0, "b") == 2
            await c.follower_fetch(None, session_id=session.id, epoch=2)  # HW 5 sent
            assert rm.preferred_read_replica(TOPIC, 0, 5, "b") == 2
            assert rm.preferred_read_replica(TOPIC, 0, 5, "a") == -1  # the leader's rack
            assert rm.preferred_read_replica(TOPIC, 0, 5, "c") == -1  # no replica there
            assert rm.preferred_read_replica(TOPIC, 0, 5, "") == -1
            assert rm.preferred_read_replica(TOPIC, 0, 6, "b") == -1  # beyond its log

            c.set_state(isr=(1,))  # broker 2 left the ISR: never preferred
            assert await eventually(lambda: rm.replicas[KEY].isr == (1,))
            assert rm.preferred_read_replica(TOPIC, 0, 5, "b") == -1

    asyncio.run(main())


def test_without_a_selector_consumers_stay_on_the_leader(tmp_path: Path) -> None:
    async def main() -> None:
        async with leading_in_rack_a(tmp_path, None) as c:
            rm = c.replicas
            assert await eventually(lambda: KEY in rm.replicas and rm.replicas[KEY].is_leader)
            session = await c.caught_up_session(5)
            await c.follower_fetch(None, session_id=session.id, epoch=2)
            assert rm.preferred_read_replica(TOPIC, 0, 0, "b") == -1

    asyncio.run(main())


def test_a_follower_serves_consumers_only_while_in_the_isr(tmp_path: Path) -> None:
    """Beyond Kafka: out of the ISR its high watermark stops, so it sends consumers back."""

    async def main() -> None:
        async with leading_in_rack_a(tmp_path, RACK_AWARE) as c:
            rm = c.replicas
            assert await eventually(lambda: KEY in rm.replicas and rm.replicas[KEY].is_leader)
            assert rm.consumer_serving_error(TOPIC, 0) == ErrorCode.none
            c.set_state(leader=2, leader_epoch=1)  # broker 1 becomes broker 2's follower
            assert await eventually(lambda: not rm.replicas[KEY].is_leader)
            assert rm.serves_as_follower(TOPIC, 0)
            assert rm.consumer_serving_error(TOPIC, 0) == ErrorCode.none
            assert rm.serving_error(TOPIC, 0) == ErrorCode.not_leader_or_follower
            c.set_state(isr=(2,))
            assert await eventually(lambda: rm.replicas[KEY].isr == (2,))
            assert rm.consumer_serving_error(TOPIC, 0) == ErrorCode.not_leader_or_follower
            assert rm.consumer_serving_error(TOPIC, 7) == ErrorCode.unknown_topic_or_partition

    asyncio.run(main())
