"""ClusterStore semantics on the in-memory ZooKeeper (the same code as on kazoo)."""

from __future__ import annotations

import uuid

import pytest
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent

from headwater.cluster import zk_layout
from headwater.cluster.store import (
    BrokerIdInUseError,
    BrokerRegistration,
    ClusterStoreUnavailableError,
    ControllerMovedError,
    InvalidTopicError,
    PartitionState,
    PartitionStateWrite,
    SessionEvent,
    TopicExistsError,
    UnknownTopicError,
)
from headwater.testing import FakeZooKeeper, InMemoryClusterStore
from headwater.testing.fake_zookeeper import FakeAsyncResult

TOPIC_ID = uuid.UUID(int=7)


def started(zk: FakeZooKeeper, chroot: str = "") -> InMemoryClusterStore:
    store = InMemoryClusterStore(zk, chroot)
    store.start()
    return store


@pytest.fixture
def zk() -> FakeZooKeeper:
    return FakeZooKeeper()


def test_register_and_list_brokers(zk: FakeZooKeeper) -> None:
    a, b = started(zk), started(zk)
    a.register_broker(BrokerRegistration(1, "h1", 9001))
    b.register_broker(BrokerRegistration(2, "h2", 9002, "rack-b"))
    assert a.brokers() == {
        1: BrokerRegistration(1, "h1", 9001),
        2: BrokerRegistration(2, "h2", 9002, "rack-b"),
    }


def test_duplicate_broker_id_is_refused_naming_the_holder(zk: FakeZooKeeper) -> None:
    a, b = started(zk), started(zk)
    a.register_broker(BrokerRegistration(1, "h1", 9001))
    with pytest.raises(BrokerIdInUseError, match="h1:9001"):
        b.register_broker(BrokerRegistration(1, "h2", 9002))
    # Registering again on the owning session is fine (idempotent).
    a.register_broker(BrokerRegistration(1, "h1", 9001))


def test_session_expiry_drops_the_registration_and_restores_it(zk: FakeZooKeeper) -> None:
    a, b = started(zk), started(zk)
    events: list[SessionEvent] = []
    seen: list[set[int]] = []
    a.add_session_listener(events.append)
    a.register_broker(BrokerRegistration(1, "h1", 9001))
    b.register_broker(BrokerRegistration(2, "h2", 9002))
    b.watch_brokers(lambda brokers: seen.append(set(brokers)))
    a.expire_session()
    assert events == [SessionEvent.LOST, SessionEvent.RESTORED]
    # b saw broker 1 vanish, then come back when a re-registered on its new session.
    assert seen == [{1, 2}, {2}, {1, 2}]


def test_close_removes_ephemerals_at_once(zk: FakeZooKeeper) -> None:
    a, b = started(zk), started(zk)
    a.register_broker(BrokerRegistration(1, "h1", 9001))
    assert a.try_become_controller(1) is not None
    a.close()
    assert b.brokers() == {}
    assert b.controller_id() is None


def test_controller_election_bumps_the_epoch_once_per_election(zk: FakeZooKeeper) -> None:
    a, b = started(zk), started(zk)
    fence = a.try_become_controller(1)
    assert fence is not None and fence.epoch == 1
    assert b.try_become_controller(2) is None
    assert b.controller_id() == 1
    a.expire_session()
    fence_b = b.try_become_controller(2)
    assert fence_b is not None and fence_b.epoch == 2
    assert a.controller_epoch() == 2


def test_fenced_writes_of_a_deposed_controller_are_refused(zk: FakeZooKeeper) -> None:
    a, b = started(zk), started(zk)
    old = a.try_become_controller(1)
    assert old is not None
    a.create_topic("t", TOPIC_ID, {0: [1, 2]}, {})
    a.write_partition_states(
        old, [PartitionStateWrite("t", 0, PartitionState(1, 0, (1, 2), 1), None)]
    )
    a.expire_session()
    new = b.try_become_controller(2)
    assert new is not None
    state = b.partition_state("t", 0)
    assert state is not None
    with pytest.raises(ControllerMovedError):
        a.write_partition_states(
            old, [PartitionStateWrite("t", 0, PartitionState(2, 1, (2,), 1), state.zk_version)]
        )
    assert b.partition_state("t", 0) == state
    with pytest.raises(ControllerMovedError):
        a.delete_topic_znodes(old, "t")
    assert b.topic("t") is not None


def test_partition_state_compare_and_set(zk: FakeZooKeeper) -> None:
    a = started(zk)
    fence = a.try_become_controller(1)
    assert fence is not None
    a.create_topic("t", TOPIC_ID, {0: [1, 2]}, {})
    versions = a.write_partition_states(
        fence, [PartitionStateWrite("t", 0, PartitionState(1, 0, (1, 2), 0), None)]
    )
    assert versions == {("t", 0): 0}
    state = a.partition_state("t", 0)
    assert state == PartitionState(1, 0, (1, 2), fence.epoch, 0)
    shrunk = PartitionState(1, 0, (1,), fence.epoch)
    assert a.update_partition_state("t", 0, shrunk, expected_version=0) == 1
    # A second writer holding the old version loses.
    assert a.update_partition_state("t", 0, shrunk, expected_version=0) is None
    assert a.update_partition_state("gone", 0, shrunk, expected_version=0) is None
    # The controller's own CAS loses the same way, per partition.
    lost = a.write_partition_states(
        fence, [PartitionStateWrite("t", 0, PartitionState(2, 1, (2,), 0), 0)]
    )
    assert lost == {("t", 0): None}
    assert a.partition_states([("t", 0), ("t", 9)]) == {("t", 0): PartitionState(1, 0, (1,), 1, 1)}


