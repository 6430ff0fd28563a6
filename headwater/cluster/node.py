"""This broker's membership of a cluster: its ZooKeeper session and everything on it.

Start-up follows Kafka's ZooKeeper mode: connect (retrying while ZooKeeper
is unreachable, saying so), register ``/brokers/ids/<id>`` as an ephemeral
znode (refusing to start when another live broker holds the id), start the
cluster view (the watches every broker keeps), stand for controller, and
only then take up replica roles. A session that expires is re-established
by the store, which re-registers the broker; meanwhile leaders keep serving
``acks=1`` and refuse ISR changes (they fail in the store, not here).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path

from headwater.cluster.cluster_view import ClusterView
from headwater.cluster.controller import Controller
from headwater.cluster.local_zookeeper import LocalClusterStore
from headwater.cluster.replica_manager import ReplicaManager, ReplicationConfig
from headwater.cluster.store import (
    NO_LEADER,
    BrokerIdInUseError,
    BrokerRegistration,
    ClusterStoreError,
    ClusterStoreUnavailableError,
    TopicAssignment,
    ZkClusterStore,
)
from headwater.cluster.stray_replicas import (
    LocalReplica,
    MetadataSnapshot,
    StrayReplica,
    find_stray_replicas,
    topics_to_forget,
)
from headwater.log.hw_checkpoint import HIGH_WATERMARK_CHECKPOINT_FILE, HighWatermarkCheckpoint
from headwater.log.log_directory import LogDirectory
from headwater.log.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    inconsistency,
    read_meta_properties,
    write_meta_properties,
)

log = logging.getLogger(__name__)


class ClusterStartError(Exception):
    """The broker cannot join the cluster; the message says why."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's broker settings (Kafka's key names in the broker config)."""

    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: float = 300.0


@dataclass(frozen=True, slots=True)
class ControlledShutdownConfig:
    """``controlled.shutdown.*`` (Kafka's names and defaults)."""

    enable: bool = True
    max_retries: int = 3
    retry_backoff_ms: int = 5_000
    #: How long one attempt waits for the controller to act (Kafka: the request timeout).
    attempt_timeout_ms: int = 5_000


#: Longest wait for one ZooKeeper call or one stop step while stopping: a stopping
#: broker must never hang on ZooKeeper or the controller.
STOP_STEP_TIMEOUT_S = 10.0

#: How long a controlled shutdown trusts its watched view before it reads the
#: states it still waits on from ZooKeeper (then again at this interval).
FRESH_STATES_AFTER_S = 0.5


