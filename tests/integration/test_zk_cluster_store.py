"""ZkClusterStore on a real ZooKeeper: registration, session expiry, CAS, chroot."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from headwater.cluster import zk_layout
from headwater.cluster.store import (
    BrokerIdInUseError,
    BrokerRegistration,
    ClusterStoreUnavailableError,
    ControllerMovedError,
    PartitionState,
    PartitionStateWrite,
    SessionEvent,
    ZkClusterStore,
)
from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.broker_process import free_port
from tests.integration.zookeeper import expire_session, fresh_chroot_connect

StoreFactory = Callable[..., ZkClusterStore]


@pytest.fixture
def stores(zookeeper: ZooKeeperServer) -> Iterator[StoreFactory]:
    """Stores on one fresh chroot of the shared server (1-second sessions)."""
    connect = fresh_chroot_connect(zookeeper)
    made: list[ZkClusterStore] = []

    def make(connect_string: str = connect) -> ZkClusterStore:
        store = ZkClusterStore(connect_string, session_timeout_ms=1000)
        store.start(timeout=10)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_duplicate_broker_id_is_refused(stores: StoreFactory) -> None:
    a, b = stores(), stores()
    a.register_broker(BrokerRegistration(1, "127.0.0.1", 9001))
    with pytest.raises(BrokerIdInUseError, match=r"127\.0\.0\.1:9001"):
        b.register_broker(BrokerRegistration(1, "127.0.0.1", 9002), wait_s=0.5)
    b.register_broker(BrokerRegistration(2, "127.0.0.1", 9002))
    assert set(a.brokers()) == {1, 2}


def test_id_of_a_dead_session_is_free_once_it_expires(stores: StoreFactory) -> None:
    a, b = stores(), stores()
    a.register_broker(BrokerRegistration(1, "127.0.0.1", 9001))
    # The old owner stops answering (as after kill -9): its session lingers until the
    # timeout, and a restarted broker waiting that long gets the id.
    a.client.stop()
    b.register_broker(BrokerRegistration(1, "127.0.0.1", 9002), wait_s=10)
    assert b.brokers()[1].port == 9002


def test_ephemerals_vanish_on_session_expiry_and_come_back(stores: StoreFactory) -> None:
    a, b = stores(), stores()
    events: list[SessionEvent] = []
    restored = threading.Event()

    def on_session(event: SessionEvent) -> None:
        events.append(event)
        if event is SessionEvent.RESTORED:
            restored.set()

    a.add_session_listener(on_session)
    a.register_broker(BrokerRegistration(1, "127.0.0.1", 9001))
    assert a.try_become_controller(1) is not None
    seen: list[set[int]] = []
    b.watch_brokers(lambda brokers: seen.append(set(brokers)))
    wait_for(lambda: seen == [{1}])
    expire_session(a.client)
    wait_for(lambda: b.controller_id() is None)
    assert restored.wait(10)
    assert SessionEvent.LOST in events
    wait_for(lambda: seen[-1] == {1})
    assert set() in seen  # the watch saw broker 1 gone in between
    assert b.brokers()[1].port == 9001


def test_partition_state_compare_and_set_and_fencing(stores: StoreFactory) -> None:
    a, b = stores(), stores()
    fence = a.try_become_controller(1)
    assert fence is not None
    a.create_topic("t", uuid.uuid4(), {0: [1, 2]}, {})
    assert a.write_partition_states(
        fence, [PartitionStateWrite("t", 0, PartitionState(1, 0, (1, 2), 0), None)]
    ) == {("t", 0): 0}
    state = b.partition_state("t", 0)
    assert state == PartitionState(1, 0, (1, 2), fence.epoch, 0)
    assert b.update_partition_state("t", 0, PartitionState(1, 0, (1,), 1), 0) == 1
    assert a.update_partition_state("t", 0, PartitionState(1, 0, (2,), 1), 0) is None
    # A new controller fences the old one's writes.
    expire_session(a.client)
    new = b.try_become_controller(2)
    assert new is not None and new.epoch == fence.epoch + 1
    wait_for(lambda: a.connected)
    with pytest.raises(ControllerMovedError):
        a.write_partition_states(
            fence, [PartitionStateWrite("t", 0, PartitionState(2, 1, (2,), 0), 1)]
        )
    assert b.partition_state("t", 0) == PartitionState(1, 0, (1,), 1, 1)


def test_chroot_is_created_and_isolates(zookeeper: ZooKeeperServer, stores: StoreFactory) -> None:
    connect = fresh_chroot_connect(zookeeper)
    inside = stores(connect)
    outside = stores()
    inside.create_topic("t", uuid.uuid4(), {0: [1]}, {})
    assert outside.topics() == []
    raw = KazooClient(hosts=zookeeper.connect_string)
    raw.start(10)
    try:
        chroot = connect[len(zookeeper.connect_string) :]
        assert raw.exists(f"{chroot}/brokers/topics/t") is not None
    finally:
        raw.stop()
        raw.close()


def test_unreachable_zookeeper_is_a_clear_error() -> None:
    store = ZkClusterStore(f"127.0.0.1:{free_port()}/x")
    with pytest.raises(ClusterStoreUnavailableError, match="not reachable within"):
        store.start(timeout=1)
    store.close()


def test_writes_fail_fast_while_zookeeper_is_down(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk").start()
    again: ZooKeeperServer | None = None
    store = ZkClusterStore(server.connect_string, session_timeout_ms=4000)
    store.start(timeout=10)
    try:
        store.create_topic("t", uuid.uuid4(), {0: [1]}, {})
        server.kill()
        wait_for(lambda: not store.connected)
        started = time.monotonic()
        with pytest.raises(ClusterStoreUnavailableError):
            store.update_partition_state("t", 0, PartitionState(1, 0, (1,), 0), 0)
        assert time.monotonic() - started < 2
        again = ZooKeeperServer(server.data_dir, port=server.port).start()
        wait_for(lambda: store.connected, timeout=15)
        assert store.topics() == ["t"]
    finally:
        store.close()
        server.kill()
        if again is not None:
            again.stop()


def test_a_watch_dropped_with_the_connection_is_rearmed_however_late_kazoo_says_so(
    stores: StoreFactory,
) -> None:
    """A dropped connection takes every watch with it; kazoo tells each watcher on its
    watch thread, which may run after the store handled the reconnection. Here the watch
    thread is held until then (issue 31: a broker missed two partition states)."""
    broker, controller = stores(), stores()
    events: list[SessionEvent] = []
    broker.add_session_listener(events.append)
    seen: list[PartitionState | None] = []
    broker.watch_partition_state("t", 0, lambda _key, state: seen.append(state))
    wait_for(lambda: seen == [None])
    gate = threading.Event()
    broker.client.handler.callback_queue.put(lambda: gate.wait(10))  # a busy watch thread
    broker.client._connection._socket.shutdown(socket.SHUT_RDWR)  # the connection drops
    wait_for(lambda: SessionEvent.RECONNECTED in events)
    gate.set()  # the watch thread now hands out the connection loss
    state = zk_layout.encode_partition_state(1, 0, (1,), 1)
    controller.write_znode(zk_layout.partition_state_path("t", 0), state, None)
    wait_for(lambda: bool(seen) and seen[-1] is not None, timeout=5)
    assert seen[-1] == PartitionState(1, 0, (1,), 1, zk_version=0)


def test_the_controller_writes_states_on_a_session_of_its_own(stores: StoreFactory) -> None:
    """The broker's session carries the cluster view's watch on every partition state;
    the controller's transactions go on another, so their answers do not queue
    behind the reads those watches cause. A lost writer session is replaced."""
    a, b = stores(), stores()
    fence = a.try_become_controller(1)
    assert fence is not None
    a.create_topic("t", uuid.uuid4(), {0: [1, 2], 1: [2, 1]}, {})
    seen: list[PartitionState | None] = []
    a.watch_partition_state("t", 0, lambda _key, state: seen.append(state))
    assert a.writer_client is None
    first = PartitionState(1, 0, (1, 2), 0)
    assert a.write_partition_states(
        fence,
        [PartitionStateWrite("t", 0, first, None), PartitionStateWrite("t", 1, first, None)],
    ) == {("t", 0): 0, ("t", 1): 0}
    writer = a.writer_client
    assert writer is not None and writer.connected
    assert writer.client_id[0] != a.client.client_id[0]
    wait_for(lambda: PartitionState(1, 0, (1, 2), fence.epoch, 0) in seen)
    # Its session expires: the next write opens another and is answered.
    old_session = writer.client_id[0]
    expire_session(writer)
    wait_for(lambda: writer.connected and writer.client_id[0] != old_session, timeout=20)
    assert a.write_partition_states(
        fence, [PartitionStateWrite("t", 0, PartitionState(2, 1, (2, 1), 0), 0)]
    ) == {("t", 0): 1}
    assert b.partition_state("t", 0) == PartitionState(2, 1, (2, 1), fence.epoch, 1)
    a.release_writer()  # no longer controller: the second session closes
    assert a.writer_client is None and not writer.connected
    assert a.write_partition_states(
        fence, [PartitionStateWrite("t", 1, PartitionState(2, 1, (2, 1), 0), 0)]
    ) == {("t", 1): 1}
    reopened = a.writer_client
    assert reopened is not None and reopened.connected
    a.close()
    assert not reopened.connected
