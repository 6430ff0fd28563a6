"""Controller decisions (pure) and the controller on the in-memory ZooKeeper."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pytest

from headwater.cluster.controller import (
    Controller,
    InvalidReplicaAssignmentError,
    add_partitions,
    create_topic,
    elect_leader,
    initial_leader_and_isr,
    next_state,
    preferred_leader_moves,
)
from headwater.cluster.replica_placement import (
    ENFORCED_MIXED_RACKS_MESSAGE,
    MIXED_RACKS_MESSAGE,
    AdminOperationError,
    InvalidReplicationFactorError,
    RackAwareMode,
)
from headwater.cluster.store import (
    NO_LEADER,
    BrokerRegistration,
    ControllerFence,
    PartitionState,
    PartitionStateWrite,
    TopicAssignment,
)
from headwater.log.errors import InvalidPartitionsError
from headwater.testing import FakeZooKeeper, InMemoryClusterStore

# --- elections -----------------------------------------------------------------------


def test_initial_state_leader_is_first_live_replica() -> None:
    assert initial_leader_and_isr([3, 1, 2], {1, 2, 3}) == (3, (3, 1, 2))
    assert initial_leader_and_isr([3, 1, 2], {1, 2}) == (1, (1, 2))
    assert initial_leader_and_isr([3, 1], set()) == (NO_LEADER, (3, 1))


def test_election_takes_the_first_live_isr_member_in_assignment_order() -> None:
    assert elect_leader([1, 2, 3], isr=[3, 2], live={2, 3}, unclean=False) == (2, (3, 2))
    assert elect_leader([1, 2, 3], isr=[1], live={2, 3}, unclean=False) is None
    assert elect_leader([1, 2, 3], isr=[1], live={2, 3}, unclean=True) == (2, (2,))


def test_leader_loss_bumps_the_epoch_and_drops_the_dead_from_the_isr() -> None:
    state = PartitionState(1, 4, (1, 2, 3), 7)
    assert next_state([1, 2, 3], state, {2, 3}, False) == PartitionState(2, 5, (2, 3), 7)


def test_follower_loss_shrinks_the_isr_without_a_new_epoch() -> None:
    state = PartitionState(1, 4, (1, 2, 3), 7)
    assert next_state([1, 2, 3], state, {1, 2}, False) == PartitionState(1, 4, (1, 2), 7)
    assert next_state([1, 2, 3], state, {1, 2, 3}, False) is None


def test_no_clean_candidate_leaves_the_partition_leaderless_keeping_the_last_isr() -> None:
    state = PartitionState(1, 4, (1,), 7)
    assert next_state([1, 2], state, {2}, False) == PartitionState(NO_LEADER, 5, (1,), 7)
    leaderless = PartitionState(NO_LEADER, 5, (1,), 7)
    assert next_state([1, 2], leaderless, {2}, False) is None
    # The last ISR member comes back: it leads again, cleanly.
    assert next_state([1, 2], leaderless, {1, 2}, False) == PartitionState(1, 6, (1,), 7)
    # Unclean election takes the live out-of-sync replica instead.
    assert next_state([1, 2], state, {2}, True) == PartitionState(2, 5, (2,), 7)


def test_preferred_leader_moves_only_past_the_imbalance_threshold() -> None:
    topic = TopicAssignment("t", __import__("uuid").uuid4(), {0: [1, 2], 1: [2, 1]})
    states = {("t", 0): PartitionState(2, 3, (2, 1), 1), ("t", 1): PartitionState(2, 0, (2, 1), 1)}
    moves = preferred_leader_moves({"t": topic}, states, {1, 2}, 10)
    assert moves == {("t", 0): PartitionState(1, 4, (2, 1), 1)}
    # Preferred replica out of the ISR or dead: no move.
    states[("t", 0)] = PartitionState(2, 3, (2,), 1)
    assert preferred_leader_moves({"t": topic}, states, {1, 2}, 10) == {}
    assert preferred_leader_moves({"t": topic}, states, {2}, 10) == {}


# --- the controller on the in-memory store ---------------------------------------------


class Cluster:
    def __init__(self) -> None:
        self.zk = FakeZooKeeper()
        self.stores: dict[int, InMemoryClusterStore] = {}
        self.controllers: dict[int, Controller] = {}

    def add_broker(self, broker_id: int, **options: object) -> Controller:
        store = InMemoryClusterStore(self.zk)
        store.start()
        store.register_broker(BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id))
        controller = Controller(store, broker_id, **options)  # type: ignore[arg-type]
        self.stores[broker_id] = store
        self.controllers[broker_id] = controller
        controller.start()
        self.settle()
        return controller

    def settle(self) -> None:
        for _ in range(3):
            for controller in self.controllers.values():
                assert controller.wait_idle(10)

    def active(self) -> list[int]:
        return [b for b, c in self.controllers.items() if c.is_active]

    def state(self, topic: str, partition: int) -> PartitionState:
        state = next(iter(self.stores.values())).partition_state(topic, partition)
        assert state is not None
        return state

    def close(self) -> None:
        for controller in self.controllers.values():
            controller.stop()
        for store in self.stores.values():
            store.close()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.close()


def test_exactly_one_controller_and_initial_states(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.add_broker(b)
    assert cluster.active() == [1]
    store = cluster.stores[2]
    create_topic(store, "t", 3, 3, replica_assignment={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    cluster.settle()
    assert cluster.state("t", 0) == PartitionState(1, 0, (1, 2, 3), 1, 0)
    assert cluster.state("t", 1) == PartitionState(2, 0, (2, 3, 1), 1, 0)


def test_failover_elects_from_the_isr_and_bumps_the_epoch(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", 2, 2, replica_assignment={0: [2, 3], 1: [3, 1]})
    cluster.settle()
    cluster.stores[2].expire_session()  # broker 2's session ends (it re-registers after)
    cluster.stores[2].unregister_broker()  # ... and stays away
    cluster.settle()
    assert cluster.state("t", 0).leader == 3
    assert cluster.state("t", 0).leader_epoch == 1
    assert cluster.state("t", 0).isr == (3,)
    assert cluster.state("t", 1) == PartitionState(3, 0, (3, 1), 1, 0)


def test_controller_session_loss_moves_control_and_reelects(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", 1, 2, replica_assignment={0: [1, 2]})
    cluster.settle()
    cluster.stores.pop(1).close()  # controller 1 dies: session closed, ephemerals gone
    cluster.controllers.pop(1).stop()
    cluster.settle()
    (new,) = cluster.active()
    assert new in (2, 3)
    assert cluster.controllers[new].epoch == 2
    state = cluster.state("t", 0)
    assert (state.leader, state.leader_epoch, state.isr) == (2, 1, (2,))


def test_expired_controller_stops_acting(cluster: Cluster) -> None:
    for b in (1, 2):
        cluster.add_broker(b)
    cluster.controllers[2].stop()  # broker 2 does not run for controller
    cluster.stores[1].expire_session()
    cluster.settle()
    # Broker 1 lost its /controller znode with the session, then won a new election.
    assert cluster.controllers[1].is_active
    assert cluster.controllers[1].epoch == 2
    assert cluster.controllers[1].activations >= 2  # it resigned in between


def test_no_unclean_election_by_default_but_per_topic_opt_in(cluster: Cluster) -> None:
    for b in (1, 2):
        cluster.add_broker(b)
    store = cluster.stores[1]
    create_topic(store, "safe", 1, 2, replica_assignment={0: [2, 1]})
    create_topic(
        store, "risky", 1, 2, {"unclean.leader.election.enable": "true"},
        replica_assignment={0: [2, 1]},
    )  # fmt: skip
    cluster.settle()
    for name in ("safe", "risky"):  # broker 1 fell out of the ISR
        s = cluster.state(name, 0)
        assert store.update_partition_state(name, 0, PartitionState(2, 0, (2,), 1), s.zk_version)
    cluster.stores[2].close()
    cluster.settle()
    assert cluster.state("safe", 0).leader == NO_LEADER
    assert cluster.state("safe", 0).isr == (2,)
    assert cluster.state("risky", 0).leader == 1
    assert cluster.state("risky", 0).isr == (1,)


def test_cas_conflict_with_a_leader_is_re_read_and_decided_again(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.add_broker(b)
    store = cluster.stores[1]
    create_topic(store, "t", 1, 3, replica_assignment={0: [1, 2, 3]})
    cluster.settle()
    # The leader shrank the ISR on its own (the controller's cache is now stale).
    assert store.update_partition_state("t", 0, PartitionState(1, 0, (1, 3), 1), 0) == 1
    cluster.stores[3].close()
    cluster.settle()
    assert cluster.state("t", 0) == PartitionState(1, 0, (1,), 1, 2)


def test_returning_broker_leads_its_leaderless_partitions(cluster: Cluster) -> None:
    for b in (1, 2):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", 1, 1, replica_assignment={0: [2]})
    cluster.settle()
    cluster.stores[2].unregister_broker()
    cluster.settle()
    assert cluster.state("t", 0).leader == NO_LEADER
    cluster.stores[2].register_broker(BrokerRegistration(2, "127.0.0.1", 9002))
    cluster.settle()
    assert cluster.state("t", 0).leader == 2
    assert cluster.state("t", 0).leader_epoch == 2


def test_preferred_leader_rebalance(cluster: Cluster) -> None:
    for b in (1, 2):
        cluster.add_broker(b, auto_leader_rebalance_enable=True)
    store = cluster.stores[1]
    create_topic(store, "t", 2, 2, replica_assignment={0: [1, 2], 1: [2, 1]})
    cluster.settle()
    state = cluster.state("t", 1)
    # Leadership of partition 1 moved to broker 1 earlier (e.g. a failover).
    store.update_partition_state("t", 1, PartitionState(1, 3, (2, 1), 1), state.zk_version)
    cluster.controllers[1].trigger_preferred_leader_election()
    cluster.settle()
    assert cluster.state("t", 1).leader == 2
    assert cluster.state("t", 1).leader_epoch == 4


def test_topic_deletion(cluster: Cluster) -> None:
    cluster.add_broker(1)
    store = cluster.stores[1]
    create_topic(store, "t", 2, 1)
    cluster.settle()
    store.delete_topic("t")
    cluster.settle()
    assert store.topics() == []
    assert store.deletion_requests() == []
    assert store.partition_state("t", 0) is None


def test_create_topic_checks_replication_factor_and_assignment(cluster: Cluster) -> None:
    cluster.add_broker(1)
    store = cluster.stores[1]
    with pytest.raises(InvalidReplicationFactorError):
        create_topic(store, "t", 1, 2)
    with pytest.raises(InvalidReplicaAssignmentError, match="unknown broker"):
        create_topic(store, "t", 1, 1, replica_assignment={0: [7]})
    with pytest.raises(InvalidReplicaAssignmentError):
        create_topic(store, "t", 2, 1, replica_assignment={0: [1], 1: []})


def test_added_partitions_get_states_and_continue_the_round_robin(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.add_broker(b)
    store = cluster.stores[1]
    create_topic(store, "t", 3, 2, rng=random.Random(3))
    cluster.settle()
    grown = add_partitions(store, "t", 6, rng=random.Random(3))
    assert sorted(grown.replicas) == list(range(6))
    assert all(len(r) == 2 and len(set(r)) == 2 for r in grown.replicas.values())
    cluster.settle()
    for p in range(3, 6):
        state = cluster.state("t", p)
        assert state.leader == grown.replicas[p][0]
        assert state.leader_epoch == 0
    with pytest.raises(InvalidPartitionsError):
        add_partitions(store, "t", 6)
    with pytest.raises(InvalidReplicaAssignmentError):
        add_partitions(store, "t", 7, replica_assignment={6: [9]})


def _registered(racks: dict[int, str | None]) -> list[InMemoryClusterStore]:
    """Brokers registered with these racks on one in-memory ZooKeeper (no controller:
    topic administration only writes the topic znode)."""
    zk = FakeZooKeeper()
    stores = []
    for broker_id, rack in racks.items():
        store = InMemoryClusterStore(zk)
        store.start()
        store.register_broker(BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id, rack))
        stores.append(store)
    return stores


def test_created_topics_put_replicas_on_distinct_racks() -> None:
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    stores = _registered(racks)
    try:
        topic = create_topic(stores[0], "t", 12, 3, rng=random.Random(2))
        for replicas in topic.replicas.values():
            assert {racks[b] for b in replicas} == {"a", "b", "c"}
        grown = add_partitions(stores[0], "t", 18, rng=random.Random(2))
        for p in range(12, 18):
            assert {racks[b] for b in grown.replicas[p]} == {"a", "b", "c"}
    finally:
        for store in stores:
            store.close()


def test_mixed_racks_refuse_placement_unless_safe_or_explicit() -> None:
    stores = _registered({1: "a", 2: "b", 3: None})
    try:
        store = stores[0]
        with pytest.raises(AdminOperationError) as created:
            create_topic(store, "t", 3, 2)
        assert str(created.value) == MIXED_RACKS_MESSAGE
        assert created.value.kafka_error_code == -1
        auto = create_topic(store, "auto", 3, 3, rack_aware_mode=RackAwareMode.SAFE)
        assert all(sorted(r) == [1, 2, 3] for r in auto.replicas.values())
        create_topic(store, "t", 1, 2, replica_assignment={0: [3, 1]})
        with pytest.raises(AdminOperationError) as added:
            add_partitions(store, "t", 2)
        assert str(added.value) == ENFORCED_MIXED_RACKS_MESSAGE
        grown = add_partitions(store, "t", 3, replica_assignment={1: [1, 3], 2: [3, 2]})
        assert grown.replicas == {0: [3, 1], 1: [1, 3], 2: [3, 2]}
        disabled = add_partitions(store, "t", 4, rack_aware_mode=RackAwareMode.DISABLED)
        assert len(set(disabled.replicas[3])) == 2
    finally:
        for s in stores:
            s.close()


def test_unclean_config_set_after_creation_is_honoured(cluster: Cluster) -> None:
    for b in (1, 2):
        cluster.add_broker(b)
    store = cluster.stores[1]
    create_topic(store, "t", 1, 2, replica_assignment={0: [2, 1]})
    cluster.settle()
    s = cluster.state("t", 0)
    assert store.update_partition_state("t", 0, PartitionState(2, 0, (2,), 1), s.zk_version)
    store.set_topic_configs("t", {"unclean.leader.election.enable": "true"})
    cluster.stores[2].close()
    cluster.settle()
    assert cluster.state("t", 0).leader == 1


def test_controlled_shutdown_moves_leaders_and_leaves_isrs(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        cluster.add_broker(b)
    create_topic(
        cluster.stores[1], "t", 3, 3,
        replica_assignment={0: [2, 3, 1], 1: [3, 2, 1], 2: [1, 2, 3]},
    )  # fmt: skip
    create_topic(cluster.stores[1], "alone", 1, 2, replica_assignment={0: [2, 3]})
    cluster.settle()
    # Only broker 2 is in sync for "alone": nobody else may lead it.
    state = cluster.state("alone", 0)
    cluster.stores[2].update_partition_state(
        "alone", 0, PartitionState(2, 0, (2,), 1), state.zk_version
    )
    cluster.stores[2].request_controlled_shutdown(2)
    cluster.settle()
    assert cluster.state("t", 0) == PartitionState(3, 1, (3, 1), 1, 1)  # leader moved
    assert cluster.state("t", 1).leader == 3 and cluster.state("t", 1).isr == (3, 1)
    assert cluster.state("t", 1).leader_epoch == 0  # an ISR change keeps the epoch
    assert cluster.state("t", 2).isr == (1, 3)
    assert cluster.state("alone", 0).leader == 2  # kept: it would go offline otherwise
    # Nothing moves back to broker 2 while it is stopping.
    cluster.controllers[1].trigger_preferred_leader_election()
    cluster.settle()
    assert cluster.state("t", 0).leader == 3
    # Once it has gone and come back, it is an ordinary broker again.
    cluster.stores[2].withdraw_controlled_shutdown(2)
    cluster.settle()
    assert cluster.controllers[1]._shutting_down == set()


def _isr_the_cache_misses(cluster: Cluster) -> None:
    """t-0 on brokers 1, 2, 3, led by 1; ZooKeeper's ISR has broker 2 (its leader took
    it back, writing ZooKeeper itself), the controller's cache does not."""
    for b in (1, 2, 3):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", 1, 3, replica_assignment={0: [1, 2, 3]})
    cluster.settle()
    state = cluster.state("t", 0)
    cluster.controllers[1]._states[("t", 0)] = PartitionState(1, 0, (1, 3), 1, state.zk_version)
    assert cluster.state("t", 0).isr == (1, 2, 3)  # what ZooKeeper holds