class ClusterNode:
    """Store, registration, controller, view and replica manager of one broker."""

    def __init__(
        self,
        broker_id: int,
        zookeeper_connect: str,
        logs: LogDirectory,
        data_dir: Path,
        *,
        session_timeout_ms: int,
        connect_timeout_ms: int,
        replication: ReplicationConfig,
        controller: ControllerConfig,
        rack: str | None = None,
    ) -> None:
        self.broker_id = broker_id
        #: ``broker.rack``, registered with the broker as Kafka's ZooKeeper mode did.
        self.rack = rack
        self.zookeeper_connect = zookeeper_connect
        self.connect_timeout_ms = connect_timeout_ms
        self.logs = logs
        self.data_dir = data_dir
        #: Without ``zookeeper.connect`` the broker is a cluster of one: the same
        #: controller, view and replica manager, on metadata kept in its data dir.
        self.is_local = not zookeeper_connect
        self.store: ZkClusterStore = (
            LocalClusterStore.in_dir(data_dir)
            if self.is_local
            else ZkClusterStore(zookeeper_connect, session_timeout_ms=session_timeout_ms)
        )
        self.view = ClusterView(self.store)
        self.controller = Controller(
            self.store,
            broker_id,
            unclean_leader_election_enable=controller.unclean_leader_election_enable,
            auto_leader_rebalance_enable=controller.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_s=controller.leader_imbalance_check_interval_seconds,
        )
        self.replicas = ReplicaManager(
            broker_id, logs, self.view, self.store, replication, data_dir=data_dir
        )
        if self.is_local:
            self.replicas.role_log_level = logging.DEBUG
        self.joined = False
        #: The thread deleting stray copies found at start (None: there were none).
        self.stray_deleter: threading.Thread | None = None

    async def start(
        self, host: str, port: int, endpoints: tuple[tuple[str, str, str, int], ...] = ()
    ) -> None:
        """Join: ``host:port`` is the default address, ``endpoints`` every listener's
        (name, security protocol, advertised host, port), as registered for peers
        and clients."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self.connect_timeout_ms / 1000
        while True:
            try:
                await loop.run_in_executor(None, self.store.start, 10.0)
                break
            except ClusterStoreUnavailableError as exc:
                if time.monotonic() >= deadline:
                    raise ClusterStartError(
                        f"ZooKeeper at {self.zookeeper_connect} is unreachable: {exc}"
                    ) from exc
                log.warning(
                    "ZooKeeper at %s is unreachable (%s); retrying", self.zookeeper_connect, exc
                )
                await asyncio.sleep(1.0)
        try:
            await loop.run_in_executor(None, self._check_data_dir_identity)
        except ClusterStartError:
            await loop.run_in_executor(None, self.store.close)
            raise
        registration = BrokerRegistration(
            self.broker_id, host, port, self.rack, endpoints=endpoints
        )
        try:
            # A broker restarted right after a kill -9 finds its own old registration
            # until that session expires: wait for it rather than refuse at once.
            await loop.run_in_executor(
                None,
                lambda: self.store.register_broker(
                    registration, wait_s=self.store.session_timeout_ms / 1000 + 2
                ),
            )
        except BrokerIdInUseError as exc:
            await loop.run_in_executor(None, self.store.close)
            raise ClusterStartError(
                f"broker.id {self.broker_id} is already registered by another live broker "
                f"in ZooKeeper ({self.zookeeper_connect}); refusing to start"
            ) from exc
        if self.is_local:
            await loop.run_in_executor(None, self._adopt_local_topics)
        await self.view.start()
        # The view's snapshot is the full metadata: copy it here, on the loop.
        known = dict(self.view.topics)
        await loop.run_in_executor(None, self._move_stray_replicas, known)
        self._delete_strays_in_background()
        await loop.run_in_executor(None, self.controller.start)  # it blocks: its own thread
        # The broker starts ``self.replicas`` itself, once its group service is
        # ready to hear about leadership of the offsets topic.
        self.joined = True
        where = (
            "a cluster of one (metadata in the data directory)"
            if self.is_local
            else (f"the cluster at {self.zookeeper_connect}")
        )
        log.info("joined %s as broker %d", where, self.broker_id)

    async def leading_everything(self, timeout_s: float) -> bool:
        """A cluster of one: wait until this broker leads every partition of its
        metadata (the controller elects on its own thread), so that a restarted
        single broker answers its first requests as leader. False on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            pending = [
                (name, p)
                for name, assignment in tuple(self.view.topics.items())
                for p in assignment.replicas
                if self.replicas.serving_error(name, p)
            ]
            if not pending:
                return True
            if time.monotonic() >= deadline:
                log.warning("%d partition(s) still without a leader: %s", len(pending),
                            _names(pending))  # fmt: skip
                return False
            await asyncio.sleep(0.01)

    def _adopt_local_topics(self) -> None:
        """A cluster of one: topics found in the data directory but not in its metadata
        (a data directory from before the metadata was kept there, or a snapshot that
        missed a last change before a crash) join it with their id, partitions and
        configs, led here. The data directory is the truth for what exists. A topic
        the metadata holds under another id is not this one: its local copy is a
        stray (see ``_move_stray_replicas``), never merged into the other."""
        for name, info in sorted(self.logs.topics().items()):
            assignment = self.store.topic(name)
            if assignment is None:
                self.store.create_topic(
                    name,
                    info.topic_id,
                    {p: [self.broker_id] for p in range(info.num_partitions)},
                    dict(info.configs),
                )
                log.info("topic %s (%d partitions) joined the metadata", name, info.num_partitions)
            elif (
                assignment.topic_id == info.topic_id
                and len(assignment.replicas) < info.num_partitions
            ):
                self.store.add_partitions(
                    name,
                    {
                        p: [self.broker_id]
                        for p in range(len(assignment.replicas), info.num_partitions)
                    },
                )

    def _check_data_dir_identity(self) -> None:
        """Refuse a data directory of another cluster or broker (``meta.properties``).

        Kafka's check, and what makes deleting stray replicas safe: a broker
        pointed at the wrong ZooKeeper chroot, or given another broker.id,
        would otherwise take every local copy for a stray. A cluster of one
        keeps its metadata in the directory itself, so only its broker.id is
        compared. A directory without the file gets one.
        """
        proposed = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        try:
            cluster_id = self.store.cluster_id(proposed)
        except ClusterStoreError as exc:
            raise ClusterStartError(f"cannot check the data directory's cluster: {exc}") from exc
        # Each of several data directories (JBOD) has its own file, as in Kafka.
        extras = [e.path for e in self.logs.extra if e.offline is None]  # failed: skipped
        for directory in [self.data_dir, *extras]:
            try:
                stored = read_meta_properties(directory)
            except MetaPropertiesError as exc:
                raise ClusterStartError(
                    f"cannot check the data directory's cluster: {exc}"
                ) from exc
            if stored is None:
                write_meta_properties(directory, MetaProperties(self.broker_id, cluster_id))
                continue
            why = inconsistency(stored, self.broker_id, None if self.is_local else cluster_id)
            if why is not None:
                raise ClusterStartError(f"data directory {directory}: {why}; refusing to start")

    # -- stray replicas ------------------------------------------------------------------

    def _move_stray_replicas(
        self, topics: Mapping[str, TopicAssignment] | None = None
    ) -> list[StrayReplica]:
        """Move aside every local copy the full metadata no longer wants here.

        Run once at start, after joining (and, on a cluster of one, after the
        adoption above), before any replica role is taken: a copy of a deleted
        or re-created topic, or of a partition reassigned away while this
        broker was down, is renamed ``<topic>-<p>.<uuid>-stray`` (one log line
        each), so that nothing serves, adopts or appends to it, and is deleted
        in the background. ``topics``: the view's snapshot (None: read them).
        A listed topic missing from it (its znodes unreadable, or created
        since) keeps its copies; when the metadata cannot be read, nothing is
        touched.
        """
        try:
            names = self.store.topics()
            if topics is None:
                topics = self.store.topic_assignments(names)
        except ClusterStoreError as exc:
            log.warning("cannot read the cluster metadata (%s): stray replicas are "
                        "looked for at the next start", exc)  # fmt: skip
            return []
        metadata = MetadataSnapshot(topics, unreadable=frozenset(names) - set(topics))
        local = [LocalReplica(t, p, topic_id) for t, p, topic_id in self.logs.partition_dirs()]
        strays = find_stray_replicas(
            local, metadata, self.broker_id, adopts_unknown_topics=self.is_local
        )
        for stray in strays:
            try:
                moved = self.logs.move_stray(stray.topic, stray.partition)
            except OSError as exc:
                log.error("stray replica %s-%d (%s) could not be moved aside: %s",
                          stray.topic, stray.partition, stray.reason, exc)  # fmt: skip
                continue
            log.warning("stray replica %s-%d: %s; moved to %s for deletion",
                        stray.topic, stray.partition, stray.reason, moved.name)  # fmt: skip
        registry = {name: info.topic_id for name, info in self.logs.topics().items()}
        self.logs.forget_topics(
            topics_to_forget(registry, metadata, adopts_unknown_topics=self.is_local)
        )
        if strays:
            self._forget_high_watermarks({(s.topic, s.partition) for s in strays})
        return strays

    def _forget_high_watermarks(self, keys: set[tuple[str, int]]) -> None:
        """Drop the strays' entries from ``replication-offset-checkpoint`` (as Kafka's
        asyncDelete updates its checkpoints): a re-created topic's new copy must not
        start from the old incarnation's high watermark."""
        checkpoint = HighWatermarkCheckpoint(self.data_dir / HIGH_WATERMARK_CHECKPOINT_FILE)
        marks = checkpoint.read()
        if keys & set(marks):
            checkpoint.write({k: v for k, v in marks.items() if k not in keys})

    def _delete_strays_in_background(self) -> threading.Thread | None:
        """Delete the moved-aside copies (this start's, and any a crash left) on a
        thread of their own: a large copy must not hold up the start."""
        if not self.logs.stray_dirs():
            return None

        def delete() -> None:
            try:
                deleted = self.logs.delete_stray_dirs()
            except OSError as exc:
                log.error("deleting stray replica directories failed: %s", exc)
                return
            log.info("deleted %d stray replica director%s", deleted,
                     "y" if deleted == 1 else "ies")  # fmt: skip

        worker = threading.Thread(target=delete, name="hw-stray-delete", daemon=True)
        worker.start()
        self.stray_deleter = worker
        return worker

    # -- controlled shutdown ---------------------------------------------------------

    def leaderships_to_move(
        self, stopping: frozenset[int] = frozenset()
    ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """What a controlled shutdown still waits for, from this broker's view:
        (partitions led here, or whose ISR still holds this broker, that the controller
        could change; partitions led here that no other live ISR member can take).
        Brokers in ``stopping`` (in controlled shutdown too) cannot take anything."""
        me = self.broker_id
        live = set(self.view.brokers) - set(stopping)
        topics = self.view.topics
        movable: list[tuple[str, int]] = []
        stuck: list[tuple[str, int]] = []
        for key, state in self.view.partition_states.items():
            assignment = topics.get(key[0])
            replicas = assignment.replicas.get(key[1], []) if assignment else []
            if len(replicas) < 2:
                continue  # a single replica has nowhere to go (Kafka skips these too)
            others = [r for r in state.isr if r != me and r in live]
            if state.leader == me:
                (movable if others else stuck).append(key)
            elif me in state.isr and state.leader != NO_LEADER and others:
                movable.append(key)
        return sorted(movable), sorted(stuck)

    async def _stopping_brokers(self) -> frozenset[int]:
        """Other brokers in controlled shutdown now (brokers stopped all at once would
        otherwise each wait out every retry for the others to take over)."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(STOP_STEP_TIMEOUT_S):
                stopping = await loop.run_in_executor(None, self.store.controlled_shutdowns)
        except (ClusterStoreError, TimeoutError):
            return frozenset()
        return frozenset(stopping) - {self.broker_id}

    def _any_other_replica_staying(
        self, keys: list[tuple[str, int]], stopping: frozenset[int]
    ) -> bool:
        """Whether some other replica of these partitions is alive and not stopping too."""
        live = set(self.view.brokers) - {self.broker_id} - set(stopping)
        topics = self.view.topics
        for topic, partition in keys:
            assignment = topics.get(topic)
            if assignment is not None and live & set(assignment.replicas.get(partition, [])):
                return True
        return False

    async def _read_fresh_states(self, keys: list[tuple[str, int]]) -> None:
        """Read the states a controlled shutdown waits on from ZooKeeper itself.

        The controller's decision is what counts (Kafka's broker reads it in the
        ControlledShutdown response, not in its metadata cache). The view
        follows ZooKeeper through watches; should one fall behind, the
        shutdown would otherwise wait out every attempt for a change the
        controller had already written.
        """
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(STOP_STEP_TIMEOUT_S):
                fresh = await loop.run_in_executor(None, self.store.partition_states, keys)
        except (ClusterStoreError, TimeoutError):
            return
        behind = self.view.refresh_partition_states(fresh)
        if behind:
            log.warning(
                "controlled shutdown: this broker's view of %d partition(s) was behind "
                "ZooKeeper: %s; taking the stored states",
                len(behind), _names(sorted(behind)),
            )  # fmt: skip

    async def controlled_shutdown(self, config: ControlledShutdownConfig) -> bool:
        """Kafka's controlled shutdown through ZooKeeper; True when nothing is left here.

        Stops following (so no leader takes this broker back into an ISR), then
        asks the controller to move every leadership away and take this broker
        out of every ISR, and waits until its view shows it done. Each attempt
        waits ``attempt_timeout_ms``, then ``retry.backoff.ms`` before the next;
        after ``max.retries`` the broker stops anyway, saying what was left.
        Bounded throughout: ZooKeeper calls time out, nothing waits forever.
        """
        if not self.joined:
            return True
        if self.is_local:
            return True  # a cluster of one: no other broker could take anything
        loop = asyncio.get_running_loop()
        self.replicas.stop_following()
        attempts = max(1, config.max_retries)
        started = time.monotonic()
        movable, stuck = self.leaderships_to_move()
        stopping: frozenset[int] = frozenset()
        for attempt in range(1, attempts + 1):
            log.info(
                "controlled shutdown (attempt %d of %d): asking the controller to move "
                "%d partition(s) away from broker %d",
                attempt, attempts, len(movable) + len(stuck), self.broker_id,
            )  # fmt: skip
            try:
                async with asyncio.timeout(STOP_STEP_TIMEOUT_S):
                    await loop.run_in_executor(
                        None, self.store.request_controlled_shutdown, self.broker_id
                    )
            except (ClusterStoreError, TimeoutError) as exc:
                log.warning("controlled shutdown: cannot reach ZooKeeper (%s)", exc)
            else:
                stopping = await self._stopping_brokers()
                deadline = time.monotonic() + config.attempt_timeout_ms / 1000
                fresh_read_at = time.monotonic() + FRESH_STATES_AFTER_S
                while time.monotonic() < deadline:
                    movable, stuck = self.leaderships_to_move(stopping)
                    if not movable and not stuck:
                        log.info(
                            "controlled shutdown succeeded in %.0f ms",
                            (time.monotonic() - started) * 1000,
                        )
                        return True
                    if not movable and stuck:
                        break  # the controller did what it could
                    if time.monotonic() >= fresh_read_at:
                        await self._read_fresh_states(movable + stuck)
                        fresh_read_at = time.monotonic() + FRESH_STATES_AFTER_S
                        continue
                    await asyncio.sleep(0.01)
            movable, stuck = self.leaderships_to_move(stopping)
            if not movable and not stuck:
                return True
            if stuck:
                log.warning(
                    "controlled shutdown: %d partition(s) have no other in-sync replica to "
                    "lead them: %s", len(stuck), _names(stuck),
                )  # fmt: skip
                if not movable and not self._any_other_replica_staying(stuck, stopping):
                    log.warning(
                        "controlled shutdown: no other replica of them is alive and staying "
                        "(the others are gone or stopping too), so retrying cannot help; "
                        "stopping now"
                    )
                    return False
            if movable:
                log.warning(
                    "controlled shutdown: the controller has not moved %d partition(s) yet: %s",
                    len(movable), _names(movable),
                )  # fmt: skip
            if attempt < attempts:
                await asyncio.sleep(config.retry_backoff_ms / 1000)
        log.warning(
            "controlled shutdown failed after %d attempt(s); stopping anyway "
            "(the controller moves what is left once this broker's session ends)",
            attempts,
        )
        return False

    async def stop(self) -> None:
        """Leave the cluster; safe after a partial start. Every step is bounded, and a
        step that takes long is named in the log (a stopping broker never hangs)."""
        loop = asyncio.get_running_loop()
        await _bounded(self.replicas.stop(), "the replica manager")
        for step in (self.controller.stop, self.view.stop, self.store.close):
            name = getattr(step, "__qualname__", str(step))
            await _bounded(loop.run_in_executor(None, step), name)


def _names(keys: list[tuple[str, int]], limit: int = 10) -> str:
    shown = ", ".join(f"{t}-{p}" for t, p in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


async def _bounded(step: Awaitable[object], what: str) -> None:
    """Await ``step`` for at most STOP_STEP_TIMEOUT_S, logging when it is slow or stuck."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=2.0)
    if not done:
        log.warning("stopping: still waiting for %s", what)
        done, _ = await asyncio.wait({task}, timeout=STOP_STEP_TIMEOUT_S - 2.0)
    if not done:
        log.error("stopping: %s did not finish in %.0f s; going on without it", what,
                  STOP_STEP_TIMEOUT_S)  # fmt: skip
        task.cancel()
        return
    exc = task.exception()
    if exc is not None:
        log.error("stopping %s failed: %s", what, exc, exc_info=exc)
