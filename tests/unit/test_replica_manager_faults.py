"""The leader's side of replication after faults, on the in-memory ZooKeeper.

A replica manager of broker 1 (real logs, the real cluster view and store on
``FakeZooKeeper``) and the broker's fetch handler, driven with follower
FetchRequests as broker 2's replica fetcher would send them: no sockets.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from headwater.broker.config import BrokerConfig
from headwater.broker.handlers.fetch import FetchApi
from headwater.broker.metrics import BrokerMetrics
from headwater.cluster import zk_layout
from headwater.cluster.cluster_view import ClusterView
from headwater.cluster.replica_manager import ReplicaManager, ReplicationConfig
from headwater.cluster.store import BrokerRegistration, PartitionState, PartitionStateWrite
from headwater.fetch.purgatory import FetchPurgatory
from headwater.fetch.session import FetchSession
from headwater.fetch.session_cache import FetchSessionCache
from headwater.log.config import LogConfig
from headwater.log.log import CorruptBatch
from headwater.log.log_directory import LogDirectory
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_types import FetchRequestData, PartitionFetch
from headwater.records.record import RecordBatchBuilder
from headwater.testing import FakeZooKeeper, InMemoryClusterStore

TOPIC = "idle"
KEY = (TOPIC, 0)


def started(zk: FakeZooKeeper, broker_id: int | None = None) -> InMemoryClusterStore:
    store = InMemoryClusterStore(zk)
    store.start()
    if broker_id is not None:
        store.register_broker(BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id))
    return store


def batch(n: int = 1) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(1000 + i, b"k", b"v" * 10)
    return builder.build()


async def eventually(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Wait for ``condition`` with a bounded deadline (ISR writes run in executor threads)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


@dataclass
class Leader:
    """Broker 1 leading ``idle-0`` (replicas 1 and 2), and the controller's store."""

    zk: FakeZooKeeper
    admin: InMemoryClusterStore
    store: InMemoryClusterStore
    view: ClusterView
    replicas: ReplicaManager
    fetch: FetchApi
    sessions: FetchSessionCache

    def state(self) -> PartitionState:
        state = self.admin.partition_state(*KEY)
        assert state is not None
        return state

    def set_state(self, **changes: Any) -> None:
        """Write the partition state as the controller would (compare-and-set)."""
        old = self.state()
        new = PartitionState(
            leader=changes.get("leader", old.leader),
            leader_epoch=changes.get("leader_epoch", old.leader_epoch),
            isr=changes.get("isr", old.isr),
            controller_epoch=old.controller_epoch,
        )
        assert self.admin.update_partition_state(*KEY, new, old.zk_version) is not None

    async def caught_up_session(self, records: int) -> FetchSession:
        """``records`` appended, then broker 2's full fetch (its session, epoch 0) and
        an incremental one at the log end (epoch 1): the high watermark is there."""
        replica = self.replicas.replicas[KEY]
        replica.log.append(batch(records), 0)
        end = replica.log.log_end_offset
        await self.follower_fetch(0)  # broker 2's full fetch creates its session
        (session,) = self.sessions.sessions()
        await self.follower_fetch(end, session_id=session.id, epoch=1)  # it has it all
        assert await eventually(lambda: replica.log.high_watermark == end)
        return session

    async def follower_fetch(
        self, fetch_offset: int | None, *, session_id: int = 0, epoch: int = 0
    ) -> None:
        """A FetchRequest from broker 2 (v12, names only): full when ``session_id`` is 0,
        else incremental, naming the partition only when ``fetch_offset`` is given."""
        partitions = []
        if fetch_offset is not None:
            partitions.append(PartitionFetch(uuid.UUID(int=0), TOPIC, 0, fetch_offset))
        request = FetchRequestData(
            version=12,
            replica_id=2,
            max_wait_ms=0,
            session_id=session_id,
            session_epoch=epoch,
            partitions=partitions,
        )
        await self.fetch.serve_follower(request)


