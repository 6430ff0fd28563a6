"""The controller on a real ZooKeeper: two candidates, one's session dies, the other
takes over and re-elects the leaders of the dead broker's partitions."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from headwater.cluster.controller import Controller, create_topic
from headwater.cluster.store import NO_LEADER, BrokerRegistration, PartitionState, ZkClusterStore
from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.zookeeper import expire_session, fresh_chroot_connect


def wait_for(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


class Node:
    """One broker's ZooKeeper side: its store (own session) and its controller."""

    def __init__(self, connect: str, broker_id: int) -> None:
        self.broker_id = broker_id
        self.store = ZkClusterStore(connect, session_timeout_ms=1000)
        self.store.start(timeout=10)
        self.store.register_broker(BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id))
        self.controller = Controller(self.store, broker_id, retry_backoff_s=0.1)
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()
        self.store.close()


@pytest.fixture
def nodes(zookeeper: ZooKeeperServer) -> Iterator[dict[int, Node]]:
    connect = fresh_chroot_connect(zookeeper)
    made: dict[int, Node] = {}
    for broker_id in (1, 2, 3):
        made[broker_id] = Node(connect, broker_id)
        wait_for(lambda: made[1].controller.is_active)
    yield made
    for node in made.values():
        node.close()


def state(store: ZkClusterStore, topic: str, partition: int) -> PartitionState | None:
    return store.partition_state(topic, partition)


def test_controller_failover_reelects_leaders_of_the_dead_broker(nodes: dict[int, Node]) -> None:
    reader = nodes[3].store
    assert [b for b, n in nodes.items() if n.controller.is_active] == [1]
    create_topic(reader, "t", 3, 2, replica_assignment={0: [1, 2], 1: [2, 3], 2: [3, 1]})
    wait_for(lambda: all(state(reader, "t", p) is not None for p in range(3)))
    assert state(reader, "t", 0) == PartitionState(1, 0, (1, 2), 1, 0)

    # Broker 1 (the controller, leader of t-0) dies and does not come back: its
    # controller thread ends and its ZooKeeper session closes, taking its
    # registration and /controller with it. (A kill -9 is noticed after the session
    # timeout instead; the next test expires a session.)
    assert nodes[1].store.writer_client is not None  # the controller wrote the states
    nodes[1].controller.stop()
    assert nodes[1].store.writer_client is None  # released with the controllership
    nodes[1].store.client.stop()

    wait_for(lambda: nodes[2].controller.is_active or nodes[3].controller.is_active)
    wait_for(lambda: (s := state(reader, "t", 0)) is not None and s.leader == 2)
    moved = state(reader, "t", 0)
    assert moved is not None
    assert (moved.leader, moved.leader_epoch, moved.isr) == (2, 1, (2,))
    assert moved.controller_epoch == 2
    # A follower on the dead broker leaves the ISR; its leader keeps its epoch.
    wait_for(lambda: (s := state(reader, "t", 2)) is not None and s.isr == (3,))
    kept = state(reader, "t", 2)
    assert kept is not None and (kept.leader, kept.leader_epoch) == (3, 0)
    # A partition without broker 1 is untouched.
    assert state(reader, "t", 1) == PartitionState(2, 0, (2, 3), 1, 0)


def test_expired_controller_stops_and_the_other_takes_over(nodes: dict[int, Node]) -> None:
    reader = nodes[3].store
    create_topic(reader, "t", 1, 2, replica_assignment={0: [1, 2]})
    wait_for(lambda: state(reader, "t", 0) is not None)
    nodes[3].controller.stop()  # two candidates: 1 (controller) and 2
    expire_session(nodes[1].store.client)
    # Broker 1's registration and /controller vanished with its session; broker 2 won
    # the election (or 1 won it back on its new session; either way, one controller
    # with a new epoch) and leadership of t-0 moved off the bounced broker 1.
    wait_for(lambda: reader.controller_epoch() >= 2 and reader.controller_id() is not None)
    wait_for(lambda: (s := state(reader, "t", 0)) is not None and s.leader == 2)
    assert sum(n.controller.is_active for n in nodes.values()) == 1
    wait_for(lambda: 1 in reader.brokers())  # broker 1 re-registered on its new session
    after = state(reader, "t", 0)
    assert after is not None and after.leader_epoch >= 1 and after.leader != NO_LEADER


BROKER_SCRIPT = """
import sys, time
from headwater.cluster.store import BrokerRegistration, ZkClusterStore
store = ZkClusterStore(sys.argv[1], session_timeout_ms=1000)
store.start(timeout=10)
store.register_broker(BrokerRegistration(int(sys.argv[2]), "127.0.0.1", 9100))
print("registered", flush=True)
time.sleep(600)
"""


def test_kill_9_of_a_broker_moves_its_leaderships_after_the_session_timeout(
    zookeeper: ZooKeeperServer,
) -> None:
    connect = fresh_chroot_connect(zookeeper)
    node = Node(connect, 1)
    victim = subprocess.Popen(
        [sys.executable, "-c", BROKER_SCRIPT, connect, "2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert victim.stdout is not None and victim.stdout.readline().strip() == "registered"
        wait_for(lambda: node.controller.is_active and 2 in node.store.brokers())
        create_topic(node.store, "t", 1, 2, replica_assignment={0: [2, 1]})
        wait_for(lambda: state(node.store, "t", 0) is not None)
        assert state(node.store, "t", 0) == PartitionState(2, 0, (2, 1), 1, 0)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed = time.monotonic()
        # The session is not closed by a dead process: ZooKeeper ends it after the
        # 1 s timeout, then the controller elects broker 1.
        wait_for(lambda: (s := state(node.store, "t", 0)) is not None and s.leader == 1)
        assert time.monotonic() - killed < 10
        assert state(node.store, "t", 0) == PartitionState(1, 1, (1,), 1, 1)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
        node.close()
