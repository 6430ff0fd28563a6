"""The cluster's shared state in ZooKeeper, behind a small interface tests can fake.

``ClusterStore`` is what the controller, the broker's cluster view and the replica
manager need from ZooKeeper: broker registrations, the controller znode and
epoch, topic assignments and configs, per-partition leader/ISR state with
compare-and-set on the znode version, deletion markers, and watches.

``ZkClusterStore`` runs on kazoo; ``headwater.testing.InMemoryClusterStore`` is the
very same class on an in-memory ZooKeeper, so unit tests check the same code.

Threading model. kazoo runs its own threads (a connection thread, a thread for
watch events and one for async completions). The store's methods are
synchronous and thread-safe: call them from any thread *except* the event
loop's (the broker uses ``loop.run_in_executor``); each blocks at most
``request_timeout_s`` once the connection is gone, and up to
``slow_request_limit_s`` while it holds (see ``_wait``). Watch callbacks and
session listeners run on kazoo's or the store's own threads (the in-memory
store: synchronously, in the thread that made the change); they must be quick
and must not block the caller's event loop: hand work to a queue or
``loop.call_soon_threadsafe``. A watch callback gets each new value at most
once, in order, and the current value right after it is registered.

Failures are exceptions named for what they are: ``ClusterStoreUnavailableError``
(ZooKeeper unreachable or the session gone: nothing was written, or the write's
outcome is unknown), ``BrokerIdInUseError``, ``TopicExistsError``,
``UnknownTopicError``, ``ControllerMovedError`` (a fenced controller write after
another broker became controller). A lost compare-and-set is not an exception:
``update_partition_state`` returns ``None``.

Size: every read and write of Kafka's ZooKeeper layout is a short method of the
one store behind the ``ClusterStore`` protocol; they share the session and watch
machinery, and one file keeps the layout reviewable against Kafka's.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from headwater.cluster import zk_layout as zk
from headwater.cluster.zk_poll_handler import PollThreadingHandler
from headwater.log import errors as log_errors

log = logging.getLogger(__name__)

NO_LEADER = -1
"""``leader`` of a partition without one (Kafka's ``LeaderAndIsr.NoLeader``)."""

_UNAVAILABLE = (
    ConnectionLoss,
    SessionExpiredError,
    ConnectionClosedError,
    OperationTimeoutError,
    KazooTimeoutError,
)


# --- errors -------------------------------------------------------------------


class ClusterStoreError(Exception):
    """Base of the store's errors."""


class ClusterStoreUnavailableError(ClusterStoreError):
    """ZooKeeper cannot be reached (or the session is gone) right now; retry later."""


class BrokerIdInUseError(ClusterStoreError):
    """Another live broker (another ZooKeeper session) is registered with this id."""


# The topic errors are also the log layer's errors, so the broker answers them with
# the same Kafka error codes (TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION,
# INVALID_TOPIC_EXCEPTION) whichever layer raised them.


class TopicExistsError(ClusterStoreError, log_errors.TopicExistsError):
    """The topic exists, or is still being deleted."""


class UnknownTopicError(ClusterStoreError, log_errors.UnknownTopicOrPartitionError):
    """No such topic."""


class InvalidTopicError(ClusterStoreError, log_errors.InvalidTopicError):
    """The topic name or assignment is not acceptable."""


class ControllerMovedError(ClusterStoreError):
    """A fenced write was refused: the controller epoch moved on (another controller)."""


# --- values -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = field(default=-1, compare=False)
    """Kafka's broker epoch: the registration znode's creation zxid. It changes when
    the broker re-registers (a restart, a session expiry), even if the id list
    looks the same between two reads: the controller treats that as a bounce."""
    endpoints: tuple[tuple[str, str, str, int], ...] = field(default=(), compare=False)
    """Every listener: (name, security protocol, advertised host, port); empty for a
    registration with only ``host``/``port``."""

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """(host, port) of the named listener; None if the broker does not have it."""
        for name, _, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    name: str
    topic_id: uuid.UUID
    replicas: dict[int, list[int]]
    """partition -> replica broker ids, the first being the preferred leader."""
    configs: dict[str, str] = field(default_factory=dict)
    #: A reassignment in flight (KIP-455): partition -> replicas being added / removed.
    #: ``replicas`` then holds the target followed by the ones being removed.
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    def target(self, partition: int) -> list[int]:
        """The replicas the partition ends with (its replicas without those leaving)."""
        leaving = set(self.removing.get(partition, ()))
        return [r for r in self.replicas.get(partition, []) if r not in leaving]


@dataclass(frozen=True, slots=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<p>/state`` (Kafka's LeaderIsrAndControllerEpoch)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    """The znode version this value was read at (-1: not read from the store)."""


@dataclass(frozen=True, slots=True)
class ControllerFence:
    """Proof of being controller: the epoch and the ``/controller_epoch`` znode version.

    Every controller write is a transaction that first checks this version, so
    a controller that lost its election (and does not know yet) writes nothing.
    """

    broker_id: int
    epoch: int
    epoch_zk_version: int


@dataclass(frozen=True, slots=True)
class PartitionStateWrite:
    topic: str
    partition: int
    state: PartitionState
    expected_version: int | None
    """The znode version to compare-and-set against; None creates the state znode."""


class SessionEvent(enum.Enum):
    SUSPENDED = "suspended"
    """Connection lost; the session (and our ephemerals) may still live. Writes fail."""
    RECONNECTED = "reconnected"
    """Back on the same session: nothing was lost."""
    LOST = "lost"
    """The session expired: our ephemerals (broker registration, controller) are gone."""
    RESTORED = "restored"
    """A new session after LOST; the broker registration has been re-created."""


class WatchHandle(Protocol):
    def cancel(self) -> None: ...


SessionListener = Callable[[SessionEvent], None]


class ClusterStore(Protocol):
    """What the cluster needs from ZooKeeper (see the module docstring for threading)."""

    @property
    def connected(self) -> bool: ...

    def start(self, timeout: float = 30.0) -> None: ...
    def close(self) -> None: ...
    def add_session_listener(self, listener: SessionListener) -> None: ...

    # brokers
    def register_broker(self, registration: BrokerRegistration, wait_s: float = 0.0) -> None: ...
    def unregister_broker(self) -> None: ...
    def brokers(self) -> dict[int, BrokerRegistration]: ...
    def cluster_id(self, proposed: str) -> str: ...

    # controller
    def controller_id(self) -> int | None: ...
    def controller_epoch(self) -> int: ...
    def try_become_controller(self, broker_id: int) -> ControllerFence | None: ...
    def resign_controller(self, fence: ControllerFence) -> None: ...

    # topics
    def topics(self) -> list[str]: ...
    def topic(self, name: str) -> TopicAssignment | None: ...
    def topic_assignments(self, names: Iterable[str]) -> dict[str, TopicAssignment]: ...
    def create_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        replicas: dict[int, list[int]],
        configs: dict[str, str],
    ) -> TopicAssignment: ...
    def add_partitions(self, name: str, replicas: dict[int, list[int]]) -> TopicAssignment: ...
    def delete_topic(self, name: str) -> None: ...
    def write_reassignments(
        self,
        fence: ControllerFence,
        name: str,
        changes: dict[int, tuple[list[int], list[int], list[int]]],
    ) -> bool: ...
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    def set_broker_configs(self, entity: str, configs: dict[str, str]) -> None: ...
    def watch_broker_configs(
        self, entity: str, callback: Callable[[dict[str, str]], None]
    ) -> WatchHandle: ...
    def deletion_requests(self) -> list[str]: ...
    def delete_topic_znodes(self, fence: ControllerFence, name: str) -> None: ...

    # partition states
    def partition_state(self, topic: str, partition: int) -> PartitionState | None: ...
    def partitions_with_state_znodes(self, topic: str) -> list[int]: ...
    def partition_states(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], PartitionState]: ...
    def update_partition_state(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> int | None: ...
    def update_partition_states(
        self, updates: Sequence[tuple[str, int, PartitionState, int]]
    ) -> list[int | ClusterStoreUnavailableError | None]: ...
    def write_partition_states(
        self, fence: ControllerFence, writes: Sequence[PartitionStateWrite]
    ) -> dict[tuple[str, int], int | None]: ...
    def release_writer(self) -> None: ...

    # watches
    def watch_brokers(
        self, callback: Callable[[dict[int, BrokerRegistration]], None]
    ) -> WatchHandle: ...
    def watch_controller(self, callback: Callable[[int | None], None]) -> WatchHandle: ...
    def watch_topics(self, callback: Callable[[frozenset[str]], None]) -> WatchHandle: ...
    def watch_topic(
        self, name: str, callback: Callable[[TopicAssignment | None], None]
    ) -> WatchHandle: ...
    def watch_topic_configs(
        self, name: str, callback: Callable[[dict[str, str] | None], None]
    ) -> WatchHandle: ...
    def watch_deletion_requests(
        self, callback: Callable[[frozenset[str]], None]
    ) -> WatchHandle: ...
    def watch_partition_znodes(
        self, topic: str, callback: Callable[[frozenset[int]], None]
    ) -> WatchHandle: ...
    def watch_partition_state(
        self,
        topic: str,
        partition: int,
        callback: Callable[[tuple[str, int], PartitionState | None], None],
    ) -> WatchHandle: ...
    # Controlled shutdown (Headwater's request through ZooKeeper, see zk_layout).
    def request_controlled_shutdown(self, broker_id: int) -> None: ...
    def withdraw_controlled_shutdown(self, broker_id: int) -> None: ...
    def controlled_shutdowns(self) -> frozenset[int]: ...
    # ElectLeaders (KIP-460) through ZooKeeper, see zk_layout.LEADER_ELECTIONS.
    def request_leader_election(
        self, election_type: int, partitions: list[tuple[str, int]] | None
    ) -> str: ...
    def leader_election_request(
        self, name: str
    ) -> tuple[int, list[tuple[str, int]] | None, dict[tuple[str, int], int] | None] | None: ...
    def answer_leader_election(
        self,
        name: str,
        election_type: int,
        partitions: list[tuple[str, int]] | None,
        results: dict[tuple[str, int], int],
    ) -> None: ...
    def forget_leader_election(self, name: str) -> None: ...
    # AlterPartitionReassignments (KIP-455) through ZooKeeper, see zk_layout.REASSIGNMENTS.
    def request_reassignments(self, targets: dict[tuple[str, int], list[int] | None]) -> str: ...
    def reassignment_request(
        self, name: str
    ) -> (
        tuple[
            dict[tuple[str, int], list[int] | None],
            dict[tuple[str, int], tuple[int, str | None]] | None,
        ]
        | None
    ): ...
    def answer_reassignments(
        self,
        name: str,
        targets: dict[tuple[str, int], list[int] | None],
        results: dict[tuple[str, int], tuple[int, str | None]],
    ) -> None: ...
    def forget_reassignment_request(self, name: str) -> None: ...
    def watch_reassignment_requests(
        self, callback: Callable[[frozenset[str]], None]
    ) -> WatchHandle: ...
    def watch_leader_elections(self, callback: Callable[[frozenset[str]], None]) -> WatchHandle: ...
    # Failed log directories, corrupt replicas: zk_layout.LOG_DIR_EVENT_NOTIFICATION.
    def notify_log_dir_event(
        self, broker_id: int, partitions: list[tuple[str, int]], reason: str
    ) -> str: ...
    def log_dir_event(self, name: str) -> tuple[int, list[tuple[str, int]], str] | None: ...
    def delete_log_dir_event(self, name: str) -> None: ...
    def watch_log_dir_events(self, callback: Callable[[frozenset[str]], None]) -> WatchHandle: ...
    def watch_controlled_shutdowns(
        self, callback: Callable[[frozenset[int]], None]
    ) -> WatchHandle: ...


# --- change notifications -----------------------------------------------------------

NOTIFICATION_EXPIRY_MS = 15 * 60 * 1000
"""Sequential change notifications (``/config/changes``, ``/kafka-acl-changes``,
``/kafka-acl-extended-changes``) older than this are deleted: Kafka's
``ZkNodeChangeNotificationListener.changeExpirationMs``."""
_PURGE_CHUNK = 1000  # deletes in flight at once


def expired_notifications(created_ms: Mapping[str, int], now_ms: int, expiry_ms: int) -> list[str]:
    """The notifications (name -> creation time, the znode's ctime) to purge at ``now_ms``:
    Kafka's rule, older than ``expiry_ms``."""
    return sorted(name for name, ctime in created_ms.items() if now_ms - ctime > expiry_ms)


# --- watches --------------------------------------------------------------------

_UNSET: Any = object()


class _Watch:
    """A re-arming ZooKeeper watch (ZooKeeper's are one-shot) on one path.

    Reads are asynchronous: arming never blocks, so thousands of watches are set
    with pipelined requests. On a session loss the watch waits; the store re-arms
    every live watch on the new session.

    A broker holds one per partition, so it is kept small (issue 33: 50,000
    partitions within 8 KB of RSS per replica): slots, the store's one publish lock,
    and for a data watch only the znode's ``mzxid`` kept to drop repeats (it names
    the write that made the value; the value itself is not kept).
    """

    __slots__ = (
        "_children",
        "_dedupe",
        "_deliver",
        "_last",
        "_store",
        "cancelled",
        "path",
        "pending",
    )

    def __init__(
        self,
        store: ZkClusterStore,
        path: str,
        children: bool,
        deliver: Callable[[Any], None] | None,
        dedupe: bool = True,
    ) -> None:
        self._store = store
        self._dedupe = dedupe
        self.path = path
        self._children = children
        self._deliver = deliver
        self._last: Any = _UNSET
        self.cancelled = False
        self.pending = False

    def cancel(self) -> None:
        self.cancelled = True
        self._store._forget_watch(self)

    def arm(self) -> None:
        if self.cancelled:
            return
        self.pending = False
        client = self._store._client
        try:
            if self._children:
                client.get_children_async(self.path, watch=self._on_event).rawlink(self._got)
            else:
                client.get_async(self.path, watch=self._on_event).rawlink(self._got)
        except (*_UNAVAILABLE, KazooException):
            self.pending = True

    def wait_for_connection(self) -> None:
        """The watch went with the connection, or its read failed for want of one: the
        store re-arms it once connected again (``_reconnected``, ``_restore``).

        kazoo hands the news to its own threads (a connection loss reaches every watcher
        as a NONE event on the watch thread, a failed read on the completion thread),
        while the store's session thread handles the reconnection: the news can come
        after the reconnection was handled and its pending watches collected. Such a
        watch would wait for the next session event, deaf meanwhile; so when the
        connection is back already, it is re-armed here and now."""
        self.pending = True
        if self._store.connected:
            self.arm()

    def _on_event(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE:  # the connection or session ended
            self.wait_for_connection()
            return
        self.arm()

    def _got(self, result: Any) -> None:
        try:
            value = result.get()
        except NoNodeError:
            try:
                self._store._client.exists_async(self.path, watch=self._on_event).rawlink(
                    self._got_exists
                )
            except (*_UNAVAILABLE, KazooException):
                self.pending = True
            return
        except _UNAVAILABLE:
            self.wait_for_connection()
            return
        except Exception:
            log.exception("watch on %s failed", self.path)
            self.pending = True
            return
        if self._children:
            names = tuple(sorted(value))
            self._publish(names, names)
        else:
            data, stat = value
            self._publish((data, stat.version), stat.mzxid)

    def _got_exists(self, result: Any) -> None:
        try:
            stat = result.get()
        except _UNAVAILABLE:
            self.wait_for_connection()
            return
        if stat is not None:  # created between the two reads: read it
            self.arm()
            return
        self._publish(None, None)

    def _publish(self, value: Any, seen: Any) -> None:
        """Deliver ``value`` unless ``seen`` (what identifies it) was delivered last."""
        with self._store._publish_lock:
            if self.cancelled or (self._dedupe and seen == self._last):
                return
            self._last = seen
            try:
                self._tell(value)
            except Exception:
                log.exception("watch callback for %s failed", self.path)

    def _tell(self, value: Any) -> None:
        assert self._deliver is not None
        self._deliver(value)


class _PartitionStateWatch(_Watch):
    """The watch on one partition's state: decodes it and tells ``callback`` the
    partition too, so that a broker needs no closure per partition to know which
    partition a state is for (two closures per partition cost about 500 bytes)."""

    __slots__ = ("_callback", "_key")

    def __init__(
        self,
        store: ZkClusterStore,
        key: tuple[str, int],
        callback: Callable[[tuple[str, int], PartitionState | None], None],
    ) -> None:
        super().__init__(store, zk.partition_state_path(*key), False, None)
        self._key = key
        self._callback = callback

    def _tell(self, value: Any) -> None:
        try:
            state = self._store._decode_state(value)
        except zk.ZkLayoutError:
            log.error("malformed state of %s-%d", *self._key)
            return
        self._callback(self._key, state)


# --- the store -------------------------------------------------------------------


class ZkClusterStore:
    """``ClusterStore`` on ZooKeeper through kazoo.

    ``connect`` is a ``zookeeper.connect`` string, ``host:port[,host:port][/chroot]``;
    the chroot is created when missing (as Kafka does). Call ``start()`` before
    use and ``close()`` at the end.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18_000,
        request_timeout_s: float = 10.0,
        slow_request_limit_s: float = 60.0,
        client_factory: Callable[[str, str], Any] | None = None,
        notification_expiry_ms: int = NOTIFICATION_EXPIRY_MS,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.connect = zk.parse_zookeeper_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.request_timeout_s = request_timeout_s
        #: How long a request may wait for its answer while the connection holds.
        self.slow_request_limit_s = slow_request_limit_s
        #: How old a change notification gets before it is purged (tests shorten it).
        self.notification_expiry_ms = notification_expiry_ms
        #: Seconds since the epoch, compared with znode creation times (tests move it).
        self.wall_clock = wall_clock
        self._factory = client_factory or self._kazoo_client
        self._client: Any = None
        #: The controller's second session, for its bulk partition-state writes only
        #: (``_require_writer``); opened on the first such write.
        self._writer: Any = None
        self._lock = threading.RLock()
        self._watches: set[_Watch] = set()
        #: Held while a watch compares and delivers a value: one lock for every watch
        #: (they are published from kazoo's one completion thread, so it is uncontended;
        #: reentrant in case a callback ever publishes in turn).
        self._publish_lock = threading.RLock()
        self._session_listeners: list[SessionListener] = []
        self._registration: BrokerRegistration | None = None
        self._session_lost = False
        # Session events are handled here, in order, off kazoo's threads: kazoo's
        # state listeners must not block, and re-registering does ZooKeeper calls.
        self._session_worker = ThreadPoolExecutor(1, thread_name_prefix="hw-zk-session")
        # New watches are armed here, not on the caller's thread (the event loop): kazoo
        # wakes its connection thread with one byte per request on a blocking socket
        # pair, and sends one request per wake-up. 50,000 partition watches armed from
        # the loop filled that pair and blocked the loop for 10-45 s (issue 33).
        self._armer = ThreadPoolExecutor(1, thread_name_prefix="hw-zk-arm")
        #: Session events handled and new watches armed in the caller's thread (the
        #: in-memory store of unit tests, whose ZooKeeper has no connection thread).
        self._inline_callbacks = False
        self._closed = False

    def _kazoo_client(self, hosts: str, chroot: str) -> KazooClient:
        return KazooClient(
            hosts=hosts + chroot,
            timeout=self.session_timeout_ms / 1000,
            handler=PollThreadingHandler(),  # see zk_poll_handler: kazoo's select is costly
            # Reconnect forever (with backoff) while running; start() bounds the first try.
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
        )

    @property
    def client(self) -> Any:
        """The kazoo client (for tests and diagnostics; do not write through it)."""
        return self._client

    @property
    def writer_client(self) -> Any:
        """The controller's own session for partition-state writes, None until the
        first (for tests and diagnostics; see ``_require_writer``)."""
        return self._writer

    @property
    def connected(self) -> bool:
        return self._client is not None and bool(self._client.connected)

    # -- lifecycle ------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Connect (within ``timeout``) and create the persistent paths.

        Raises ``ClusterStoreUnavailableError`` with the address when ZooKeeper
        does not answer in time; the caller may retry.
        """
        where = str(self.connect)
        try:
            if self.connect.chroot:
                bootstrap = self._factory(self.connect.hosts, "")
                bootstrap.start(timeout)
                try:
                    self._wait(bootstrap.ensure_path_async(self.connect.chroot), "chroot")
                finally:
                    bootstrap.stop()
                    bootstrap.close()
            client = self._factory(self.connect.hosts, self.connect.chroot)
            client.add_listener(self._on_state)
            client.start(timeout)
        except _UNAVAILABLE as exc:
            raise ClusterStoreUnavailableError(
                f"ZooKeeper at {where} not reachable within {timeout}s ({type(exc).__name__})"
            ) from None
        self._client = client
        results = [self._client.ensure_path_async(path) for path in zk.PERSISTENT_PATHS]
        for result in results:
            self._wait(result, "persistent paths")
        with contextlib.suppress(NodeExistsError):
            self._wait(
                self._client.create_async(zk.CONTROLLER_EPOCH, zk.encode_controller_epoch(0)),
                "controller epoch",
            )

    def close(self) -> None:
        """Close the session: our ephemerals (registration, controller) go at once."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            for watch in list(self._watches):
                watch.cancelled = True
            self._watches.clear()
        self.release_writer()
        if self._client is not None:
            try:
                self._client.stop()
                self._client.close()
            except KazooException:
                log.debug("closing the ZooKeeper client failed", exc_info=True)
        self._session_worker.shutdown(wait=False, cancel_futures=True)
        self._armer.shutdown(wait=False, cancel_futures=True)

    def add_session_listener(self, listener: SessionListener) -> None:
        """``listener(SessionEvent)`` runs on the store's session thread, in event order."""
        self._session_listeners.append(listener)

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: decide what happened, do the work elsewhere.
        if self._closed:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            self._submit(self._session_event, SessionEvent.LOST)
        elif state == KazooState.SUSPENDED:
            self._submit(self._session_event, SessionEvent.SUSPENDED)
        elif state == KazooState.CONNECTED and self._client is not None:
            if self._session_lost:
                self._session_lost = False
                self._submit(self._restore)
            else:
                self._submit(self._reconnected)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        if self._inline_callbacks:
            fn(*args)
            return
        with contextlib.suppress(RuntimeError):  # raised once shut down
            self._session_worker.submit(fn, *args)

    def _session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.LOST:
            log.warning("ZooKeeper session lost (%s)", self.connect)
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event)

    def _reconnected(self) -> None:
        with self._lock:
            pending = [w for w in self._watches if w.pending]
        for watch in pending:
            watch.arm()
        self._session_event(SessionEvent.RECONNECTED)

    def _restore(self) -> None:
        registration = self._registration
        if registration is not None:
            try:
                self.register_broker(registration, wait_s=self.session_timeout_ms / 1000)
            except ClusterStoreError:
                log.exception("re-registering broker %d failed", registration.broker_id)
        with self._lock:
            watches = list(self._watches)
        for watch in watches:
            watch.arm()
        self._session_event(SessionEvent.RESTORED)

    # -- plumbing -------------------------------------------------------------------

    def _require(self) -> Any:
        client = self._client
        if client is None or self._closed:
            raise ClusterStoreUnavailableError("the cluster store is not started")
        if not client.connected:
            raise ClusterStoreUnavailableError(f"not connected to ZooKeeper at {self.connect}")
        return client

    #: Whether the controller writes partition states on a session of its own. The
    #: in-process ZooKeeper of a cluster of one has no socket to share, so no need.
    WRITES_ON_OWN_SESSION: ClassVar[bool] = True

    def _require_writer(self) -> Any:
        """The session the controller writes partition states on.

        Not the broker's own: that one also carries the cluster view's watch on
        every partition state, and each state the controller writes fires that
        watch and a read on every broker, the controller's too. ZooKeeper answers
        a session in order, so the answers to the controller's transactions came
        behind its own broker's notifications and reads: writing 50,000 states took
        28.8 s in a failover, 5.3 s on a session of its own (``bench_scale.py``,
        issue 33).

        Correctness does not rest on the session: every transaction checks the
        controller epoch's version (a deposed controller's writes fail) and each
        state's version (a lost race fails). The session is opened on the first
        write and reconnects, with a new session if need be, like the broker's.
        """
        if not self.WRITES_ON_OWN_SESSION:
            return self._require()
        self._require()  # the broker's session holds the controllership: it must be up
        writer = self._writer
        if writer is None:
            # Opened outside the lock: connecting may take seconds.
            fresh = self._factory(self.connect.hosts, self.connect.chroot)
            try:
                fresh.start(self.request_timeout_s)
            except _UNAVAILABLE as exc:
                with contextlib.suppress(Exception):
                    fresh.close()
                raise ClusterStoreUnavailableError(
                    f"ZooKeeper at {self.connect}: the controller's session: {type(exc).__name__}"
                ) from None
            with self._lock:
                if self._writer is None and not self._closed:
                    self._writer = fresh
                    fresh = None
                writer = self._writer
            if fresh is not None:  # another thread was first, or the store closed
                with contextlib.suppress(Exception):
                    fresh.stop()
                    fresh.close()
        if writer is None or self._closed:
            raise ClusterStoreUnavailableError("the cluster store is not started")
        if not writer.connected:
            raise ClusterStoreUnavailableError(
                f"the controller's session to ZooKeeper at {self.connect} is not connected"
            )
        return writer

    def release_writer(self) -> None:
        """Close the controller's own session (``_require_writer``): a broker that is
        no longer controller keeps no second session open."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.stop()
                writer.close()
            except KazooException:
                log.debug("closing the controller's ZooKeeper session failed", exc_info=True)

    def _wait(self, result: Any, what: str) -> Any:
        """The answer; waits ``request_timeout_s``, and again while still connected.

        A request unanswered after ``request_timeout_s`` on a connection kazoo still
        holds (its pings would have dropped a dead one within the session's read
        timeout, failing every pending request) is queued behind others, not lost:
        at 50,000 partitions the controller's requests waited behind the cluster
        view's watch reads on the same session, and giving up at 10 s made the
        controller re-read everything, which queued 50,000 reads more (issue 33).
        Such a wait goes on up to ``slow_request_limit_s``.
        """
        waited = 0.0
        while True:
            try:
                return result.get(timeout=self.request_timeout_s)
            except KazooTimeoutError:
                waited += self.request_timeout_s
                if self.connected and waited < self.slow_request_limit_s:
                    continue
                raise ClusterStoreUnavailableError(
                    f"ZooKeeper at {self.connect}: {what}: no answer in {waited:.0f} s"
                ) from None
            except _UNAVAILABLE as exc:
                raise ClusterStoreUnavailableError(
                    f"ZooKeeper at {self.connect}: {what}: {type(exc).__name__}"
                ) from None

    def _get(self, path: str) -> tuple[bytes, int] | None:
        try:
            data, stat = self._wait(self._require().get_async(path), path)
        except NoNodeError:
            return None
        return data, stat.version

    def _get_many(self, paths: Sequence[str]) -> list[tuple[bytes, int] | None]:
        """Pipelined reads: all requests in flight at once, then the answers."""
        return [
            None if got is None else (got[0], got[1].version)
            for got in self._get_many_with_stat(paths)
        ]

    def _await_last(self, results: Sequence[Any]) -> None:
        """Wait for the last of many pipelined requests before reading any answer.

        ZooKeeper answers a session's requests in order, so once the last answer
        is in, every one is. Waiting for each in turn blocked this thread once
        per answer not in yet (175 to 409 times per 4,000 reads of partition
        states on a real ZooKeeper beside a busy thread), each a wake-up and a
        GIL hand-off with kazoo's connection thread while it was still reading
        the rest; now once. Errors are left for the caller's own wait on each
        result to raise.
        """
        if len(results) > 1:
            with contextlib.suppress(Exception):
                results[-1].get(timeout=self.request_timeout_s)

    def _get_many_with_stat(self, paths: Sequence[str]) -> list[tuple[bytes, Any] | None]:
        client = self._require()
        pending = [client.get_async(path) for path in paths]
        self._await_last(pending)
        out: list[tuple[bytes, Any] | None] = []
        for path, result in zip(paths, pending, strict=True):
            try:
                data, stat = self._wait(result, path)
                out.append((data, stat))
            except NoNodeError:
                out.append(None)
        return out

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self._wait(self._require().get_children_async(path), path))
        except NoNodeError:
            return []

    def _commit(self, transaction: Any, what: str) -> list[Any]:
        return list(self._wait(transaction.commit_async(), what))

    # -- brokers --------------------------------------------------------------------

    def register_broker(self, registration: BrokerRegistration, wait_s: float = 0.0) -> None:
        """Create ``/brokers/ids/<id>`` (ephemeral) for this session.

        If another session holds the id, wait up to ``wait_s`` for it to go (a
        restarted broker's old session lingers until it times out), then raise
        ``BrokerIdInUseError``. The registration is re-created automatically
        after a session expiry.
        """
        path = zk.broker_path(registration.broker_id)
        data = zk.encode_broker(
            registration.host, registration.port, registration.rack, registration.endpoints
        )
        deadline = time.monotonic() + wait_s
        while True:
            client = self._require()
            try:
                self._wait(client.create_async(path, data, ephemeral=True), path)
                self._registration = registration
                return
            except NodeExistsError:
                pass
            try:
                held, stat = self._wait(client.get_async(path), path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == client.client_id[0]:
                self._registration = registration
                return
            if time.monotonic() >= deadline:
                try:
                    host, port, _ = zk.decode_broker(held)
                    holder = f"{host}:{port}"
                except zk.ZkLayoutError:
                    holder = "another broker"
                raise BrokerIdInUseError(
                    f"broker.id {registration.broker_id} is registered in ZooKeeper by "
                    f"{holder} (another live session); give each broker its own broker.id"
                )
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def unregister_broker(self) -> None:
        """Delete our registration (clean shutdown) so the controller acts at once."""
        registration, self._registration = self._registration, None
        if registration is None:
            return
        with contextlib.suppress(NoNodeError):
            self._wait(
                self._require().delete_async(zk.broker_path(registration.broker_id)), "broker"
            )

    def brokers(self) -> dict[int, BrokerRegistration]:
        ids = [int(name) for name in self._children(zk.BROKER_IDS) if name.isdigit()]
        return self._read_brokers(ids)

    def _read_brokers(self, ids: Sequence[int]) -> dict[int, BrokerRegistration]:
        out: dict[int, BrokerRegistration] = {}
        got_all = self._get_many_with_stat([zk.broker_path(i) for i in ids])
        for broker_id, got in zip(ids, got_all, strict=True):
            if got is None:
                continue
            try:
                host, port, rack = zk.decode_broker(got[0])
                endpoints = zk.decode_broker_endpoints(got[0])
            except zk.ZkLayoutError:
                log.error("ignoring malformed registration of broker %d", broker_id)
                continue
            out[broker_id] = BrokerRegistration(
                broker_id, host, port, rack, got[1].czxid, endpoints
            )
        return out

    def cluster_id(self, proposed: str) -> str:
        """The cluster's id: ``proposed`` if this is the first broker ever, else the stored one."""
        try:
            self._wait(
                self._require().create_async(zk.CLUSTER_ID, zk.encode_cluster_id(proposed)),
                "cluster id",
            )
            return proposed
        except NodeExistsError:
            got = self._get(zk.CLUSTER_ID)
            if got is None:
                return self.cluster_id(proposed)
            return zk.decode_cluster_id(got[0])

    # -- controller -----------------------------------------------------------------

    def controller_id(self) -> int | None:
        got = self._get(zk.CONTROLLER)
        return None if got is None else zk.decode_controller(got[0])

    def controller_epoch(self) -> int:
        got = self._get(zk.CONTROLLER_EPOCH)
        return 0 if got is None else zk.decode_controller_epoch(got[0])

    def try_become_controller(self, broker_id: int) -> ControllerFence | None:
        """Create ``/controller`` and bump ``/controller_epoch`` in one transaction.

        Returns the fence when this session is now the controller, None when
        another broker is. (Kafka's ``registerControllerAndIncrementControllerEpoch``.)
        """
        while True:
            client = self._require()
            got = self._get(zk.CONTROLLER_EPOCH)
            if got is None:
                raise ClusterStoreUnavailableError("/controller_epoch is missing")
            epoch, version = zk.decode_controller_epoch(got[0]), got[1]
            tx = client.transaction()
            tx.create(zk.CONTROLLER, zk.encode_controller(broker_id), ephemeral=True)
            tx.set_data(zk.CONTROLLER_EPOCH, zk.encode_controller_epoch(epoch + 1), version)
            results = self._commit(tx, "controller election")
            if not any(isinstance(r, BaseException) for r in results):
                return ControllerFence(broker_id, epoch + 1, version + 1)
            if isinstance(results[0], NodeExistsError):
                return self._own_controller_fence(broker_id)
            # The epoch moved under us (another election in between): read again.

    def _own_controller_fence(self, broker_id: int) -> ControllerFence | None:
        """The fence if ``/controller`` is this session's (a repeated election), else None.

        Whoever created ``/controller`` bumped the epoch last, and nobody can bump
        it again while the znode exists: the current epoch is that creator's.
        """
        client = self._require()
        try:
            data, stat = self._wait(client.get_async(zk.CONTROLLER), "controller")
        except NoNodeError:
            return None
        if stat.ephemeralOwner != client.client_id[0] or zk.decode_controller(data) != broker_id:
            return None
        got = self._get(zk.CONTROLLER_EPOCH)
        if got is None:
            return None
        return ControllerFence(broker_id, zk.decode_controller_epoch(got[0]), got[1])

    def resign_controller(self, fence: ControllerFence) -> None:
        """Delete ``/controller`` if it is still ours (clean shutdown)."""
        client = self._require()
        try:
            _data, stat = self._wait(client.get_async(zk.CONTROLLER), "controller")
        except NoNodeError:
            return
        if stat.ephemeralOwner == client.client_id[0]:
            with contextlib.suppress(NoNodeError, BadVersionError):
                self._wait(client.delete_async(zk.CONTROLLER, stat.version), "controller")

    # -- topics ---------------------------------------------------------------------

    def topics(self) -> list[str]:
        return self._children(zk.TOPICS)

    def topic(self, name: str) -> TopicAssignment | None:
        got, configs = self._get_many([zk.topic_path(name), zk.topic_config_path(name)])
        if got is None:
            return None
        return self._assignment(name, got[0], configs[0] if configs else None)

    def topic_assignments(self, names: Iterable[str]) -> dict[str, TopicAssignment]:
        """Many topics with pipelined reads (missing ones are left out)."""
        wanted = list(names)
        paths = [zk.topic_path(n) for n in wanted] + [zk.topic_config_path(n) for n in wanted]
        got = self._get_many(paths)
        out: dict[str, TopicAssignment] = {}
        for i, name in enumerate(wanted):
            topic, config = got[i], got[len(wanted) + i]
            if topic is None:
                continue
            try:
                out[name] = self._assignment(name, topic[0], config[0] if config else None)
            except zk.ZkLayoutError:
                log.error("ignoring malformed znodes of topic %s", name)
        return out

    @staticmethod
    def _assignment(name: str, data: bytes, config_data: bytes | None) -> TopicAssignment:
        topic_id, replicas = zk.decode_topic(data)
        adding, removing = zk.decode_topic_reassignments(data)
        configs = zk.decode_configs(config_data) if config_data else {}
        # Topics written by tools without ids get a stable one derived from the name.
        return TopicAssignment(
            name, topic_id or uuid.uuid5(uuid.NAMESPACE_URL, name), replicas, configs,
            adding, removing,
        )  # fmt: skip

    def create_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        replicas: dict[int, list[int]],
        configs: dict[str, str],
    ) -> TopicAssignment:
        """Write config and assignment in one transaction (any broker may do this).

        The controller sees the new topic through its watch and creates the
        partition states. Raises ``TopicExistsError`` (also while the topic is
        being deleted) or ``InvalidTopicError``.
        """
        try:
            zk.validate_topic_name(name)
        except zk.ZkLayoutError as exc:
            raise InvalidTopicError(str(exc)) from None
        if not replicas or sorted(replicas) != list(range(len(replicas))):
            raise InvalidTopicError(f"partitions of {name!r} must be 0..n-1")
        for partition, brokers in replicas.items():
            if not brokers or len(set(brokers)) != len(brokers):
                raise InvalidTopicError(
                    f"partition {partition} of {name!r} needs distinct replicas, got {brokers}"
                )
        client = self._require()
        if self._get(zk.delete_topic_path(name)) is not None:
            raise TopicExistsError(f"topic {name!r} is marked for deletion")
        tx = client.transaction()
        stale_config = self._get(zk.topic_config_path(name))
        if stale_config is None:
            tx.create(zk.topic_config_path(name), zk.encode_configs(configs))
        else:  # left by an earlier, interrupted creation or deletion
            tx.set_data(zk.topic_config_path(name), zk.encode_configs(configs), stale_config[1])
        tx.create(zk.topic_path(name), zk.encode_topic(topic_id, replicas))
        results = self._commit(tx, f"create topic {name}")
        if isinstance(results[1], NodeExistsError):
            raise TopicExistsError(f"topic {name!r} already exists")
        if any(isinstance(r, BaseException) for r in results):
            # The config znode changed between our read and the transaction.
            raise TopicExistsError(f"topic {name!r} is being created concurrently")
        return TopicAssignment(name, topic_id, {p: list(r) for p, r in replicas.items()},
                               dict(configs))  # fmt: skip

    def add_partitions(self, name: str, replicas: dict[int, list[int]]) -> TopicAssignment:
        """Add partitions to a topic (compare-and-set on its znode version).

        ``replicas`` holds only the new partitions, numbered on from the current
        count. The controller sees the change and creates their states. Raises
        UnknownTopicError, InvalidTopicError (bad numbering or replicas),
        TopicExistsError (being deleted or changed concurrently).
        """
        got = self._get(zk.topic_path(name))
        if got is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        if self._get(zk.delete_topic_path(name)) is not None:
            raise TopicExistsError(f"topic {name!r} is marked for deletion")
        topic_id, current = zk.decode_topic(got[0])
        expected = list(range(len(current), len(current) + len(replicas)))
        if not replicas or sorted(replicas) != expected:
            raise InvalidTopicError(
                f"new partitions of {name!r} must be numbered {expected[:1]}.. after "
                f"the {len(current)} existing ones"
            )
        for partition, brokers in replicas.items():
            if not brokers or len(set(brokers)) != len(brokers):
                raise InvalidTopicError(
                    f"partition {partition} of {name!r} needs distinct replicas, got {brokers}"
                )
        merged = {**current, **{p: list(r) for p, r in replicas.items()}}
        topic_id = topic_id or uuid.uuid5(uuid.NAMESPACE_URL, name)
        adding, removing = zk.decode_topic_reassignments(got[0])
        try:
            self._wait(
                self._require().set_async(
                    zk.topic_path(name),
                    zk.encode_topic(topic_id, merged, adding, removing),
                    got[1],
                ),
                "add partitions",
            )
        except (BadVersionError, NoNodeError):
            raise TopicExistsError(f"topic {name!r} changed concurrently; retry") from None
        topic = self.topic(name)
        if topic is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        return topic

    def write_reassignments(
        self,
        fence: ControllerFence,
        name: str,
        changes: dict[int, tuple[list[int], list[int], list[int]]],
    ) -> bool:
        """Controller: set (replicas, adding, removing) of some partitions of ``name``
        (KIP-455 in ZooKeeper mode), fenced and compare-and-set on the topic znode.
        False when the topic is gone or changed meanwhile (re-read and decide again)."""
        got = self._get(zk.topic_path(name))
        if got is None:
            return False
        topic_id, replicas = zk.decode_topic(got[0])
        adding, removing = zk.decode_topic_reassignments(got[0])
        for partition, (new_replicas, new_adding, new_removing) in changes.items():
            if partition not in replicas:
                return False
            replicas[partition] = list(new_replicas)
            adding[partition] = list(new_adding)
            removing[partition] = list(new_removing)
        data = zk.encode_topic(
            topic_id or uuid.uuid5(uuid.NAMESPACE_URL, name), replicas, adding, removing
        )
        tx = self._require().transaction()
        tx.check(zk.CONTROLLER_EPOCH, fence.epoch_zk_version)
        tx.set_data(zk.topic_path(name), data, got[1])
        results = self._commit(tx, f"reassign partitions of {name}")
        self._raise_if_fenced(results, fence)
        return not any(isinstance(r, BaseException) for r in results)

    def delete_topic(self, name: str) -> None:
        """Mark the topic for deletion (``/admin/delete_topics/<t>``); the controller deletes."""
        if self._get(zk.topic_path(name)) is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        with contextlib.suppress(NodeExistsError):
            self._wait(self._require().create_async(zk.delete_topic_path(name)), "delete marker")

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's configs (whole map, as ``/config/topics/<t>`` holds it)."""
        if self._get(zk.topic_path(name)) is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        client = self._require()
        data = zk.encode_configs(configs)
        try:
            self._wait(client.set_async(zk.topic_config_path(name), data), "topic config")
        except NoNodeError:
            self._wait(client.create_async(zk.topic_config_path(name), data), "topic config")

    def deletion_requests(self) -> list[str]:
        return self._children(zk.DELETE_TOPICS)

    def delete_topic_znodes(self, fence: ControllerFence, name: str) -> None:
        """Controller: remove the topic's znodes, leaf first, in fenced transactions.

        Chunked, because one ZooKeeper request is bounded (jute.maxbuffer, 1 MiB).
        The deletion marker goes last, so an interrupted deletion is resumed.
        """
        client = self._require()
        paths: list[str] = []
        for partition in self._children(zk.partitions_path(name)):
            base = f"{zk.partitions_path(name)}/{partition}"
            paths.extend(f"{base}/{child}" for child in self._children(base))
            paths.append(base)
        if self._get(zk.partitions_path(name)) is not None:
            paths.append(zk.partitions_path(name))
        for path in (zk.topic_path(name), zk.topic_config_path(name), zk.delete_topic_path(name)):
            if self._get(path) is not None:
                paths.append(path)
        for start in range(0, len(paths), 500):
            tx = client.transaction()
            tx.check(zk.CONTROLLER_EPOCH, fence.epoch_zk_version)
            for path in paths[start : start + 500]:
                tx.delete(path)
            results = self._commit(tx, f"delete topic {name}")
            self._raise_if_fenced(results, fence)
            failure = next((r for r in results if isinstance(r, BaseException)), None)
            if isinstance(failure, NotEmptyError | NoNodeError):
                # Someone wrote under the topic meanwhile: start over from a fresh listing.
                self.delete_topic_znodes(fence, name)
                return

    @staticmethod
    def _raise_if_fenced(results: list[Any], fence: ControllerFence) -> None:
        if results and isinstance(results[0], BadVersionError | NoNodeError):
            raise ControllerMovedError(
                f"controller epoch {fence.epoch} of broker {fence.broker_id} is no longer current"
            )

    # -- partition states -------------------------------------------------------------

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._decode_state(self._get(zk.partition_state_path(topic, partition)))

    @staticmethod
    def _decode_state(got: tuple[bytes, int] | None) -> PartitionState | None:
        if got is None:
            return None
        leader, leader_epoch, isr, controller_epoch = zk.decode_partition_state(got[0])
        return PartitionState(leader, leader_epoch, isr, controller_epoch, got[1])

    def partitions_with_state_znodes(self, topic: str) -> list[int]:
        """Partitions of ``topic`` that have a partition znode (one request): a new
        topic has none, so its states need not be read one by one."""
        return sorted(int(c) for c in self._children(zk.partitions_path(topic)) if c.isdigit())

    def partition_states(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], PartitionState]:
        """Many states with pipelined reads (missing ones are left out)."""
        keys = list(partitions)
        got = self._get_many([zk.partition_state_path(t, p) for t, p in keys])
        out: dict[tuple[str, int], PartitionState] = {}
        for key, value in zip(keys, got, strict=True):
            state = self._decode_state(value)
            if state is not None:
                out[key] = state
        return out

    def update_partition_state(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> int | None:
        """Compare-and-set by a partition leader (ISR shrink/expand).

        Returns the new znode version, or None if the state changed since
        ``expected_version`` was read (or the partition is gone): re-read it.
        Raises ``ClusterStoreUnavailableError`` when ZooKeeper is unreachable.
        """
        (result,) = self.update_partition_states([(topic, partition, state, expected_version)])
        if isinstance(result, ClusterStoreUnavailableError):
            raise result
        return result

    def update_partition_states(
        self, updates: Sequence[tuple[str, int, PartitionState, int]]
    ) -> list[int | ClusterStoreUnavailableError | None]:
        """Many leaders' compare-and-sets, ``(topic, partition, state, expected_version)``
        each, pipelined: all in flight at once, then the answers.

        Per update, as ``update_partition_state``: the new version, None for a lost
        race, or the error when ZooKeeper did not answer (that update may or may not
        have been applied; the watch tells). Each stays its own compare-and-set, not
        one transaction, so one lost race fails no other. A broker taking 33,000
        followers back into their ISRs after a restart wrote them one blocking round
        trip at a time from a few executor threads (issue 33).
        """
        try:
            client = self._require()
        except ClusterStoreUnavailableError as exc:
            return [exc] * len(updates)
        pending: list[tuple[str, Any]] = []
        for topic, partition, state, expected in updates:
            data = zk.encode_partition_state(
                state.leader, state.leader_epoch, state.isr, state.controller_epoch
            )
            path = zk.partition_state_path(topic, partition)
            try:
                pending.append((path, client.set_async(path, data, expected)))
            except (*_UNAVAILABLE, KazooException) as exc:
                pending.append((path, exc))
        self._await_last([result for _, result in pending if not isinstance(result, Exception)])
        out: list[int | ClusterStoreUnavailableError | None] = []
        for path, result in pending:
            if isinstance(result, Exception):
                out.append(ClusterStoreUnavailableError(f"ZooKeeper at {self.connect}: {path}: "
                                                        f"{type(result).__name__}"))  # fmt: skip
                continue
            try:
                stat = self._wait(result, path)
            except (BadVersionError, NoNodeError):
                out.append(None)
            except ClusterStoreUnavailableError as exc:
                out.append(exc)
            else:
                out.append(int(stat.version))
        return out

    WRITE_BATCH = 200
    """Partition writes per ZooKeeper transaction (well under the 1 MiB request limit)."""

    def write_partition_states(
        self, fence: ControllerFence, writes: Sequence[PartitionStateWrite]
    ) -> dict[tuple[str, int], int | None]:
        """Controller: create or compare-and-set many states, fenced by the epoch.

        Optimistic batches: one transaction per ``WRITE_BATCH`` partitions (the
        epoch check, then each write; a new state's partition znode is created in
        the same transaction), all batches in flight at once. ZooKeeper commits a
        batch with one log write, where one transaction per partition would cost a
        round trip and a log write each. A batch with a lost compare-and-set fails
        whole; its partitions are then retried one transaction each, so one
        conflict costs only its own partition. Result per partition: the new znode
        version, or None when its compare-and-set lost. Raises
        ``ControllerMovedError`` when fenced out. Written on the controller's own
        session (``_require_writer``).
        """
        client = self._require_writer()
        topics_created = {w.topic for w in writes if w.expected_version is None}
        for result in [
            client.ensure_path_async(zk.partitions_path(t)) for t in sorted(topics_created)
        ]:
            self._wait(result, "partitions path")
        batches = [
            writes[i : i + self.WRITE_BATCH] for i in range(0, len(writes), self.WRITE_BATCH)
        ]
        pending = []
        for batch in batches:
            tx = client.transaction()
            tx.check(zk.CONTROLLER_EPOCH, fence.epoch_zk_version)
            for w in batch:
                self._add_write(tx, w, fence, with_parent=True)
            pending.append((batch, tx.commit_async()))
        self._await_last([result for _, result in pending])
        out: dict[tuple[str, int], int | None] = {}
        retry: list[PartitionStateWrite] = []
        for batch, result in pending:
            results = list(self._wait(result, "partition states"))
            self._raise_if_fenced(results, fence)
            if any(isinstance(r, BaseException) for r in results):
                retry.extend(batch)
                continue
            position = 1
            for w in batch:
                if w.expected_version is None:
                    out[(w.topic, w.partition)] = 0
                    position += 2
                else:
                    out[(w.topic, w.partition)] = int(results[position].version)
                    position += 1
        if retry:
            out.update(self._write_partition_states_one_by_one(fence, retry))
        return out

    def _add_write(
        self, tx: Any, w: PartitionStateWrite, fence: ControllerFence, with_parent: bool
    ) -> None:
        data = zk.encode_partition_state(
            w.state.leader, w.state.leader_epoch, w.state.isr, fence.epoch
        )
        path = zk.partition_state_path(w.topic, w.partition)
        if w.expected_version is None:
            if with_parent:
                tx.create(zk.partition_path(w.topic, w.partition))
            tx.create(path, data)
        else:
            tx.set_data(path, data, w.expected_version)

    def _write_partition_states_one_by_one(
        self, fence: ControllerFence, writes: Sequence[PartitionStateWrite]
    ) -> dict[tuple[str, int], int | None]:
        client = self._require_writer()
        # A partition znode may exist without its state (written by another tool):
        # create parents on their own first; they are plain, harmless znodes.
        made = [
            client.create_async(zk.partition_path(w.topic, w.partition))
            for w in writes
            if w.expected_version is None
        ]
        self._await_last(made)
        for result in made:
            with contextlib.suppress(NodeExistsError):
                self._wait(result, "partition path")
        pending = []
        for w in writes:
            tx = client.transaction()
            tx.check(zk.CONTROLLER_EPOCH, fence.epoch_zk_version)
            self._add_write(tx, w, fence, with_parent=False)
            pending.append((w, tx.commit_async()))
        self._await_last([result for _, result in pending])
        out: dict[tuple[str, int], int | None] = {}
        for w, result in pending:
            results = list(self._wait(result, "partition state"))
            self._raise_if_fenced(results, fence)
            if isinstance(results[1], BaseException):
                out[(w.topic, w.partition)] = None
            elif w.expected_version is None:
                out[(w.topic, w.partition)] = 0
            else:
                out[(w.topic, w.partition)] = int(results[1].version)
        return out

    # -- watches ------------------------------------------------------------------------

    def _watch(
        self, path: str, children: bool, deliver: Callable[[Any], None], dedupe: bool = True
    ) -> _Watch:
        return self._arm_new(_Watch(self, path, children, deliver, dedupe))

    def _arm_new(self, watch: _Watch) -> _Watch:
        with self._lock:
            self._watches.add(watch)
        if self._inline_callbacks:
            watch.arm()
        else:
            try:
                self._armer.submit(watch.arm)
            except RuntimeError:  # closed: the watch would never fire anyway
                watch.cancel()
        return watch

    def _forget_watch(self, watch: _Watch) -> None:
        with self._lock:
            self._watches.discard(watch)

    def watch_brokers(
        self, callback: Callable[[dict[int, BrokerRegistration]], None]
    ) -> WatchHandle:
        """Live brokers, on every registration or session end, and on a re-registration
        (a new broker epoch) even when the id list reads the same."""
        last: list[dict[int, tuple[BrokerRegistration, int]]] = []

        def deliver(children: tuple[str, ...] | None) -> None:
            ids = [int(c) for c in children or () if c.isdigit()]
            try:
                brokers = self._read_brokers(ids)
            except ClusterStoreUnavailableError:
                watch.wait_for_connection()
                return
            seen = {b: (r, r.epoch) for b, r in brokers.items()}
            if last and last[0] == seen:
                return
            last[:] = [seen]
            callback(brokers)

        watch = self._watch(zk.BROKER_IDS, True, deliver, dedupe=False)
        return watch

    def watch_controller(self, callback: Callable[[int | None], None]) -> WatchHandle:
        def deliver(value: tuple[bytes, int] | None) -> None:
            if value is None:
                callback(None)
                return
            try:
                callback(zk.decode_controller(value[0]))
            except zk.ZkLayoutError:
                log.error("malformed /controller znode: %r", value[0])

        return self._watch(zk.CONTROLLER, False, deliver)

    def watch_topics(self, callback: Callable[[frozenset[str]], None]) -> WatchHandle:
        return self._watch(zk.TOPICS, True, lambda c: callback(frozenset(c or ())))

    def watch_deletion_requests(self, callback: Callable[[frozenset[str]], None]) -> WatchHandle:
        return self._watch(zk.DELETE_TOPICS, True, lambda c: callback(frozenset(c or ())))

    def watch_partition_znodes(
        self, topic: str, callback: Callable[[frozenset[int]], None]
    ) -> WatchHandle:
        """The partitions of ``topic`` that have a znode, now and on every change: one
        watch per topic. The controller creates a partition's znode in the transaction
        that writes its first state, so a partition listed here has a state to read.
        A view that armed a state watch on a partition not created yet paid a failed
        read, an exists watch, its event and the read again: four ZooKeeper messages
        per partition and broker where one does (issue 33, creating 50,000)."""
        return self._watch(
            zk.partitions_path(topic),
            True,
            lambda c: callback(frozenset(int(n) for n in (c or ()) if n.isdigit())),
        )

    def request_controlled_shutdown(self, broker_id: int) -> None:
        """Ask the controller (again) to move this broker's leaderships: (re)create the
        ephemeral ``/admin/controlled_shutdown/<id>``, so each attempt is a new event."""
        path = zk.controlled_shutdown_path(broker_id)
        self.delete_znode(path)
        self.create_ephemeral(path, str(int(time.time() * 1000)).encode())

    def withdraw_controlled_shutdown(self, broker_id: int) -> None:
        self.delete_znode(zk.controlled_shutdown_path(broker_id))

    def controlled_shutdowns(self) -> frozenset[int]:
        """Ids of the brokers in controlled shutdown now."""
        return frozenset(int(c) for c in self._children(zk.CONTROLLED_SHUTDOWN) if c.isdigit())

    def request_leader_election(
        self, election_type: int, partitions: list[tuple[str, int]] | None
    ) -> str:
        """Ask the controller for an election; the request's name (to read the answer)."""
        path = self.create_sequential(
            zk.LEADER_ELECTIONS + "/election_",
            zk.encode_election_request(election_type, partitions),
        )
        return path.rsplit("/", 1)[1]

    def leader_election_request(
        self, name: str
    ) -> tuple[int, list[tuple[str, int]] | None, dict[tuple[str, int], int] | None] | None:
        """(type, partitions, results once answered); None when the request is gone."""
        got = self._get(f"{zk.LEADER_ELECTIONS}/{name}")
        if got is None:
            return None
        try:
            election_type, partitions, results = zk.decode_election_request(got[0])
            decided = None if results is None else zk.decode_election_results(results)
        except (zk.ZkLayoutError, KeyError, TypeError, ValueError):
            log.error("malformed leader election request %s; dropping it", name)
            self.delete_znode(f"{zk.LEADER_ELECTIONS}/{name}")
            return None
        return election_type, partitions, decided

    def answer_leader_election(
        self,
        name: str,
        election_type: int,
        partitions: list[tuple[str, int]] | None,
        results: dict[tuple[str, int], int],
    ) -> None:
        data = zk.encode_election_results(election_type, partitions, results)
        with contextlib.suppress(NoNodeError):
            self._wait(self._require().set_async(f"{zk.LEADER_ELECTIONS}/{name}", data), name)

    def forget_leader_election(self, name: str) -> None:
        self.delete_znode(f"{zk.LEADER_ELECTIONS}/{name}")

    def request_reassignments(self, targets: dict[tuple[str, int], list[int] | None]) -> str:
        path = self.create_sequential(
            zk.REASSIGNMENTS + "/request_", zk.encode_reassignment_request(targets)
        )
        return path.rsplit("/", 1)[1]

    def reassignment_request(
        self, name: str
    ) -> (
        tuple[
            dict[tuple[str, int], list[int] | None],
            dict[tuple[str, int], tuple[int, str | None]] | None,
        ]
        | None
    ):
        got = self._get(f"{zk.REASSIGNMENTS}/{name}")
        if got is None:
            return None
        try:
            return zk.decode_reassignment_request(got[0])
        except zk.ZkLayoutError:
            log.error("malformed reassignment request %s; dropping it", name)
            self.delete_znode(f"{zk.REASSIGNMENTS}/{name}")
            return None

    def answer_reassignments(
        self,
        name: str,
        targets: dict[tuple[str, int], list[int] | None],
        results: dict[tuple[str, int], tuple[int, str | None]],
    ) -> None:
        data = zk.encode_reassignment_request(targets, results)
        with contextlib.suppress(NoNodeError):
            self._wait(self._require().set_async(f"{zk.REASSIGNMENTS}/{name}", data), name)

    def forget_reassignment_request(self, name: str) -> None:
        self.delete_znode(f"{zk.REASSIGNMENTS}/{name}")

    def watch_reassignment_requests(
        self, callback: Callable[[frozenset[str]], None]
    ) -> WatchHandle:
        return self._watch(zk.REASSIGNMENTS, True, lambda c: callback(frozenset(c or ())))

    def watch_leader_elections(self, callback: Callable[[frozenset[str]], None]) -> WatchHandle:
        return self._watch(zk.LEADER_ELECTIONS, True, lambda c: callback(frozenset(c or ())))

    def notify_log_dir_event(
        self, broker_id: int, partitions: list[tuple[str, int]], reason: str
    ) -> str:
        """Tell the controller that these replicas of this broker are offline (a failed
        log directory) or corrupt; the notification's name."""
        path = self.create_sequential(
            zk.LOG_DIR_EVENT_NOTIFICATION + "/log_dir_event_",
            zk.encode_log_dir_event(broker_id, partitions, reason),
        )
        return path.rsplit("/", 1)[1]

    def log_dir_event(self, name: str) -> tuple[int, list[tuple[str, int]], str] | None:
        """(broker, partitions, reason); None when gone or malformed (then deleted)."""
        path = f"{zk.LOG_DIR_EVENT_NOTIFICATION}/{name}"
        got = self._get(path)
        if got is None:
            return None
        try:
            return zk.decode_log_dir_event(got[0])
        except zk.ZkLayoutError:
            log.error("malformed log dir event notification %s; dropping it", name)
            self.delete_znode(path)
            return None

    def delete_log_dir_event(self, name: str) -> None:
        self.delete_znode(f"{zk.LOG_DIR_EVENT_NOTIFICATION}/{name}")

    def watch_log_dir_events(self, callback: Callable[[frozenset[str]], None]) -> WatchHandle:
        return self._watch(
            zk.LOG_DIR_EVENT_NOTIFICATION, True, lambda c: callback(frozenset(c or ()))
        )

    def watch_controlled_shutdowns(self, callback: Callable[[frozenset[int]], None]) -> WatchHandle:
        """Ids of the brokers asking for a controlled shutdown, on every change."""

        def deliver(children: tuple[str, ...] | None) -> None:
            callback(frozenset(int(c) for c in children or () if c.isdigit()))

        return self._watch(zk.CONTROLLED_SHUTDOWN, True, deliver, dedupe=False)

    def watch_topic(
        self, name: str, callback: Callable[[TopicAssignment | None], None]
    ) -> WatchHandle:
        """The topic's assignment (configs as read at that moment; see watch_topic_configs)."""

        def deliver(value: tuple[bytes, int] | None) -> None:
            if value is None:
                callback(None)
                return
            try:
                config = self._get(zk.topic_config_path(name))
                callback(self._assignment(name, value[0], config[0] if config else None))
            except zk.ZkLayoutError:
                log.error("malformed znodes of topic %s", name)
            except ClusterStoreUnavailableError:
                watch.wait_for_connection()

        watch = self._watch(zk.topic_path(name), False, deliver)
        return watch

    def set_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        """Dynamic broker configs of a broker id or ``<default>``, then a change
        notification in ``/config/changes`` (as Kafka's ``AdminZkClient`` writes)."""
        client = self._require()
        path = zk.broker_config_path(entity)
        data = zk.encode_configs(configs)
        try:
            self._wait(client.set_async(path, data), "broker config")
        except NoNodeError:
            self._wait(client.create_async(path, data, makepath=True), "broker config")
        self.create_sequential(
            zk.CONFIG_CHANGES + "/config_change_", zk.encode_config_change(f"brokers/{entity}")
        )
        # Brokers follow their configs through a watch on the config znode, not
        # through these notifications, and a cluster of one has no reader of them
        # at all: the writer purges too, so they never pile up. The write is done:
        # a purge that fails now is left to the next one.
        try:
            self.purge_expired_notifications(zk.CONFIG_CHANGES)
        except ClusterStoreError as exc:
            log.debug("purging %s after a broker config write failed: %s", zk.CONFIG_CHANGES, exc)

    def watch_broker_configs(
        self, entity: str, callback: Callable[[dict[str, str]], None]
    ) -> WatchHandle:
        """The dynamic configs of ``entity`` on every change ({} while none)."""

        def deliver(value: tuple[bytes, int] | None) -> None:
            try:
                callback({} if value is None else zk.decode_configs(value[0]))
            except zk.ZkLayoutError:
                log.error("malformed dynamic configs of broker entity %s", entity)

        return self._watch(zk.broker_config_path(entity), False, deliver)

    def watch_topic_configs(
        self, name: str, callback: Callable[[dict[str, str] | None], None]
    ) -> WatchHandle:
        def deliver(value: tuple[bytes, int] | None) -> None:
            try:
                callback(None if value is None else zk.decode_configs(value[0]))
            except zk.ZkLayoutError:
                log.error("malformed config of topic %s", name)

        return self._watch(zk.topic_config_path(name), False, deliver)

    def watch_partition_state(
        self,
        topic: str,
        partition: int,
        callback: Callable[[tuple[str, int], PartitionState | None], None],
    ) -> WatchHandle:
        """``callback((topic, partition), state)`` on every new state (None: deleted).
        The partition is passed back so that one bound method serves every partition."""
        return self._arm_new(_PartitionStateWatch(self, (topic, partition), callback))

    # -- plain znodes (the security metadata of ``zk_security`` lives beside the cluster's) --

    def read_znode(self, path: str) -> tuple[bytes, int] | None:
        """(data, version), or None when the znode does not exist."""
        return self._get(path)

    def read_znodes(self, paths: Sequence[str]) -> list[tuple[bytes, Any] | None]:
        """Pipelined reads: (data, stat) per path, None where missing."""
        return self._get_many_with_stat(paths)

    def read_children(self, path: str) -> list[str]:
        return self._children(path)

    def write_znode(self, path: str, data: bytes, expected_version: int | None) -> bool:
        """Compare-and-set ``path`` (None: create it, with its parents).

        False when the compare-and-set lost (or the znode appeared/vanished
        meanwhile): re-read and try again.
        """
        client = self._require()
        try:
            if expected_version is None:
                self._wait(client.create_async(path, data, makepath=True), path)
            else:
                self._wait(client.set_async(path, data, expected_version), path)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        return True

    def create_sequential(self, prefix: str, data: bytes) -> str:
        """A persistent sequential znode ``<prefix><10 digits>``; returns its path."""
        client = self._require()
        return str(
            self._wait(client.create_async(prefix, data, makepath=True, sequence=True), prefix)
        )

    def create_ephemeral(self, path: str, data: bytes) -> bool:
        """An ephemeral znode of this session (parents created); False if it exists."""
        try:
            client = self._require()
            self._wait(client.create_async(path, data, ephemeral=True, makepath=True), path)
        except NodeExistsError:
            return False
        return True

    def delete_znode(self, path: str, expected_version: int = -1) -> bool:
        """Delete ``path`` (at ``expected_version``; -1: any); False if it was not deleted."""
        try:
            self._wait(self._require().delete_async(path, expected_version), path)
        except (NoNodeError, NotEmptyError, BadVersionError):
            return False
        return True

    def ensure_path(self, path: str) -> None:
        self._wait(self._require().ensure_path_async(path), path)

    def purge_expired_notifications(self, path: str) -> list[str]:
        """Delete the children of ``path`` older than ``notification_expiry_ms`` (by
        their ctime); the names deleted. Several brokers purge the same path: a
        notification already gone is not an error."""
        client = self._require()
        children = self._children(path)
        if not children:
            return []
        now_ms = int(self.wall_clock() * 1000)
        pending = [client.exists_async(f"{path}/{c}") for c in children]
        created: dict[str, int] = {}
        for child, result in zip(children, pending, strict=True):
            stat = self._wait(result, f"{path}/{child}")
            if stat is not None:
                created[child] = int(stat.ctime)
        doomed = expired_notifications(created, now_ms, self.notification_expiry_ms)
        deleted: list[str] = []
        for start in range(0, len(doomed), _PURGE_CHUNK):
            chunk = doomed[start : start + _PURGE_CHUNK]
            results = [client.delete_async(f"{path}/{c}") for c in chunk]
            for child, result in zip(chunk, results, strict=True):
                try:
                    self._wait(result, f"{path}/{child}")
                except NoNodeError:
                    continue  # purged by another broker meanwhile
                deleted.append(child)
        if deleted:
            log.debug("purged %d expired change notification(s) under %s", len(deleted), path)
        return deleted

    def watch_children(
        self, path: str, callback: Callable[[tuple[str, ...] | None], None]
    ) -> WatchHandle:
        """The sorted children of ``path`` on every change (None while it does not exist)."""
        return self._watch(path, True, callback)