def test_controlled_shutdown_takes_a_follower_out_of_an_isr_the_cache_does_not_show(
    cluster: Cluster,
) -> None:
    """The leader took broker 2 back into the ISR (a follower caught up after a pause),
    writing ZooKeeper itself: the controller's cache still shows it out. Its controlled
    shutdown must still take it out (it waited three attempts, then stopped anyway)."""
    _isr_the_cache_misses(cluster)
    cluster.stores[2].request_controlled_shutdown(2)
    cluster.settle()
    assert cluster.state("t", 0).leader == 1 and cluster.state("t", 0).isr == (1, 3)


def test_a_dead_follower_leaves_an_isr_the_cache_does_not_show_it_in(cluster: Cluster) -> None:
    _isr_the_cache_misses(cluster)
    cluster.stores[2].close()
    cluster.settle()
    assert cluster.state("t", 0).leader == 1 and cluster.state("t", 0).isr == (1, 3)


def _states_read_when_a_broker_dies(partitions: int) -> tuple[int, Cluster]:
    """Partitions read from ZooKeeper by the controller between broker 3's death and
    its elections, for a topic of ``partitions`` at RF 3 on brokers 1-3."""
    cluster = Cluster()
    for b in (1, 2, 3):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", partitions, 3)
    cluster.settle()
    store = cluster.stores[1]
    reads: list[int] = []
    real = store.partition_states

    def counted(keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionState]:
        listed = list(keys)
        reads.append(len(listed))
        return real(listed)

    store.partition_states = counted  # type: ignore[method-assign,assignment]
    cluster.stores[3].close()
    cluster.settle()
    return sum(reads), cluster


