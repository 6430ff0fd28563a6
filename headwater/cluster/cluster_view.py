"""The broker's picture of the cluster, kept current by ZooKeeper watches.

A ``ClusterView`` holds a snapshot (live brokers, controller, topics with their
assignments and configs, every partition's leader/epoch/ISR) that the broker's
request handlers read without any I/O, and tells subscribers what changed.

Threads: the store's watch callbacks run on kazoo's threads; each only puts
the new value in an inbox for the event loop. The snapshot is changed and
subscribers are called on the loop thread only, so handlers read it without
locks. Updates that arrive together are coalesced into one ``ClusterChange``
per loop iteration.

The inbox wakes the loop once per burst, not once per value: a failover
rewrites every partition's state, and one ``call_soon_threadsafe`` per state
(a socket write to wake the loop, a handle, a wake-up) cost the loop and
kazoo's threads a step per partition while thousands of states arrived.

Scale (10,000 partitions): ``start()`` reads everything with pipelined
asynchronous requests (kazoo's ``*_async``: all requests in flight on one
connection, then the answers), not one round trip per znode; partition states
are read by the very requests that set their watches: one data watch per
partition state. That is acceptable because a ZooKeeper watch
is a small server-side table entry per path and session (10,000 of them are
about a megabyte on the server), it costs nothing while the partition does not
change, and it fires only for the partition that changed, so a leader change
costs one notification and one read instead of re-reading every state. The
alternative, a controller-to-broker LeaderAndIsr channel as Kafka has, would
need a second control protocol between brokers. (Measured in
bench/bench_cluster_zk.py: kazoo handles about one request per half
millisecond, so 10,000 states take seconds, not minutes.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from headwater.cluster.store import (
    BrokerRegistration,
    ClusterStore,
    ClusterStoreUnavailableError,
    PartitionState,
    SessionEvent,
    TopicAssignment,
    WatchHandle,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: A topic of up to this many partitions has its partitions' states watched once its
#: children watch lists them; a larger one at once (see ``ClusterView._watch_states_of``).
LISTED_PARTITIONS_MAX = 5_000

#: Most updates applied per turn of the loop before the rest wait for the next turn.
INBOX_SLICE = 1000


@dataclass(frozen=True, slots=True)
class ClusterChange:
    """What changed in one batch of updates (all fields empty/False: nothing)."""

    brokers_changed: bool = False
    topics_added: frozenset[str] = frozenset()
    topics_removed: frozenset[str] = frozenset()
    partitions_changed: frozenset[TopicPartition] = frozenset()
    """Partitions whose state (leader, epoch, ISR) or replica list changed, was
    created, or was removed (then absent from ``partition_states``)."""
    controller_changed: bool = False
    configs_changed: frozenset[str] = frozenset()


@dataclass
class _Pending:
    brokers_changed: bool = False
    controller_changed: bool = False
    topics_added: set[str] = field(default_factory=set)
    topics_removed: set[str] = field(default_factory=set)
    partitions_changed: set[TopicPartition] = field(default_factory=set)
    configs_changed: set[str] = field(default_factory=set)

    def freeze(self) -> ClusterChange:
        return ClusterChange(
            brokers_changed=self.brokers_changed,
            topics_added=frozenset(self.topics_added),
            topics_removed=frozenset(self.topics_removed),
            partitions_changed=frozenset(self.partitions_changed),
            controller_changed=self.controller_changed,
            configs_changed=frozenset(self.configs_changed),
        )


ChangeListener = Callable[[ClusterChange], None]


class ClusterView:
    """Snapshot of the cluster for one broker; see the module docstring.

    ``await view.start()`` on the event loop (it reads in an executor thread),
    ``view.on_change(callback)`` to subscribe, ``view.stop()`` to drop the watches.
    """

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self._brokers: dict[int, BrokerRegistration] = {}
        self._controller_id: int | None = None
        self._in_controlled_shutdown: frozenset[int] = frozenset()
        self._topics: dict[str, TopicAssignment] = {}
        self._states: dict[TopicPartition, PartitionState] = {}
        self._listeners: list[ChangeListener] = []
        self._session_listeners: list[Callable[[SessionEvent], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: _Pending | None = None
        self._stopped = False
        self._global_watches: list[WatchHandle] = []
        self._topic_watches: dict[str, list[WatchHandle]] = {}
        self._partition_watches: dict[TopicPartition, WatchHandle | None] = {}
        #: Per listed topic (see ``_watch_states_of``), its partitions that have a znode
        #: (the controller wrote a state): only those get a state watch.
        self._partition_znodes: dict[str, frozenset[int]] = {}
        self._znode_watches: dict[str, WatchHandle] = {}
        #: Bound once: every partition's watch holds this same object.
        self._on_state_read = self._state_read
        self._initial: set[TopicPartition] = set()
        self._initial_done: asyncio.Event | None = None
        #: Updates from kazoo's threads waiting for the loop, in arrival order.
        self._inbox: deque[tuple[Callable[[Any], None], Any]] = deque()
        self._inbox_lock = threading.Lock()
        #: The loop has been asked (once) to empty the inbox and has not yet.
        self._inbox_woken = False

    # -- the snapshot (read on the loop thread) ------------------------------------------

    @property
    def brokers(self) -> Mapping[int, BrokerRegistration]:
        return MappingProxyType(self._brokers)

    @property
    def controller_id(self) -> int | None:
        return self._controller_id

    @property
    def brokers_in_controlled_shutdown(self) -> frozenset[int]:
        """Brokers asking the controller to move everything off them now: a leader
        must not take them into an ISR (Kafka's KIP-841), or it undoes what the
        controller just did and the broker's shutdown waits for nothing."""
        return self._in_controlled_shutdown

    @property
    def topics(self) -> Mapping[str, TopicAssignment]:
        return MappingProxyType(self._topics)

    @property
    def partition_states(self) -> Mapping[TopicPartition, PartitionState]:
        return MappingProxyType(self._states)

    def leader(self, topic: str, partition: int) -> int | None:
        """The partition's leader id, or None (unknown partition or no leader)."""
        state = self._states.get((topic, partition))
        if state is None or state.leader < 0:
            return None
        return state.leader

    def on_session(self, listener: Callable[[SessionEvent], None]) -> None:
        """Call ``listener(SessionEvent)`` on the loop thread for this broker's ZooKeeper
        session: on LOST a leader must stop acting as one (its registration is gone
        and the controller moves its leaderships); RESTORED means re-registered."""
        self._session_listeners.append(listener)

    def _on_store_session(self, event: SessionEvent) -> None:
        # The store's session thread: hand over to the loop.
        self._post(self._apply_session, event)

    def _apply_session(self, event: SessionEvent) -> None:
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event)

    def on_change(self, listener: ChangeListener) -> Callable[[], None]:
        """Call ``listener(ClusterChange)`` on the loop thread after each batch of
        changes; returns a function that unsubscribes."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, timeout: float = 60.0) -> None:
        """Load the snapshot, then keep it current; returns when it is complete.

        Brokers, controller and topics are read with pipelined requests in an
        executor thread. Partition states are read by arming their watches: each
        watch's first answer is the state, so every state is read once, not once
        for the snapshot and again for the watch. Raises
        ``ClusterStoreUnavailableError`` if ZooKeeper cannot be read in ``timeout``.
        """
        loop = self._loop = asyncio.get_running_loop()
        brokers, controller_id, topics = await loop.run_in_executor(None, self._load)
        self._brokers = brokers
        self._controller_id = controller_id
        self._topics = topics
        keys = [(t.name, p) for t in topics.values() for p in t.replicas]
        self._initial = set(keys)
        self._initial_done = asyncio.Event()
        if not keys:
            self._initial_done.set()
        for key in keys:
            # Placeholders first: a watch's first answer may reach the loop before
            # its handle does, and answers for unknown partitions are dropped.
            self._partition_watches[key] = None
        handles = await loop.run_in_executor(None, self._watch_partitions, keys)
        for key, handle in zip(keys, handles, strict=True):
            if self._partition_watches.get(key, handle) is None:
                self._partition_watches[key] = handle
            else:  # the topic went away meanwhile
                handle.cancel()
        try:
            async with asyncio.timeout(timeout):
                await self._initial_done.wait()
        except TimeoutError:
            self.stop()
            raise ClusterStoreUnavailableError(
                f"read {len(keys) - len(self._initial)} of {len(keys)} partition states "
                f"in {timeout}s"
            ) from None
        self.store.add_session_listener(self._on_store_session)
        self._global_watches = [
            self.store.watch_brokers(lambda b: self._post(self._apply_brokers, b)),
            self.store.watch_controller(lambda c: self._post(self._apply_controller, c)),
            self.store.watch_topics(lambda t: self._post(self._apply_topic_names, t)),
            self.store.watch_controlled_shutdowns(
                lambda ids: self._post(self._apply_controlled_shutdowns, ids)
            ),
        ]
        for topic in topics.values():
            self._watch_topic(topic.name)
            self._watch_states_of(topic.name, topic)  # partitions added later

    def _load(
        self,
    ) -> tuple[dict[int, BrokerRegistration], int | None, dict[str, TopicAssignment]]:
        brokers = self.store.brokers()
        controller_id = self.store.controller_id()
        return brokers, controller_id, self.store.topic_assignments(self.store.topics())

    def _watch_partitions(self, keys: list[TopicPartition]) -> list[WatchHandle]:
        """Executor thread: arming thousands of watches is thousands of (pipelined,
        non-blocking) requests, which would hold up the loop for a while."""
        return [self.store.watch_partition_state(t, p, self._on_state_read) for t, p in keys]

    def stop(self) -> None:
        """Drop every watch; the snapshot stays as it was."""
        self._stopped = True
        for handle in self._global_watches:
            handle.cancel()
        for handles in self._topic_watches.values():
            for handle in handles:
                handle.cancel()
        for maybe in self._partition_watches.values():
            if maybe is not None:
                maybe.cancel()
        for handle in self._znode_watches.values():
            handle.cancel()
        self._global_watches = []
        self._topic_watches = {}
        self._partition_watches = {}
        self._znode_watches = {}
        self._partition_znodes = {}

    # -- watches -------------------------------------------------------------------------

    def _post(self, apply: Callable[[Any], None], value: Any) -> None:
        """Any thread (kazoo's): hand the value to the loop, in order.

        Only the first value of a burst wakes the loop; the others join the
        inbox it empties (see the module docstring).
        """
        loop = self._loop
        if loop is None or self._stopped or loop.is_closed():
            return
        with self._inbox_lock:
            self._inbox.append((apply, value))
            if self._inbox_woken:
                return
            self._inbox_woken = True
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._empty_inbox)

    def _empty_inbox(self) -> None:
        """Loop thread: apply what arrived, at most ``INBOX_SLICE`` per turn of the loop."""
        inbox = self._inbox
        for _ in range(INBOX_SLICE):
            with self._inbox_lock:
                if not inbox:
                    self._inbox_woken = False
                    return
                apply, value = inbox.popleft()
            if self._stopped:
                return
            try:
                apply(value)
            except Exception:
                log.exception(
                    "cannot apply a cluster update (%s)", getattr(apply, "__name__", apply)
                )
        assert self._loop is not None
        self._loop.call_soon(self._empty_inbox)  # still woken: later posts wait for this

    def _watch_topic(self, name: str) -> None:
        if name in self._topic_watches:
            return
        self._topic_watches[name] = [
            self.store.watch_topic(name, lambda t: self._post(self._apply_topic, (name, t))),
            self.store.watch_topic_configs(
                name, lambda c: self._post(self._apply_configs, (name, c))
            ),
        ]

    def _watch_partition(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        if key in self._partition_watches:
            return
        self._partition_watches[key] = self.store.watch_partition_state(
            topic, partition, self._on_state_read
        )

    def _state_read(self, key: TopicPartition, state: PartitionState | None) -> None:
        """Store thread: a partition's new state, for the loop. Every partition's watch
        calls this one bound method (``_on_state_read``), not a closure of its own."""
        self._post(self._apply_state, (key, state))

    def _unwatch_topic(self, name: str) -> None:
        self._unwatch_partition_znodes(name)
        for handle in self._topic_watches.pop(name, []):
            handle.cancel()
        for key in [k for k in self._partition_watches if k[0] == name]:
            maybe = self._partition_watches.pop(key)
            if maybe is not None:
                maybe.cancel()

    # -- applying updates (loop thread) -----------------------------------------------------

    def _change(self) -> _Pending:
        if self._pending is None:
            self._pending = _Pending()
            assert self._loop is not None
            self._loop.call_soon(self._flush)
        return self._pending

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None or self._stopped:
            return
        change = pending.freeze()
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("cluster change listener failed")

    def _apply_brokers(self, brokers: dict[int, BrokerRegistration]) -> None:
        old = {b: (r, r.epoch) for b, r in self._brokers.items()}
        if old != {b: (r, r.epoch) for b, r in brokers.items()}:
            self._brokers = dict(brokers)
            self._change().brokers_changed = True

    def _apply_controller(self, controller_id: int | None) -> None:
        if controller_id != self._controller_id:
            self._controller_id = controller_id
            self._change().controller_changed = True

    def _apply_controlled_shutdowns(self, ids: frozenset[int]) -> None:
        self._in_controlled_shutdown = ids

    def _apply_topic_names(self, names: frozenset[str]) -> None:
        for name in sorted(set(self._topics) - names):
            self._remove_topic(name)
        for name in sorted(names - set(self._topics)):
            # The assignment arrives through the topic's own watch.
            self._watch_topic(name)

    def _remove_topic(self, name: str) -> None:
        topic = self._topics.pop(name, None)
        self._unwatch_topic(name)
        if topic is None:
            return
        change = self._change()
        change.topics_removed.add(name)
        change.topics_added.discard(name)
        for key in [k for k in self._states if k[0] == name]:
            del self._states[key]
            change.partitions_changed.add(key)

    def _apply_topic(self, update: tuple[str, TopicAssignment | None]) -> None:
        name, topic = update
        if topic is None:
            self._remove_topic(name)
            return
        if name not in self._topic_watches:  # a late callback after removal
            return
        old = self._topics.get(name)
        if old == topic:
            return
        self._topics[name] = topic
        change = self._change()
        if old is None or old.topic_id != topic.topic_id:
            change.topics_added.add(name)
            change.topics_removed.discard(name)
        old_replicas = old.replicas if old is not None else {}
        for partition, replicas in topic.replicas.items():
            if old_replicas.get(partition) != replicas:
                change.partitions_changed.add((name, partition))
        self._watch_states_of(name, topic)

    def _watch_states_of(self, name: str, topic: TopicAssignment) -> None:
        """Watch the state of each partition of ``topic``: at once in a topic of more
        than ``LISTED_PARTITIONS_MAX``, else once the topic's children watch lists
        the partition's znode (``ClusterStore.watch_partition_znodes``).

        Listing saves a new partition three ZooKeeper messages per broker, but each
        change of the list is read whole, and the controller creates a topic's
        partitions ``WRITE_BATCH`` at a time: reading the list once per batch grows
        with the square of the topic's size. A 100,000-partition topic on a cluster
        of one took 54 s to be known instead of 17 s.
        """
        if len(topic.replicas) > LISTED_PARTITIONS_MAX:
            self._unwatch_partition_znodes(name)  # grown past the bound
            for partition in topic.replicas:
                self._watch_partition(name, partition)
            return
        if name not in self._znode_watches:
            self._znode_watches[name] = self.store.watch_partition_znodes(
                name, lambda ps: self._post(self._apply_partition_znodes, (name, ps))
            )
        created = self._partition_znodes.get(name, frozenset())
        for partition in topic.replicas:
            if partition in created:  # else armed once its znode is listed
                self._watch_partition(name, partition)

    def _unwatch_partition_znodes(self, name: str) -> None:
        self._partition_znodes.pop(name, None)
        handle = self._znode_watches.pop(name, None)
        if handle is not None:
            handle.cancel()

    def _apply_partition_znodes(self, update: tuple[str, frozenset[int]]) -> None:
        """The topic's partitions that have a znode (so a state): watch the new ones.
        A partition of the assignment is watched only from here on, never before its
        znode exists (see ``ClusterStore.watch_partition_znodes``)."""
        name, partitions = update
        if name not in self._znode_watches:  # a late callback after removal
            return
        self._partition_znodes[name] = partitions
        topic = self._topics.get(name)
        if topic is None:  # the assignment comes next, and arms these
            return
        for partition in sorted(partitions):
            if partition in topic.replicas:
                self._watch_partition(name, partition)

    def _apply_configs(self, update: tuple[str, dict[str, str] | None]) -> None:
        name, configs = update
        topic = self._topics.get(name)
        if topic is None or configs is None or topic.configs == configs:
            return
        self._topics[name] = TopicAssignment(topic.name, topic.topic_id, topic.replicas, configs)
        self._change().configs_changed.add(name)

    def refresh_partition_states(
        self, states: Mapping[TopicPartition, PartitionState]
    ) -> list[TopicPartition]:
        """States just read from ZooKeeper (after a session was restored, or by a
        controlled shutdown) replace cached ones, unless a watch already delivered
        a newer version; returns the partitions whose cached state was replaced."""
        replaced: list[TopicPartition] = []
        for key, state in states.items():
            if key not in self._partition_watches:
                continue
            old = self._states.get(key)
            if old == state or (old is not None and old.zk_version > state.zk_version):
                continue
            self._states[key] = state
            self._change().partitions_changed.add(key)
            replaced.append(key)
        return replaced

    def _apply_state(self, update: tuple[TopicPartition, PartitionState | None]) -> None:
        key, state = update
        if key not in self._partition_watches:  # a late callback after removal
            return
        if key in self._initial:
            self._initial.discard(key)
            if not self._initial and self._initial_done is not None:
                self._initial_done.set()
        old = self._states.get(key)
        if state == old:
            return
        if state is None:
            del self._states[key]
        else:
            self._states[key] = state
        self._change().partitions_changed.add(key)