@asynccontextmanager
async def leading(
    tmp_path: Path, *, lag_ms: int = 30_000, partitions: int = 1
) -> AsyncIterator[Leader]:
    zk = FakeZooKeeper()
    admin = started(zk)
    fence = admin.try_become_controller(9)
    assert fence is not None
    admin.create_topic(TOPIC, uuid.uuid4(), {p: [1, 2] for p in range(partitions)}, {})
    admin.write_partition_states(
        fence,
        [
            PartitionStateWrite(TOPIC, p, PartitionState(1, 0, (1, 2), 1), None)
            for p in range(partitions)
        ],
    )
    store = started(zk, 1)
    started(zk, 2)
    view = ClusterView(store)
    await view.start()
    logs = LogDirectory(tmp_path / "data", LogConfig())
    logs.open()
    replicas = ReplicaManager(
        1,
        logs,
        view,
        store,
        ReplicationConfig(replica_lag_time_max_ms=lag_ms),
        data_dir=tmp_path,
    )
    sessions = FetchSessionCache()
    fetch = FetchApi(
        BrokerConfig(data_dir=tmp_path), logs, sessions, FetchPurgatory(), BrokerMetrics(), replicas
    )
    replicas.out_of_sync_listeners.append(fetch.watcher.nudge_followers)
    await replicas.start()
    try:
        yield Leader(zk, admin, store, view, replicas, fetch, sessions)
    finally:
        await replicas.stop()
        view.stop()
        logs.close()


def test_a_caught_up_follower_rejoins_the_isr_of_an_idle_partition(tmp_path: Path) -> None:
    """Issue 20, item 1: the controller took a paused follower out of the ISR of a
    partition nobody writes to; its next incremental fetch names nothing, and still
    brings it back (Kafka evaluates ISR expansion for every partition of the session)."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            assert replica.is_leader and replica.isr == (1, 2)
            session = await c.caught_up_session(3)
            await c.follower_fetch(None, session_id=session.id, epoch=2)
            read_before = session.partitions_read_total

            c.set_state(isr=(1,))  # broker 2's ZooKeeper session expired
            assert await eventually(lambda: replica.isr == (1,))
            assert replica.leader_epoch == 0  # an ISR change alone: no new epoch

            # Back from its pause, the follower fetches incrementally, naming nothing.
            await c.follower_fetch(None, session_id=session.id, epoch=3)
            assert await eventually(lambda: c.state().isr == (1, 2)), c.state()
            assert await eventually(lambda: replica.isr == (1, 2))
            assert c.replicas.isr_expands == 1
            assert session.partitions_read_total == read_before + 1

            # Idle incremental fetches stay O(changed): nothing pending, nothing read.
            await c.follower_fetch(None, session_id=session.id, epoch=4)
            await c.follower_fetch(None, session_id=session.id, epoch=5)
            assert session.partitions_read_total == read_before + 1

    asyncio.run(main())


def test_a_lagging_follower_is_not_taken_back_by_a_nudge(tmp_path: Path) -> None:
    """The nudge reads the follower's cached offset: one below the high watermark
    keeps it out (the ISR holds only replicas with every acknowledged record)."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            session = await c.caught_up_session(2)
            c.set_state(isr=(1,))
            assert await eventually(lambda: replica.isr == (1,))
            replica.log.append(batch(2), 0)  # acknowledged by the ISR {1} alone
            await c.follower_fetch(None, session_id=session.id, epoch=2)
            await asyncio.sleep(0.05)
            assert c.state().isr == (1,)
            await c.follower_fetch(4, session_id=session.id, epoch=3)  # caught up now
            assert await eventually(lambda: c.state().isr == (1, 2))

    asyncio.run(main())