@pytest.mark.parametrize("partitions", [100, 1_000])
def test_a_broker_failure_elects_without_reading_every_partition_first(partitions: int) -> None:
    """The cache decides where it shows the dead broker leading or in the ISR (the
    compare-and-set catches a stale one): no read grows with the partition count."""
    reads, cluster = _states_read_when_a_broker_dies(partitions)
    try:
        assert reads == 0
        for p in range(partitions):
            state = cluster.state("t", p)
            assert 3 not in state.isr and state.leader in (1, 2), (p, state)
    finally:
        cluster.close()


def test_a_broker_failure_writes_the_new_leaders_before_the_isr_only_changes(
    cluster: Cluster,
) -> None:
    for b in (1, 2, 3):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", 30, 3)
    cluster.settle()
    led_by_3 = {p for p in range(30) if cluster.state("t", p).leader == 3}
    assert 0 < len(led_by_3) < 30
    store = cluster.stores[1]
    written: list[tuple[int, bool]] = []
    real = store.write_partition_states

    def recorded(fence: ControllerFence, writes: Sequence[PartitionStateWrite]) -> Any:
        written.extend((w.partition, w.partition in led_by_3) for w in writes)
        return real(fence, writes)

    store.write_partition_states = recorded  # type: ignore[method-assign]
    cluster.stores[3].close()
    cluster.settle()
    assert len(written) == 30
    first = [new_leader for _, new_leader in written[: len(led_by_3)]]
    assert all(first), written  # every new leader first, then the 20 ISR shrinks
    assert not any(new_leader for _, new_leader in written[len(led_by_3) :])