def test_create_topic_refuses_existing_and_marked_and_bad_input(zk: FakeZooKeeper) -> None:
    a = started(zk)
    created = a.create_topic("t", TOPIC_ID, {0: [1], 1: [2]}, {"retention.ms": "5"})
    assert a.topic("t") == created
    assert created.configs == {"retention.ms": "5"}
    with pytest.raises(TopicExistsError):
        a.create_topic("t", uuid.uuid4(), {0: [1]}, {})
    a.delete_topic("t")
    with pytest.raises(TopicExistsError, match="marked for deletion"):
        a.create_topic("t", uuid.uuid4(), {0: [1]}, {})
    with pytest.raises(InvalidTopicError):
        a.create_topic("a/b", uuid.uuid4(), {0: [1]}, {})
    with pytest.raises(InvalidTopicError):
        a.create_topic("dup", uuid.uuid4(), {0: [1, 1]}, {})
    with pytest.raises(InvalidTopicError):
        a.create_topic("gap", uuid.uuid4(), {1: [1]}, {})
    with pytest.raises(UnknownTopicError):
        a.delete_topic("nope")


def test_topic_configs_and_deletion(zk: FakeZooKeeper) -> None:
    a = started(zk)
    fence = a.try_become_controller(1)
    assert fence is not None
    a.create_topic("t", TOPIC_ID, {0: [1], 1: [1]}, {})
    a.write_partition_states(
        fence,
        [PartitionStateWrite("t", p, PartitionState(1, 0, (1,), 0), None) for p in (0, 1)],
    )
    a.set_topic_configs("t", {"cleanup.policy": "compact"})
    topic = a.topic("t")
    assert topic is not None and topic.configs == {"cleanup.policy": "compact"}
    a.delete_topic("t")
    assert a.deletion_requests() == ["t"]
    a.delete_topic_znodes(fence, "t")
    assert a.topics() == []
    assert a.deletion_requests() == []
    assert a.partition_state("t", 0) is None
    # The name is free again.
    a.create_topic("t", uuid.uuid4(), {0: [1]}, {})


def test_watches_deliver_the_current_value_then_each_change(zk: FakeZooKeeper) -> None:
    a, b = started(zk), started(zk)
    fence = a.try_become_controller(1)
    assert fence is not None
    topics: list[frozenset[str]] = []
    states: list[PartitionState | None] = []
    controllers: list[int | None] = []
    b.watch_topics(topics.append)
    b.watch_controller(controllers.append)
    keys: set[tuple[str, int]] = set()

    def state_read(key: tuple[str, int], state: PartitionState | None) -> None:
        keys.add(key)
        states.append(state)

    handle = b.watch_partition_state("t", 0, state_read)
    a.create_topic("t", TOPIC_ID, {0: [1]}, {})
    a.write_partition_states(
        fence, [PartitionStateWrite("t", 0, PartitionState(1, 0, (1,), 0), None)]
    )
    a.update_partition_state("t", 0, PartitionState(1, 0, (1,), 1), 0)
    handle.cancel()
    a.update_partition_state("t", 0, PartitionState(1, 1, (1,), 1), 1)
    assert topics == [frozenset(), frozenset({"t"})]
    assert controllers == [1]
    assert states == [None, PartitionState(1, 0, (1,), 1, 0), PartitionState(1, 0, (1,), 1, 1)]
    assert keys == {("t", 0)}  # the partition comes back with each state


def test_watches_are_rearmed_on_the_new_session(zk: FakeZooKeeper) -> None:
    a, b = started(zk), started(zk)
    seen: list[frozenset[str]] = []
    b.watch_topics(seen.append)
    b.expire_session()
    a.create_topic("t", TOPIC_ID, {0: [1]}, {})
    assert seen[-1] == frozenset({"t"})


def test_chroots_do_not_see_each_other(zk: FakeZooKeeper) -> None:
    one, two = started(zk, "/one"), started(zk, "/two/deep")
    one.create_topic("t", TOPIC_ID, {0: [1]}, {})
    one.register_broker(BrokerRegistration(1, "h", 1))
    assert two.topics() == []
    assert two.brokers() == {}
    two.register_broker(BrokerRegistration(1, "h", 2))  # same id, other cluster: fine


def test_unreachable_zookeeper_is_a_clear_error(zk: FakeZooKeeper) -> None:
    zk.available = False
    with pytest.raises(ClusterStoreUnavailableError, match="not reachable"):
        InMemoryClusterStore(zk).start(timeout=0.1)
    zk.available = True
    a = started(zk)
    a.suspend()
    with pytest.raises(ClusterStoreUnavailableError):
        a.update_partition_state("t", 0, PartitionState(1, 0, (1,), 0), 0)
    a.resume()
    assert a.topics() == []