def test_a_follower_in_controlled_shutdown_is_not_taken_back(tmp_path: Path) -> None:
    """The controller took stopping broker 2 out of the ISR; its last fetch had
    caught up, and it fetches once more (a fetch in flight when it stopped
    following). The leader does not take it back while its controlled shutdown
    lasts (KIP-841), nor once it is gone; it does once it has registered again."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            session = await c.caught_up_session(2)
            c.admin.request_controlled_shutdown(2)
            assert await eventually(lambda: c.view.brokers_in_controlled_shutdown == {2})
            c.set_state(isr=(1,))
            assert await eventually(lambda: replica.isr == (1,))
            await c.follower_fetch(2, session_id=session.id, epoch=2)  # caught up
            assert replica.pending_isr is None and not c.replicas._isr_writes
            assert c.state().isr == (1,)
            # Gone (its registration ended with its session): still not taken in.
            stopped = c.view.brokers[2]
            c.admin.withdraw_controlled_shutdown(2)
            assert c.admin.delete_znode(zk_layout.broker_path(2))
            assert await eventually(lambda: 2 not in c.view.brokers)
            assert not c.view.brokers_in_controlled_shutdown
            await c.follower_fetch(2, session_id=session.id, epoch=3)
            assert replica.pending_isr is None and not c.replicas._isr_writes
            # Back: registered again, its next fetch takes it in.
            c.admin.register_broker(stopped)
            assert await eventually(lambda: 2 in c.view.brokers)
            await c.follower_fetch(2, session_id=session.id, epoch=4)
            assert await eventually(lambda: c.state().isr == (1, 2)), c.state()

    asyncio.run(main())


@asynccontextmanager
async def watch_answers_held(view: ClusterView) -> AsyncIterator[list[tuple[Any, Any]]]:
    """Partition-state answers of the watches do not reach the loop until the end.

    The cluster view's ``_post`` is where kazoo's threads hand a watch answer
    to the event loop; holding them models a broker that was paused (it heard
    nothing) and answers of re-armed watches still in flight after its session
    came back, which is what real kazoo has after a restore.
    """
    held: list[tuple[Any, Any]] = []
    real = view._post

    def post(apply: Callable[[Any], None], value: Any) -> None:
        if apply == view._apply_state:
            held.append((apply, value))
        else:
            real(apply, value)

    view._post = post  # type: ignore[method-assign]
    try:
        yield held
    finally:
        view._post = real  # type: ignore[method-assign]
        for apply, value in held:
            real(apply, value)


def test_a_restored_session_never_leads_from_the_cached_view(tmp_path: Path) -> None:
    """Issue 20, item 2: while broker 1 was away its session expired and broker 2
    leads at epoch 1. Back on a new session, it must not lead at its cached epoch 0."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            assert replica.is_leader and replica.leader_epoch == 0
            told: list[bool] = []
            c.replicas.leadership_listeners.append(lambda _t, _p, leads: told.append(leads))
            async with watch_answers_held(c.view) as held:
                c.set_state(leader=2, leader_epoch=1, isr=(2,))  # the controller moved on
                await asyncio.to_thread(c.store.expire_session)  # LOST, then RESTORED
                assert await eventually(lambda: True in told or replica.leader == 2)
                assert told == [False], "led again from the cached state"
                assert held, "the watch answers were not held back: the test proves nothing"
                assert c.replicas.serving_error(TOPIC, 0) == ErrorCode.not_leader_or_follower
                assert (replica.leader, replica.leader_epoch) == (2, 1)
                assert c.view.partition_states[KEY].leader_epoch == 1
            await asyncio.sleep(0.05)
            assert told == [False]
            assert not replica.is_leader

    asyncio.run(main())


def test_a_restored_session_leads_again_when_zookeeper_says_so(tmp_path: Path) -> None:
    """Nobody took over (no other replica in the ISR): back on its new session the
    broker leads again, at the epoch ZooKeeper holds, once it has read it."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            told: list[bool] = []
            c.replicas.leadership_listeners.append(lambda _t, _p, leads: told.append(leads))
            async with watch_answers_held(c.view):
                await asyncio.to_thread(c.store.expire_session)
                assert await eventually(lambda: told == [False, True])
                assert replica.is_leader and replica.leader_epoch == 0
                assert c.replicas.serving_error(TOPIC, 0) == 0

    asyncio.run(main())


def test_no_leadership_until_the_states_could_be_read_again(tmp_path: Path) -> None:
    """ZooKeeper is unreachable right after the new session: the broker keeps
    answering NOT_LEADER_OR_FOLLOWER (and names no coordinator from its cache)
    until it has read the states, then leads as ZooKeeper says."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            c.zk.available = False
            await asyncio.to_thread(c.store.expire_session)
            await asyncio.sleep(0.5)  # refresh attempts fail meanwhile
            assert c.replicas.serving_error(TOPIC, 0) == ErrorCode.not_leader_or_follower
            assert c.replicas.leads_per_stale_view(1)
            assert not replica.is_leader
            c.zk.available = True
            assert await eventually(lambda: replica.is_leader)
            assert not c.replicas.leads_per_stale_view(1)
            assert c.replicas.serving_error(TOPIC, 0) == 0

    asyncio.run(main())