def test_a_stale_cached_isr_loses_its_compare_and_set_and_is_decided_again(
    cluster: Cluster,
) -> None:
    """The leader shrank the ISR to (1, 3) in ZooKeeper; the cache still shows (1, 2, 3)
    at the older version. Broker 3 dies: the write from the cache loses, is read
    again, and the result is decided from what ZooKeeper holds."""
    for b in (1, 2, 3):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", 1, 3, replica_assignment={0: [1, 2, 3]})
    cluster.settle()
    old = cluster.state("t", 0)
    shrunk = PartitionState(1, old.leader_epoch, (1, 3), old.controller_epoch)
    assert cluster.stores[1].update_partition_state("t", 0, shrunk, old.zk_version) is not None
    assert cluster.controllers[1]._states[("t", 0)].isr == (1, 2, 3)  # the stale cache
    cluster.stores[3].close()
    cluster.settle()
    state = cluster.state("t", 0)
    assert state.leader == 1 and state.isr == (1,)


def test_controlled_shutdown_of_the_controller_itself(cluster: Cluster) -> None:
    for b in (1, 2):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", 1, 2, replica_assignment={0: [1, 2]})
    cluster.settle()
    cluster.stores[1].request_controlled_shutdown(1)
    cluster.settle()
    assert cluster.state("t", 0).leader == 2
    assert cluster.state("t", 0).isr == (2,)