def test_leaders_compare_and_sets_go_together_and_a_lost_race_fails_no_other(
    zk: FakeZooKeeper,
) -> None:
    """``update_partition_states``: many leaders' ISR writes pipelined, each still its
    own compare-and-set (issue 33: a restarted broker's followers rejoin every ISR)."""
    a, b = started(zk), started(zk)
    fence = a.try_become_controller(1)
    assert fence is not None
    a.create_topic("t", TOPIC_ID, {p: [1, 2] for p in range(3)}, {})
    a.write_partition_states(
        fence,
        [PartitionStateWrite("t", p, PartitionState(1, 0, (1, 2), 0), None) for p in range(3)],
    )
    shrunk = PartitionState(1, 0, (1,), 0)
    results = b.update_partition_states(
        [("t", 0, shrunk, 0), ("t", 1, shrunk, 5), ("t", 2, shrunk, 0), ("gone", 0, shrunk, 0)]
    )
    assert results == [1, None, 1, None]  # a stale version, a missing partition: None
    assert [a.partition_state("t", p).isr for p in range(3)] == [(1,), (1, 2), (1,)]  # type: ignore[union-attr]
    b.suspend()
    failed = b.update_partition_states([("t", 1, shrunk, 0), ("t", 2, shrunk, 1)])
    assert len(failed) == 2
    assert all(isinstance(r, ClusterStoreUnavailableError) for r in failed)
    b.resume()
    assert a.partition_state("t", 1).isr == (1, 2)  # type: ignore[union-attr]


def test_cluster_id_is_set_once(zk: FakeZooKeeper) -> None:
    a, b = started(zk), started(zk)
    assert a.cluster_id("first") == "first"
    assert b.cluster_id("second") == "first"


def test_one_lost_compare_and_set_does_not_fail_its_batch(zk: FakeZooKeeper) -> None:
    a = started(zk)
    a.WRITE_BATCH = 4  # several batches, one of them with a conflict
    fence = a.try_become_controller(1)
    assert fence is not None
    a.create_topic("t", TOPIC_ID, {p: [1] for p in range(10)}, {})
    created = a.write_partition_states(
        fence,
        [PartitionStateWrite("t", p, PartitionState(1, 0, (1,), 0), None) for p in range(10)],
    )
    assert created == {("t", p): 0 for p in range(10)}
    assert a.update_partition_state("t", 5, PartitionState(1, 0, (1,), 1), 0) == 1  # a leader
    moved = a.write_partition_states(
        fence, [PartitionStateWrite("t", p, PartitionState(2, 1, (2,), 0), 0) for p in range(10)]
    )
    assert moved == {("t", p): (None if p == 5 else 1) for p in range(10)}
    states = a.partition_states([("t", p) for p in range(10)])
    assert [states[("t", p)].leader for p in range(10)] == [2, 2, 2, 2, 2, 1, 2, 2, 2, 2]


def test_creating_a_state_whose_partition_znode_exists(zk: FakeZooKeeper) -> None:
    a = started(zk)
    fence = a.try_become_controller(1)
    assert fence is not None
    a.create_topic("t", TOPIC_ID, {0: [1], 1: [1]}, {})
    a.client.ensure_path_async("/brokers/topics/t/partitions/1").get()  # left by a tool
    got = a.write_partition_states(
        fence, [PartitionStateWrite("t", p, PartitionState(1, 0, (1,), 0), None) for p in (0, 1)]
    )
    assert got == {("t", 0): 0, ("t", 1): 0}


@pytest.mark.parametrize("late", ["watch event", "failed read"])
def test_a_watch_lost_with_the_connection_is_rearmed_when_kazoo_tells_it_late(
    zk: FakeZooKeeper, late: str
) -> None:
    """kazoo drops every watch on a connection loss and tells each watcher with a NONE
    event on its watch thread (a read in flight fails on its completion thread), while
    the store handles the reconnection on its session thread: the news can come after
    ``_reconnected`` collected the pending watches (issue 31, the unapplied leader
    states: a broker's view missed two partitions' states until its shutdown read them)."""
    broker, controller = started(zk), started(zk)
    seen: list[PartitionState | None] = []
    watch = broker.watch_partition_state("t", 0, lambda _key, state: seen.append(state))
    assert seen == [None]  # no state yet: an exists watch waits for it
    path = zk_layout.partition_state_path("t", 0)
    broker.suspend()
    dropped = zk._data_watches.pop(path)  # the server forgets the connection's watches
    broker.resume()  # the reconnection is handled first: nothing pending yet
    if late == "watch event":
        for watcher in dropped:
            watcher(WatchedEvent(EventType.NONE, KeeperState.CONNECTING, None))
    else:
        watch._got(FakeAsyncResult(exception=ConnectionLoss()))  # type: ignore[attr-defined]
    controller.write_znode(path, zk_layout.encode_partition_state(1, 0, (1,), 1), None)
    assert seen[-1] == PartitionState(1, 0, (1,), 1, zk_version=0)