def test_delete_records_waits_for_the_followers_log_start(tmp_path: Path) -> None:
    """Kafka's DelayedDeleteRecords: the answer waits for the low watermark, the
    smallest log start over the live replicas, which a follower reports in its fetch."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            replica.log.append(batch(5), 0)
            await c.follower_fetch(5)  # broker 2 has all five
            assert await eventually(lambda: replica.log.high_watermark == 5)
            assert replica.log.delete_records(3) == 3
            # the follower has not said its new log start yet: a short wait times out
            timed_out = await c.replicas.wait_low_watermark(*KEY, 3, 0.05)
            assert timed_out == ErrorCode.request_timed_out
            waiting = asyncio.ensure_future(c.replicas.wait_low_watermark(*KEY, 3, 10.0))
            await asyncio.sleep(0.01)
            assert not waiting.done()
            c.replicas.on_follower_fetch(
                2, [PartitionFetch(uuid.UUID(int=0), TOPIC, 0, 5, log_start_offset=3)]
            )
            assert await asyncio.wait_for(waiting, 5.0) == ErrorCode.none
            assert c.replicas.low_watermark(*KEY) == 3

    asyncio.run(main())


def test_a_corrupt_leader_alone_in_its_isr_asks_again_once_a_follower_is_back(
    tmp_path: Path,
) -> None:
    """Issue 31 item 4: the scrubber found a corrupt batch on a leader alone in its ISR;
    no in-sync copy could take over, so it kept leading. When a follower rejoins the
    ISR the leader tells the controller again (reason "corrupt"), which hands the
    leadership to that good copy; it was never asked again."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            session = await c.caught_up_session(2)
            c.set_state(isr=(1,))
            assert await eventually(lambda: replica.isr == (1,))
            told: list[tuple[int, list[tuple[str, int]], str]] = []
            c.replicas.store.notify_log_dir_event = (  # type: ignore[method-assign]
                lambda broker, keys, reason: told.append((broker, list(keys), reason))
            )
            segment = replica.log.loaded_segments()[0]
            replica.log.mark_corrupt(CorruptBatch(segment, 0, 10, 0, 0, "crc"))
            await c.follower_fetch(2, session_id=session.id, epoch=2)  # caught up: back in
            assert await eventually(lambda: c.state().isr == (1, 2))
            assert await eventually(lambda: told == [(1, [KEY], "corrupt")]), told

    asyncio.run(main())


@pytest.mark.parametrize("partitions", [20, 200])
def test_isr_changes_of_one_turn_go_to_zookeeper_together(tmp_path: Path, partitions: int) -> None:
    """Issue 33: after a restart a broker's followers rejoin tens of thousands of ISRs
    at once. Each expansion is still its own compare-and-set, but those proposed in
    one turn of the loop are sent together (pipelined, one executor job): the number
    of batches does not grow with the partitions, only the updates do."""

    async def main() -> None:
        async with leading(tmp_path, partitions=partitions) as c:
            keys = [(TOPIC, p) for p in range(partitions)]
            for key in keys:  # the controller took broker 2 out of every ISR
                old = c.admin.partition_state(*key)
                assert old is not None
                shrunk = PartitionState(1, 0, (1,), old.controller_epoch)
                assert c.admin.update_partition_state(*key, shrunk, old.zk_version) is not None
            assert await eventually(lambda: all(c.replicas.replicas[k].isr == (1,) for k in keys))
            batches: list[int] = []
            one_at_a_time: list[tuple[str, int]] = []
            write_many = c.store.update_partition_states

            def counted(updates: Any) -> Any:
                batches.append(len(updates))
                return write_many(updates)

            c.store.update_partition_states = counted  # type: ignore[method-assign]
            c.store.update_partition_state = (  # type: ignore[method-assign]
                lambda t, p, *_: one_at_a_time.append((t, p))
            )
            # Broker 2 fetches every partition at its (empty) log end: caught up.
            await c.fetch.serve_follower(
                FetchRequestData(
                    version=12,
                    replica_id=2,
                    max_wait_ms=0,
                    partitions=[
                        PartitionFetch(uuid.UUID(int=0), TOPIC, p, 0) for p in range(partitions)
                    ],
                )
            )
            assert await eventually(
                lambda: all(c.admin.partition_state(*k).isr == (1, 2) for k in keys)  # type: ignore[union-attr]
            )
            assert await eventually(lambda: all(c.replicas.replicas[k].isr == (1, 2) for k in keys))
            assert sum(batches) == partitions  # each expansion written once
            assert len(batches) <= 2, batches  # in one or two batches, at 20 as at 200
            assert not one_at_a_time
            assert c.replicas.isr_expands == partitions

    asyncio.run(main())