def test_requested_elections_follow_kip_460() -> None:
    from headwater.cluster.controller import (
        ELECTION_NOT_NEEDED,
        ELIGIBLE_LEADERS_NOT_AVAILABLE,
        PREFERRED,
        PREFERRED_LEADER_NOT_AVAILABLE,
        UNCLEAN,
        requested_election,
    )

    led_by_2 = PartitionState(2, 4, (2, 1), 1)
    assert requested_election(PREFERRED, [1, 2], led_by_2, {1, 2}) == PartitionState(
        1, 5, (2, 1), 1
    )
    assert requested_election(PREFERRED, [2, 1], led_by_2, {1, 2}) == ELECTION_NOT_NEEDED
    assert requested_election(PREFERRED, [3, 2], led_by_2, {2, 3}) == PREFERRED_LEADER_NOT_AVAILABLE
    assert requested_election(PREFERRED, [1, 2], led_by_2, {2}) == PREFERRED_LEADER_NOT_AVAILABLE
    assert requested_election(UNCLEAN, [1, 2], led_by_2, {1, 2}) == ELECTION_NOT_NEEDED
    offline = PartitionState(NO_LEADER, 4, (2,), 1)
    assert requested_election(UNCLEAN, [1, 2], offline, {1}) == PartitionState(1, 5, (1,), 1)
    assert requested_election(UNCLEAN, [1, 2], offline, {3}) == ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_leader_election_requests_are_answered_in_zookeeper(cluster: Cluster) -> None:
    for b in (1, 2):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", 2, 2, replica_assignment={0: [1, 2], 1: [2, 1]})
    cluster.settle()
    state = cluster.state("t", 0)
    cluster.stores[1].update_partition_state(
        "t", 0, PartitionState(2, 1, (1, 2), 1), state.zk_version
    )
    name = cluster.stores[2].request_leader_election(0, [("t", 0), ("t", 1), ("t", 9)])
    cluster.settle()
    request = cluster.stores[2].leader_election_request(name)
    assert request is not None
    assert request[2] == {("t", 0): 0, ("t", 1): 84, ("t", 9): 3}
    assert cluster.state("t", 0).leader == 1 and cluster.state("t", 0).leader_epoch == 2
    cluster.stores[2].forget_leader_election(name)
    assert cluster.stores[2].leader_election_request(name) is None


