"""The cluster controller (Kafka's ZooKeeper-mode ``KafkaController``, reduced).

One broker at a time is controller: whoever creates the ephemeral ``/controller``
znode, bumping ``/controller_epoch`` in the same transaction. Every write it
makes checks that epoch's znode version, so a controller that lost its session
and does not know yet is fenced. When its session expires the controller stops
acting at once and another broker takes over.

What it decides (the pure functions below, unit-tested without any store):
- initial partition states of a new topic: leader = first live replica, ISR =
  live replicas, leader epoch 0;
- on a broker's session end: a new leader from the live ISR in assignment order
  (leader epoch + 1); the dead replica leaves every ISR; no unclean election
  unless ``unclean.leader.election.enable`` (broker default or topic config);
- when a broker comes back: leaderless partitions it replicates get a leader;
- preferred-leader rebalance (``auto.leader.rebalance.enable``) when a broker
  leads fewer than (100 - ``leader.imbalance.per.broker.percentage``)% of the
  partitions it is preferred for;
- topic deletion from ``/admin/delete_topics`` markers.
And ``create_topic`` / ``add_partitions``, the writes of topic administration
from any broker, placing replicas with ``replica_placement``.

An ISR change made by the controller (a dead follower removed) keeps the leader
epoch: only leader changes bump it, so a surviving leader's fetch sessions and
clients' cached epochs stay valid. Leaders learn of such a change through their
partition-state watch, and their own compare-and-set fails until they re-read.

Threading: the controller runs its decisions on one thread of its own (Kafka's
controller event thread), fed by store watches and session events, so no two
decisions interleave. ``start()``/``stop()`` are synchronous; call them from an
executor when on the event loop.

Size: the controller's event handlers (broker changes, topic creation and
deletion, elections, ISR, reassignment, controlled shutdown, preferred-leader
rebalance) run on one thread over one fenced view of the cluster; each is a
method, the shared state is the point.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar

from headwater.cluster.replica_placement import (
    RackAwareMode,
    assign_replicas,
    new_partitions_start_index,
    placement_racks,
)
from headwater.cluster.store import (
    NO_LEADER,
    BrokerRegistration,
    ClusterStore,
    ClusterStoreError,
    ClusterStoreUnavailableError,
    ControllerFence,
    ControllerMovedError,
    PartitionState,
    PartitionStateWrite,
    SessionEvent,
    TopicAssignment,
    WatchHandle,
)
from headwater.log.errors import InvalidPartitionsError, KafkaApiError

log = logging.getLogger(__name__)

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"

TopicPartition = tuple[str, int]


class InvalidReplicaAssignmentError(KafkaApiError):
    kafka_error_code: ClassVar[int] = 39


# --- pure decisions --------------------------------------------------------------


def initial_leader_and_isr(replicas: Sequence[int], live: set[int]) -> tuple[int, tuple[int, ...]]:
    """A new partition: first live replica leads, ISR = live replicas.

    With no live replica the partition starts leaderless with every replica in
    the ISR (it holds no data yet, so whichever comes first may lead cleanly).
    """
    alive = tuple(r for r in replicas if r in live)
    if not alive:
        return NO_LEADER, tuple(replicas)
    return alive[0], alive


def elect_leader(
    replicas: Sequence[int], isr: Sequence[int], live: set[int], unclean: bool
) -> tuple[int, tuple[int, ...]] | None:
    """Kafka's offline-partition election: the first live ISR member in assignment order.

    Returns (leader, new ISR), or None when no replica may lead. Unclean: any
    live replica, ISR just itself (records it lacks are lost; hence off by default).
    """
    for replica in replicas:
        if replica in live and replica in isr:
            return replica, tuple(r for r in isr if r in live)
    if unclean:
        for replica in replicas:
            if replica in live:
                return replica, (replica,)
    return None


def next_state(
    replicas: Sequence[int], state: PartitionState, live: set[int], unclean: bool
) -> PartitionState | None:
    """What a partition's state must become given the live brokers; None if it is fine.

    - leader dead (or none): elect from the live ISR, leader epoch + 1; if nobody
      may lead, the partition is leaderless (epoch + 1) and keeps its last ISR
      member (as Kafka does) so that broker can lead cleanly when it returns;
    - leader alive, some ISR members dead: they leave the ISR, epoch unchanged.
    """
    if state.leader not in live:
        elected = elect_leader(replicas, state.isr, live, unclean)
        if elected is not None:
            leader, isr = elected
            return PartitionState(leader, state.leader_epoch + 1, isr, state.controller_epoch)
        if state.leader == NO_LEADER:
            return None
        survivors = tuple(r for r in state.isr if r in live) or state.isr[-1:]
        return PartitionState(NO_LEADER, state.leader_epoch + 1, survivors, state.controller_epoch)
    isr = tuple(r for r in state.isr if r in live)
    if isr != state.isr:
        return PartitionState(state.leader, state.leader_epoch, isr, state.controller_epoch)
    return None


PREFERRED = 0
UNCLEAN = 1
ELECTION_NOT_NEEDED = 84
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83


def requested_election(
    election_type: int, replicas: Sequence[int], state: PartitionState, live: set[int]
) -> PartitionState | int:
    """ElectLeaders (KIP-460) for one partition: its new state, or the error code.

    PREFERRED: the first assigned replica leads if it is live and in the ISR
    (ELECTION_NOT_NEEDED when it already does, else PREFERRED_LEADER_NOT_AVAILABLE).
    UNCLEAN: only for a partition without a live leader; a live ISR member if
    there is one, else any live replica (whatever it lacks is lost), else
    ELIGIBLE_LEADERS_NOT_AVAILABLE.
    """
    if election_type == PREFERRED:
        preferred = replicas[0] if replicas else NO_LEADER
        if state.leader == preferred:
            return ELECTION_NOT_NEEDED
        if preferred not in live or preferred not in state.isr:
            return PREFERRED_LEADER_NOT_AVAILABLE
        return PartitionState(preferred, state.leader_epoch + 1, state.isr, state.controller_epoch)
    if state.leader != NO_LEADER and state.leader in live:
        return ELECTION_NOT_NEEDED
    elected = elect_leader(replicas, state.isr, live, unclean=True)
    if elected is None:
        return ELIGIBLE_LEADERS_NOT_AVAILABLE
    leader, isr = elected
    return PartitionState(leader, state.leader_epoch + 1, isr, state.controller_epoch)


NO_REASSIGNMENT_IN_PROGRESS = 85
INVALID_REPLICA_ASSIGNMENT = 39
UNKNOWN_TOPIC_OR_PARTITION = 3
REASSIGNMENT_CHECK_S = 0.2
SETTLE_S = 30.0


def reassignment_plan(
    current: Sequence[int], adding: Sequence[int], target: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """KIP-455: (replicas, adding, removing) while moving to ``target``.

    The original replicas are the current ones without those still being added
    (a new target replaces a move in flight); the partition is replicated on the
    target followed by the originals leaving, until the target is in sync.
    """
    original = [r for r in current if r not in adding]
    replicas = list(target) + [r for r in original if r not in target]
    return (
        replicas,
        [r for r in target if r not in original],
        [r for r in original if r not in target],
    )


def reassignment_done(
    target: Sequence[int], state: PartitionState, live: set[int]
) -> PartitionState | None:
    """Once every target replica is in the ISR: the state that completes the move
    (leader from the target, ISR without the leaving replicas), else None (wait)."""
    if not all(r in state.isr for r in target):
        return None
    isr = tuple(r for r in state.isr if r in target)
    if state.leader in target and state.leader in live:
        return PartitionState(state.leader, state.leader_epoch, isr, state.controller_epoch)
    leader = next((r for r in target if r in live), None)
    if leader is None:
        return None
    return PartitionState(leader, state.leader_epoch + 1, isr, state.controller_epoch)


def preferred_leader_moves(
    assignments: Mapping[str, TopicAssignment],
    states: Mapping[TopicPartition, PartitionState],
    live: set[int],
    imbalance_percentage: int,
) -> dict[TopicPartition, PartitionState]:
    """Partitions to hand back to their preferred (first) replica.

    Like Kafka's ``checkAndTriggerAutoLeaderRebalance``: per preferred broker, if
    the share of its partitions it does not lead exceeds the percentage, move
    those whose preferred replica is live and in the ISR (leader epoch + 1).
    """
    by_preferred: dict[int, list[TopicPartition]] = {}
    for name, assignment in assignments.items():
        for partition, replicas in assignment.replicas.items():
            if replicas:
                by_preferred.setdefault(replicas[0], []).append((name, partition))
    moves: dict[TopicPartition, PartitionState] = {}
    for broker, partitions in by_preferred.items():
        if broker not in live:
            continue
        not_led = [tp for tp in partitions if tp in states and states[tp].leader != broker]
        if not partitions or len(not_led) * 100 <= imbalance_percentage * len(partitions):
            continue
        for tp in not_led:
            state = states[tp]
            if broker in state.isr:
                moves[tp] = PartitionState(
                    broker, state.leader_epoch + 1, state.isr, state.controller_epoch
                )
    return moves


def create_topic(
    store: ClusterStore,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
    *,
    replica_assignment: Mapping[int, Sequence[int]] | None = None,
    topic_id: uuid.UUID | None = None,
    rng: random.Random | None = None,
    rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED,
) -> TopicAssignment:
    """Create a topic from any broker (Kafka's ``AdminZkClient.createTopic``).

    Places replicas over the registered brokers and their racks (or checks
    ``replica_assignment``, where racks are the caller's business, as in Kafka)
    and writes the topic; the controller then creates the partition states.
    ENFORCED is CreateTopics' mode (mixed racks refused with ``AdminUtils``' own
    message), SAFE auto-creation's. Raises InvalidReplicationFactorError,
    InvalidPartitionsError, InvalidReplicaAssignmentError, AdminOperationError,
    TopicExistsError, InvalidTopicError, ClusterStoreUnavailableError.
    """
    registered = store.brokers()
    brokers = set(registered)
    if replica_assignment is not None:
        replicas = {int(p): [int(b) for b in r] for p, r in replica_assignment.items()}
        sizes = {len(r) for r in replicas.values()}
        if len(sizes) > 1:
            raise InvalidReplicaAssignmentError(
                f"all partitions of {name!r} need the same number of replicas"
            )
        unknown = sorted({b for r in replicas.values() for b in r} - brokers)
        if unknown:
            raise InvalidReplicaAssignmentError(f"unknown broker(s) {unknown} in the assignment")
        if sorted(replicas) != list(range(len(replicas))):
            raise InvalidReplicaAssignmentError(f"partitions of {name!r} must be 0..n-1")
    else:
        racks = {b: r.rack for b, r in registered.items()}
        if rack_aware_mode is not RackAwareMode.ENFORCED:
            racks = placement_racks(racks, rack_aware_mode)
        replicas = assign_replicas(racks, num_partitions, replication_factor, rng=rng)
    return store.create_topic(name, topic_id or uuid.uuid4(), replicas, dict(configs or {}))


def add_partitions(
    store: ClusterStore,
    name: str,
    total_partitions: int,
    *,
    replica_assignment: Mapping[int, Sequence[int]] | None = None,
    rng: random.Random | None = None,
    rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED,
) -> TopicAssignment:
    """Grow a topic to ``total_partitions`` (Kafka's ``AdminZkClient.addPartitions``).

    New partitions get the topic's replication factor, placed as at creation and
    continuing the round robin where partition 0's leader sits among the brokers
    (``replica_assignment`` may give them instead, keyed by the new partition ids;
    racks are then not looked at, so a rack-unaware plan made by the caller
    passes a mixed-rack cluster). Raises InvalidPartitionsError when the count
    does not grow, UnknownTopicError, AdminOperationError (mixed racks under
    ENFORCED, with ``getBrokerMetadatas``' message), and the errors of
    ``assign_replicas`` and ``ClusterStore.add_partitions``.
    """
    from headwater.cluster.store import UnknownTopicError

    topic = store.topic(name)
    if topic is None:
        raise UnknownTopicError(f"topic {name!r} does not exist")
    current = len(topic.replicas)
    if total_partitions <= current:
        raise InvalidPartitionsError(
            f"topic {name!r} has {current} partitions; the new count must be larger, "
            f"got {total_partitions}"
        )
    registered = store.brokers()
    if replica_assignment is not None:
        new = {int(p): [int(b) for b in r] for p, r in replica_assignment.items()}
        unknown = sorted({b for r in new.values() for b in r} - set(registered))
        if unknown:
            raise InvalidReplicaAssignmentError(f"unknown broker(s) {unknown} in the assignment")
    else:
        racks = placement_racks({b: r.rack for b, r in registered.items()}, rack_aware_mode)
        start = new_partitions_start_index(racks, topic.replicas[0][0])
        new = assign_replicas(
            racks, total_partitions - current, len(topic.replicas[0]),
            start_index=start, start_partition=current, rng=rng,
        )  # fmt: skip
    return store.add_partitions(name, new)


# --- the controller -----------------------------------------------------------------


class Controller:
    """Runs for election and, while elected, keeps partition leadership right.

    Construct with the broker's store (started, the broker registered), call
    ``start()``; ``stop()`` resigns (if elected) and ends the thread.
    """

    def __init__(
        self,
        store: ClusterStore,
        broker_id: int,
        *,
        unclean_leader_election_enable: bool = False,
        auto_leader_rebalance_enable: bool = True,
        leader_imbalance_check_interval_s: float = 300.0,
        leader_imbalance_per_broker_percentage: int = 10,
        retry_backoff_s: float = 0.5,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.unclean_leader_election_enable = unclean_leader_election_enable
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.leader_imbalance_check_interval_s = leader_imbalance_check_interval_s
        self.leader_imbalance_per_broker_percentage = leader_imbalance_per_broker_percentage
        self.retry_backoff_s = retry_backoff_s
        self._events: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._fence: ControllerFence | None = None
        self._controller_watch: WatchHandle | None = None
        self._active_watches: list[WatchHandle] = []
        self._topic_watches: dict[str, WatchHandle] = {}
        self._timers: set[threading.Timer] = set()
        self._timers_lock = threading.Lock()
        # The controller's picture of the cluster (Kafka's ControllerContext).
        self._live: set[int] = set()
        self._epochs: dict[int, int] = {}
        self._topics: dict[str, TopicAssignment] = {}
        self._states: dict[TopicPartition, PartitionState] = {}
        #: Live brokers in controlled shutdown: they lead nothing and leave every ISR.
        self._shutting_down: set[int] = set()
        self._shutdown_requests: frozenset[int] = frozenset()
        #: Moves completed lately -> until when their ISR is kept within the new replicas
        #: (a leaving replica may be put back in the ISR by its leader meanwhile).
        self._settling: dict[TopicPartition, float] = {}
        self.activations = 0
        """How many times this broker became controller (for tests and metrics)."""

    # -- public ----------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._fence is not None

    @property
    def epoch(self) -> int | None:
        fence = self._fence
        return fence.epoch if fence is not None else None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"hw-controller-{self.broker_id}", daemon=True
        )
        self._thread.start()
        self.store.add_session_listener(self._on_session)
        self._controller_watch = self.store.watch_controller(self._on_controller_znode)
        self._enqueue(self._elect)

    def stop(self, timeout: float = 10.0) -> None:
        """Resign if elected (so another broker takes over at once) and stop."""
        if self._thread is None:
            return
        self._enqueue(self._shutdown)
        self._events.put(None)
        self._thread.join(timeout)
        self._thread = None

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event is handled (tests); False on timeout."""
        with self._events.all_tasks_done:
            return self._events.all_tasks_done.wait_for(
                lambda: self._events.unfinished_tasks == 0, timeout
            )

    def trigger_preferred_leader_election(self) -> None:
        """Run the preferred-leader check now (tests, admin)."""
        self._enqueue(self._rebalance)

    # -- event plumbing ------------------------------------------------------------------

    def _enqueue(self, event: Callable[[], None]) -> None:
        if not self._stopping:
            self._events.put(event)

    def _later(self, delay: float, event: Callable[[], None]) -> None:
        def fire() -> None:
            with self._timers_lock:
                self._timers.discard(timer)
            self._enqueue(event)

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        with self._timers_lock:
            self._timers.add(timer)
        timer.start()

    def _run(self) -> None:
        while True:
            event = self._events.get()
            try:
                if event is None:
                    return
                if self._stopping and event != self._shutdown:
                    continue
                event()
            except ControllerMovedError:
                log.warning("controller %d was fenced; resigning", self.broker_id)
                self._deactivate()
                self._enqueue(self._elect)
            except ClusterStoreUnavailableError as exc:
                log.warning(
                    "controller %d: ZooKeeper unavailable (%s); retrying", self.broker_id, exc
                )
                if self.is_active:
                    self._later(self.retry_backoff_s, self._resync)
                else:
                    self._later(self.retry_backoff_s, self._elect)
            except Exception:
                log.exception("controller %d: event failed", self.broker_id)
                if self.is_active:
                    self._later(self.retry_backoff_s, self._resync)
            finally:
                self._events.task_done()

    # Called on store threads: only enqueue.
    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.LOST:
            # Our /controller znode is gone with the session: stop acting now.
            self._enqueue(self._deactivate)
        elif event in (SessionEvent.RESTORED, SessionEvent.RECONNECTED):
            self._enqueue(self._elect)

    def _on_controller_znode(self, controller_id: int | None) -> None:
        if controller_id is None:
            self._enqueue(self._elect)
        elif controller_id != self.broker_id:
            self._enqueue(self._check_still_controller)

    # -- events (controller thread) ---------------------------------------------------------

    def _shutdown(self) -> None:
        fence = self._fence
        self._deactivate()
        self._stopping = True
        with self._timers_lock:
            for timer in self._timers:
                timer.cancel()
            self._timers.clear()
        if self._controller_watch is not None:
            self._controller_watch.cancel()
        if fence is not None:
            try:
                self.store.resign_controller(fence)
            except ClusterStoreError:
                log.debug("resigning failed; the session end will do it", exc_info=True)

    def _check_still_controller(self) -> None:
        if self.is_active and self.store.controller_id() != self.broker_id:
            log.warning("broker %d is no longer controller", self.broker_id)
            self._deactivate()

    def _elect(self) -> None:
        if self.is_active:
            if self.store.controller_id() == self.broker_id:
                return
            self._deactivate()
        fence = self.store.try_become_controller(self.broker_id)
        if fence is None:
            return
        log.info("broker %d is controller (epoch %d)", self.broker_id, fence.epoch)
        self._fence = fence
        self.activations += 1
        self._active_watches = [
            self.store.watch_brokers(lambda b: self._enqueue(lambda: self._brokers_changed(b))),
            self.store.watch_topics(lambda t: self._enqueue(lambda: self._topics_changed(t))),
            self.store.watch_deletion_requests(
                lambda t: self._enqueue(lambda: self._deletions_requested(t))
            ),
            self.store.watch_controlled_shutdowns(
                lambda ids: self._enqueue(lambda: self._controlled_shutdowns(ids))
            ),
            self.store.watch_leader_elections(
                lambda names: self._enqueue(lambda: self._leader_elections(names))
            ),
            self.store.watch_log_dir_events(
                lambda names: self._enqueue(lambda: self._log_dir_events(names))
            ),
            self.store.watch_reassignment_requests(
                lambda names: self._enqueue(lambda: self._reassignment_requests(names))
            ),
        ]
        self._resync()
        self._later(REASSIGNMENT_CHECK_S, self._check_reassignments)
        if self.auto_leader_rebalance_enable:
            self._later(self.leader_imbalance_check_interval_s, self._periodic_rebalance)

    def _deactivate(self) -> None:
        if self._fence is None:
            return
        for handle in [*self._active_watches, *self._topic_watches.values()]:
            handle.cancel()
        self._active_watches = []
        self._topic_watches = {}
        self._fence = None
        self._live = set()
        self._shutting_down = set()
        self._shutdown_requests = frozenset()
        self._epochs = {}
        self._topics = {}
        self._states = {}
        self.store.release_writer()

    def _resync(self) -> None:
        """Load everything from ZooKeeper and bring every partition to a valid state."""
        if self._fence is None:
            return
        brokers = self.store.brokers()
        self._live = set(brokers)
        self._epochs = {b: r.epoch for b, r in brokers.items()}
        self._topics = self.store.topic_assignments(self.store.topics())
        keys = [(t.name, p) for t in self._topics.values() for p in t.replicas]
        self._states = self.store.partition_states(keys)
        self._deletions_requested(frozenset(self.store.deletion_requests()))
        self._create_missing_states(self._topics.values())
        self._watch_topics()
        self._reconcile(list(self._states))

    def _brokers_changed(self, brokers: Mapping[int, BrokerRegistration]) -> None:
        if self._fence is None:
            return
        epochs = {b: r.epoch for b, r in brokers.items()}
        # A broker that re-registered (restart, session expiry) between two reads is
        # handled as Kafka does a bounce: a failure, then a start-up. Its leaderships
        # move, so it never goes on leading on a stale epoch.
        bounced = {b for b, e in epochs.items() if b in self._epochs and self._epochs[b] != e}
        log.info("controller %d: live brokers %s -> %s%s", self.broker_id, sorted(self._live),
                 sorted(epochs), f" (bounced {sorted(bounced)})" if bounced else "")  # fmt: skip
        gone = (self._live - set(epochs)) | bounced
        if gone:
            self._refresh_partitions_on(gone)
        self._epochs = epochs
        self._shutting_down = set(self._shutdown_requests) & (set(epochs) - bounced)
        if bounced:
            self._live = set(epochs) - bounced
            self._reconcile(list(self._states))
        self._live = set(epochs)
        self._reconcile(list(self._states))

    def _controlled_shutdowns(self, ids: frozenset[int]) -> None:
        """Brokers asking to stop (Kafka's ControlledShutdown): move their leaderships
        to other ISR members and take them out of every ISR, now.

        A partition no other live ISR member can lead stays with the stopping
        broker (it would go offline otherwise); the broker sees it in its own
        view and, after its retries, stops anyway, saying why.
        """
        if self._fence is None:
            return
        self._shutdown_requests = ids
        new = (set(ids) & self._live) - self._shutting_down
        self._shutting_down = set(ids) & self._live
        if not new:
            return
        log.info("controller %d: controlled shutdown of broker(s) %s",
                 self.broker_id, sorted(new))  # fmt: skip
        self._reconcile(self._refresh_partitions_on(new))

    def _replicas_of(self, key: TopicPartition) -> list[int]:
        topic = self._topics.get(key[0])
        return topic.replicas.get(key[1], []) if topic is not None else []

    def _refresh_partitions_on(self, brokers: set[int]) -> list[TopicPartition]:
        """The partitions ``brokers`` hold replicas of (Kafka's partitionsOnBroker),
        with the cached states the cache cannot be trusted to decide on read afresh.

        Leaders change ISRs in ZooKeeper without telling the controller. A cached
        state that shows one of ``brokers`` leading or in the ISR is decided from
        the cache: the write is a compare-and-set on the cached version, so a stale
        one loses and is read again and decided again (``_write``). Only a cached
        state that shows none of them needs a read, for ZooKeeper may have one of
        them back in the ISR (a follower taken back in after a pause), where
        nothing would be decided and it would stay in the ISR (a dead follower
        stalled acks=all for replica.lag.time.max.ms). Normally none, so a broker
        failure at 50,000 partitions reads nothing before it elects; reading all
        of them first took seconds.
        """
        keys: list[TopicPartition] = []
        unseen: list[TopicPartition] = []
        for key, state in self._states.items():
            if brokers.isdisjoint(self._replicas_of(key)):
                continue
            keys.append(key)
            if state.leader not in brokers and brokers.isdisjoint(state.isr):
                unseen.append(key)
        if unseen:
            self._states.update(self.store.partition_states(unseen))
        return keys

    def _log_dir_events(self, names: frozenset[str]) -> None:
        """Log directory failure notifications (KIP-112, Kafka's onBrokerLogDirFailure):
        each names a broker and the replicas it holds offline (a failed directory) or
        corrupt (the scrubber). Their leadership moves to another live in-sync replica
        and the broker leaves their ISR, as a controlled shutdown does for those
        partitions alone; then the notification is deleted. Kafka's controller learned
        the offline replicas from the LeaderAndIsr responses it sent after the event;
        here the broker lists them in the notification (zk_layout.encode_log_dir_event).
        A partition no other live ISR member can lead keeps its leader (it would go
        offline otherwise; an offline replica answers KAFKA_STORAGE_ERROR meanwhile).
        The broker stops fetching for an offline replica, so it never rejoins an ISR;
        a corrupt one truncates, re-fetches and rejoins as any follower catching up."""
        if self._fence is None:
            return
        for name in sorted(names):
            event = self.store.log_dir_event(name)
            if event is None:
                continue
            broker, partitions, reason = event
            keys = [k for k in partitions if k in self._states]
            self._states.update(self.store.partition_states(keys))
            staying = self._live - self._shutting_down - {broker}
            changes: dict[TopicPartition, PartitionState] = {}
            for key in keys:
                topic = self._topics.get(key[0])
                state = self._states.get(key)
                if topic is None or state is None:
                    continue
                if state.leader != broker and broker not in state.isr:
                    continue
                new = next_state(topic.replicas.get(key[1], []), state, staying, unclean=False)
                if new is not None and new.leader != NO_LEADER:
                    changes[key] = new
            log.info("controller %d: broker %d reports %d replica(s) %s; moving %d",
                     self.broker_id, broker, len(partitions), reason,
                     len(changes))  # fmt: skip
            if changes:
                self._write(changes)
            self.store.delete_log_dir_event(name)

    def _leader_elections(self, names: frozenset[str]) -> None:
        """ElectLeaders requests (through ZooKeeper): decide each, write the new states,
        and answer in the request's znode (the requesting broker reads and deletes it)."""
        if self._fence is None:
            return
        for name in sorted(names):
            request = self.store.leader_election_request(name)
            if request is None or request[2] is not None:
                continue  # gone, or answered already
            election_type, partitions, _ = request
            wanted = list(self._states) if partitions is None else partitions
            known = [k for k in wanted if k in self._states]
            self._states.update(self.store.partition_states(known))
            live = self._live - self._shutting_down
            results: dict[TopicPartition, int] = {}
            changes: dict[TopicPartition, PartitionState] = {}
            for key in wanted:
                topic = self._topics.get(key[0])
                state = self._states.get(key)
                if topic is None or state is None or key[1] not in topic.replicas:
                    results[key] = 3  # UNKNOWN_TOPIC_OR_PARTITION
                    continue
                decided = requested_election(election_type, topic.replicas[key[1]], state, live)
                if isinstance(decided, int):
                    results[key] = decided
                else:
                    changes[key] = decided
            if changes:
                kind = "unclean" if election_type == UNCLEAN else "preferred"
                log.info("controller %d: %s leader election for %d partition(s)",
                         self.broker_id, kind, len(changes))  # fmt: skip
                self._write(changes, attempts=1)
                for key, state in changes.items():
                    # A lost compare-and-set (a leader changed the ISR meanwhile) is retried
                    # by the caller; the partition's state is re-read already.
                    won = (
                        self._states.get(key) is not None
                        and self._states[key].leader == state.leader
                    )
                    results[key] = 0 if won else 7  # REQUEST_TIMED_OUT: try again
            self.store.answer_leader_election(name, election_type, partitions, results)

    # -- partition reassignment (KIP-455) -----------------------------------------------

    def _reassignment_requests(self, names: frozenset[str]) -> None:
        """AlterPartitionReassignments requests: start, replace or cancel each move, and
        answer in the request's znode. Moves then progress in ``_check_reassignments``."""
        if self._fence is None:
            return
        for name in sorted(names):
            request = self.store.reassignment_request(name)
            if request is None or request[1] is not None:
                continue
            targets = request[0]
            results = {key: self._reassign(key, target) for key, target in targets.items()}
            self.store.answer_reassignments(name, targets, results)

    def _reassign(self, key: TopicPartition, target: list[int] | None) -> tuple[int, str | None]:
        fence = self._fence
        assert fence is not None
        topic = self.store.topic(key[0])
        if topic is None or key[1] not in topic.replicas:
            return UNKNOWN_TOPIC_OR_PARTITION, f"{key[0]}-{key[1]} does not exist"
        self._topics[key[0]] = topic
        current = topic.replicas[key[1]]
        adding = topic.adding.get(key[1], [])
        in_flight = bool(adding or topic.removing.get(key[1]))
        if target is None:
            if not in_flight:
                return NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {key[0]}-{key[1]}"
            original = [r for r in current if r not in adding]
            self._finish_move(key, original, cancelled=True)
            log.info("controller %d: reassignment of %s-%d cancelled; back on %s",
                     self.broker_id, key[0], key[1], original)  # fmt: skip
            return 0, None
        if not target or len(set(target)) != len(target) or any(r < 0 for r in target):
            return INVALID_REPLICA_ASSIGNMENT, f"bad replica list {target}"
        replicas, new_adding, removing = reassignment_plan(current, adding, target)
        if not new_adding and not removing and replicas == current:
            return 0, None  # already there
        if not self.store.write_reassignments(
            fence, key[0], {key[1]: (replicas, new_adding, removing)}
        ):
            return 7, "the topic changed meanwhile; retry"  # REQUEST_TIMED_OUT
        refreshed = self.store.topic(key[0])
        if refreshed is not None:
            self._topics[key[0]] = refreshed
        log.info("controller %d: reassigning %s-%d from %s to %s (adding %s, removing %s)",
                 self.broker_id, key[0], key[1], current, target, new_adding, removing)  # fmt: skip
        return 0, None

    def _check_reassignments(self) -> None:
        """Complete every move whose target replicas are all in the ISR (periodic while
        the controller is active; a new controller resumes moves it finds in ZooKeeper)."""
        if self._fence is None:
            return
        try:
            moving = [
                (name, partition)
                for name, topic in self._topics.items()
                for partition in {*topic.adding, *topic.removing}
                if topic.adding.get(partition) or topic.removing.get(partition)
            ]
            if moving:
                self._states.update(self.store.partition_states(moving))
                for key in moving:
                    topic = self._topics[key[0]]
                    self._finish_move(key, topic.target(key[1]), cancelled=False)
            self._settle_moved()
        finally:
            if self._fence is not None:
                self._later(REASSIGNMENT_CHECK_S, self._check_reassignments)

    def _finish_move(self, key: TopicPartition, target: list[int], *, cancelled: bool) -> None:
        """Leadership and ISR onto ``target``, then the assignment itself (removed
        replicas then stop and delete their copies). A cancel does not wait for the
        target (the original replicas) to be in sync: they never left."""
        fence = self._fence
        assert fence is not None
        state = self._states.get(key)
        if state is None:
            return
        live = self._live - self._shutting_down
        if cancelled:
            isr = tuple(r for r in state.isr if r in target) or state.isr
            if state.leader in target:
                done: PartitionState | None = PartitionState(
                    state.leader, state.leader_epoch, isr, state.controller_epoch
                )
            else:
                leader = next((r for r in target if r in isr and r in live), NO_LEADER)
                done = PartitionState(leader, state.leader_epoch + 1, isr, state.controller_epoch)
        else:
            done = reassignment_done(target, state, live)
        if done is None:
            return
        if done != PartitionState(state.leader, state.leader_epoch, state.isr,
                                  state.controller_epoch):  # fmt: skip
            self._write({key: done}, attempts=1)
            written = self._states.get(key)
            if written is None or (written.leader, written.isr) != (done.leader, done.isr):
                return  # lost a race with the leader's ISR change: next check
        if self.store.write_reassignments(fence, key[0], {key[1]: (list(target), [], [])}):
            self._settling[key] = time.monotonic() + SETTLE_S
            refreshed = self.store.topic(key[0])
            if refreshed is not None:
                self._topics[key[0]] = refreshed
            if not cancelled:
                log.info("controller %d: reassignment of %s-%d to %s completed",
                         self.broker_id, key[0], key[1], target)  # fmt: skip

    def _settle_moved(self) -> None:
        """Take replicas that left a partition out of its ISR again if its leader put
        them back between the state and the assignment writes of the move."""
        now = time.monotonic()
        for key, until in list(self._settling.items()):
            topic = self._topics.get(key[0])
            if topic is None or until < now:
                del self._settling[key]
                continue
            state = self.store.partition_state(*key)
            if state is None:
                continue
            self._states[key] = state
            replicas = topic.replicas.get(key[1], [])
            isr = tuple(r for r in state.isr if r in replicas)
            if isr and isr != state.isr:
                self._write(
                    {key: PartitionState(state.leader, state.leader_epoch, isr,
                                         state.controller_epoch)}, attempts=1,
                )  # fmt: skip

    def _topics_changed(self, names: frozenset[str]) -> None:
        if self._fence is None:
            return
        for gone in set(self._topics) - names:
            del self._topics[gone]
            if gone in self._topic_watches:
                self._topic_watches.pop(gone).cancel()
            for key in [k for k in self._states if k[0] == gone]:
                del self._states[key]
        added = list(self.store.topic_assignments(sorted(names - set(self._topics))).values())
        self._topics.update((t.name, t) for t in added)
        if added:
            # Usually brand new (no partition znodes yet): then nothing to read.
            keys = [
                (t.name, p) for t in added for p in self.store.partitions_with_state_znodes(t.name)
            ]
            self._states.update(self.store.partition_states(keys))
            self._create_missing_states(added)
        self._watch_topics()

    def _watch_topics(self) -> None:
        """One watch per topic znode, for partitions added to it (Kafka's
        PartitionModifications handler)."""
        for gone in set(self._topic_watches) - set(self._topics):
            self._topic_watches.pop(gone).cancel()
        for name in set(self._topics) - set(self._topic_watches):
            self._topic_watches[name] = self.store.watch_topic(
                name,
                lambda t, name=name: self._enqueue(  # type: ignore[misc]
                    lambda: self._topic_modified(name, t)
                ),
            )

    def _topic_modified(self, name: str, topic: TopicAssignment | None) -> None:
        if self._fence is None or topic is None or name not in self._topics:
            return  # removals arrive through the topic list
        if self._topics[name].topic_id != topic.topic_id:
            return  # recreated under the same name: the topic list handles it
        self._topics[name] = topic
        if any((name, p) not in self._states for p in topic.replicas):
            self._create_missing_states([topic])

    def _deletions_requested(self, names: frozenset[str]) -> None:
        fence = self._fence
        if fence is None:
            return
        for name in sorted(names):
            log.info("controller %d: deleting topic %s", self.broker_id, name)
            self.store.delete_topic_znodes(fence, name)
            self._topics.pop(name, None)
            for key in [k for k in self._states if k[0] == name]:
                del self._states[key]

    def _periodic_rebalance(self) -> None:
        if self._fence is None:
            return
        try:
            self._rebalance()
        finally:
            if self._fence is not None:
                self._later(self.leader_imbalance_check_interval_s, self._periodic_rebalance)

    def _rebalance(self) -> None:
        if self._fence is None:
            return
        # Leaders change ISRs without telling the controller: decide on fresh states.
        self._states = self.store.partition_states(list(self._states))
        moves = preferred_leader_moves(
            self._topics,
            self._states,
            self._live - self._shutting_down,
            self.leader_imbalance_per_broker_percentage,
        )
        if moves:
            log.info("controller %d: preferred leader election for %d partition(s)",
                     self.broker_id, len(moves))  # fmt: skip
            self._write(moves)

    # -- writing ------------------------------------------------------------------------------

    def _unclean(self, topic: str) -> bool:
        """The topic's ``unclean.leader.election.enable``, read fresh from ZooKeeper
        (only asked when no clean leader exists, so rarely), else the broker's."""
        assignment = self.store.topic(topic)
        value = assignment.configs.get(UNCLEAN_LEADER_ELECTION) if assignment else None
        if value is None:
            return self.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def _decide(self, key: TopicPartition) -> PartitionState | None:
        topic = self._topics.get(key[0])
        state = self._states.get(key)
        if topic is None or state is None:
            return None
        replicas = topic.replicas.get(key[1], [])
        if self._shutting_down:
            # Brokers in controlled shutdown count as gone, unless only they can lead.
            staying = self._live - self._shutting_down
            new = next_state(replicas, state, staying, unclean=False)
            if new is not None and new.leader != NO_LEADER:
                return new
            if new is None and state.leader != NO_LEADER:
                return None
        new = next_state(replicas, state, self._live, unclean=False)
        leaderless = new.leader if new is not None else state.leader
        may_lead = any(r in self._live for r in replicas)
        if leaderless == NO_LEADER and may_lead and self._unclean(key[0]):
            new = next_state(replicas, state, self._live, unclean=True)
        return new

    def _create_missing_states(self, topics: Iterable[TopicAssignment]) -> None:
        fence = self._fence
        assert fence is not None
        writes = []
        for topic in topics:
            for partition, replicas in sorted(topic.replicas.items()):
                if (topic.name, partition) in self._states:
                    continue
                leader, isr = initial_leader_and_isr(replicas, self._live)
                state = PartitionState(leader, 0, isr, fence.epoch)
                writes.append(PartitionStateWrite(topic.name, partition, state, None))
        if not writes:
            return
        results = self.store.write_partition_states(fence, writes)
        for write in writes:
            key = (write.topic, write.partition)
            version = results.get(key)
            if version is None:  # created concurrently (a previous controller): read it
                current = self.store.partition_state(*key)
                if current is not None:
                    self._states[key] = current
            else:
                s = write.state
                self._states[key] = PartitionState(
                    s.leader, s.leader_epoch, s.isr, fence.epoch, version
                )

    def _reconcile(self, keys: Iterable[TopicPartition]) -> None:
        """Decide ``keys`` and write the changes, new leaders first.

        ZooKeeper applies a session's requests in order and the brokers learn them
        in that order, so partitions that lost their leader (no writes until they
        get one) are not queued behind the ISR-only changes of the same event: a
        broker failure at RF 3 changes every partition, a third of them leaders.
        """
        started = time.monotonic()
        leader_changes: dict[TopicPartition, PartitionState] = {}
        isr_changes: dict[TopicPartition, PartitionState] = {}
        for key in keys:
            new = self._decide(key)
            if new is not None:
                if new.leader != self._states[key].leader:
                    leader_changes[key] = new
                else:
                    isr_changes[key] = new
        if leader_changes or isr_changes:
            decided = time.monotonic()
            self._write({**leader_changes, **isr_changes})
            # The controller's part of a failover, for whoever reads it as a timeline.
            log.info("controller %d: %d new leader(s), %d ISR change(s): decided in %.3f s, "
                     "written in %.3f s", self.broker_id, len(leader_changes), len(isr_changes),
                     decided - started, time.monotonic() - decided)  # fmt: skip

    def _write(self, changes: Mapping[TopicPartition, PartitionState], attempts: int = 5) -> None:
        """Compare-and-set each change against the cached version; on a lost race
        (a leader changed its ISR meanwhile) re-read and decide again."""
        fence = self._fence
        assert fence is not None
        writes = [
            PartitionStateWrite(t, p, state, self._states[(t, p)].zk_version)
            for (t, p), state in changes.items()
        ]
        results = self.store.write_partition_states(fence, writes)
        lost: list[TopicPartition] = []
        for write in writes:
            key = (write.topic, write.partition)
            version = results.get(key)
            if version is None:
                lost.append(key)
            else:
                s = write.state
                self._states[key] = PartitionState(
                    s.leader, s.leader_epoch, s.isr, fence.epoch, version
                )
        if not lost:
            return
        fresh = self.store.partition_states(lost)
        for key in lost:
            if key in fresh:
                self._states[key] = fresh[key]
            else:
                self._states.pop(key, None)
        if attempts > 1:
            again = {}
            for key in lost:
                new = self._decide(key)
                if new is not None:
                    again[key] = new
            if again:
                self._write(again, attempts - 1)
        else:
            self._later(self.retry_backoff_s, self._resync)