def test_reassignment_plan_and_completion() -> None:
    from headwater.cluster.controller import reassignment_done, reassignment_plan

    assert reassignment_plan([1, 2], [], [3, 4]) == ([3, 4, 1, 2], [3, 4], [1, 2])
    # A new target replaces a move in flight: the originals are those not being added.
    assert reassignment_plan([3, 4, 1, 2], [3, 4], [2, 3]) == ([2, 3, 1], [3], [1])
    moving = PartitionState(1, 5, (1, 2, 3), 1)
    assert reassignment_done([3, 4], moving, {1, 2, 3, 4}) is None  # 4 not in sync yet
    done = reassignment_done([3, 4], PartitionState(1, 5, (1, 2, 3, 4), 1), {1, 2, 3, 4})
    assert done == PartitionState(3, 6, (3, 4), 1)  # leader leaves: new leader, new epoch
    kept = reassignment_done([1, 3], PartitionState(1, 5, (1, 2, 3), 1), {1, 2, 3})
    assert kept == PartitionState(1, 5, (1, 3), 1)


def test_reassignment_moves_completes_and_can_be_cancelled(cluster: Cluster) -> None:
    for b in (1, 2, 3, 4):
        cluster.add_broker(b)
    create_topic(cluster.stores[1], "t", 2, 2, replica_assignment={0: [1, 2], 1: [1, 2]})
    cluster.settle()
    store = cluster.stores[4]
    name = store.request_reassignments({("t", 0): [3, 4], ("t", 1): [3, 4], ("t", 7): [1]})
    cluster.settle()
    request = store.reassignment_request(name)
    assert request is not None and request[1] == {
        ("t", 0): (0, None), ("t", 1): (0, None), ("t", 7): (3, "t-7 does not exist"),
    }  # fmt: skip
    topic = store.topic("t")
    assert topic is not None
    assert topic.replicas[0] == [3, 4, 1, 2] and topic.adding[0] == [3, 4]
    # Cancel partition 1 before its new replicas catch up: back on {1, 2}.
    store.request_reassignments({("t", 1): None})
    cluster.settle()
    # The new replicas of partition 0 caught up (their leader put them in the ISR).
    state = cluster.state("t", 0)
    store.update_partition_state("t", 0, PartitionState(1, 0, (1, 2, 3, 4), 1), state.zk_version)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and cluster.state("t", 0).leader != 3:
        time.sleep(0.05)
    assert cluster.state("t", 0) == PartitionState(3, 1, (3, 4), 1, 2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (store.topic("t") or topic).adding:
        time.sleep(0.05)
    final = store.topic("t")
    assert final is not None
    assert final.replicas == {0: [3, 4], 1: [1, 2]}
    assert final.adding == {} and final.removing == {}
    again = store.request_reassignments({("t", 1): None})
    cluster.settle()
    answered = store.reassignment_request(again)
    assert answered is not None and answered[1] is not None
    assert answered[1][("t", 1)][0] == 85  # NO_REASSIGNMENT_IN_PROGRESS


def test_log_dir_events_move_the_reported_replicas_away_and_are_deleted(cluster: Cluster) -> None:
    """KIP-112: a broker lists its offline (or corrupt) replicas in a
    /log_dir_event_notification znode; their leadership moves to another ISR member,
    the broker leaves their ISRs, its other partitions stay, the znode goes."""
    from headwater.cluster import zk_layout

    for b in (1, 2, 3):
        cluster.add_broker(b)
    create_topic(
        cluster.stores[1], "t", 3, 3,
        replica_assignment={0: [2, 3, 1], 1: [3, 2, 1], 2: [2, 1, 3]},
    )  # fmt: skip
    create_topic(cluster.stores[1], "alone", 1, 2, replica_assignment={0: [2, 3]})
    cluster.settle()
    state = cluster.state("alone", 0)
    cluster.stores[2].update_partition_state(
        "alone", 0, PartitionState(2, 0, (2,), 1), state.zk_version
    )
    cluster.settle()
    name = cluster.stores[2].notify_log_dir_event(
        2, [("t", 0), ("t", 1), ("alone", 0)], "log_dir_failure"
    )
    assert name.startswith("log_dir_event_")
    cluster.settle()
    assert cluster.state("t", 0) == PartitionState(3, 1, (3, 1), 1, 1)  # leader moved
    assert cluster.state("t", 1).leader == 3 and cluster.state("t", 1).isr == (3, 1)
    assert cluster.state("t", 2).leader == 2  # not reported: untouched
    assert cluster.state("t", 2).isr == (2, 1, 3)
    assert cluster.state("alone", 0).leader == 2  # nobody else in sync: kept
    assert cluster.stores[1].log_dir_event(name) is None
    assert cluster.stores[1]._children(zk_layout.LOG_DIR_EVENT_NOTIFICATION) == []
    data = zk_layout.encode_log_dir_event(2, [("t", 0)], "corrupt")
    assert b'"version":1' in data.replace(b" ", b"") and b'"event":1' in data.replace(b" ", b"")
    assert zk_layout.decode_log_dir_event(data) == (2, [("t", 0)], "corrupt")
