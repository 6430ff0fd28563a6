"""The replica manager: this broker's part in every partition it replicates.

Kafka's ``ReplicaManager`` for the ZooKeeper era, on asyncio. ZooKeeper is
the source of truth for who leads each partition (the controller writes it,
the :class:`~headwater.cluster.cluster_view.ClusterView` watches it); this
object turns each change into a role for the local replica:

* **leader**: stamp the new leader epoch on appends, track what each
  follower has (from its fetches), move the high watermark to the smallest
  log end of the ISR, complete ``acks=all`` produces waiting in the produce
  purgatory, shrink the ISR when a follower lags past
  ``replica.lag.time.max.ms`` and expand it when one catches up. ISR changes
  are conditional ZooKeeper writes on the partition state's version, as in
  Kafka, so a leader that lost a race with the controller learns the new
  state from the watch instead of overwriting it. Without ZooKeeper a leader
  keeps serving (``acks=1`` works) but changes no ISR.
* **follower**: hand the partition to the replica fetcher of its leader.

Brokers learn leadership from ZooKeeper watches rather than from the
controller's LeaderAndIsr requests: fewer moving parts, the same ordering
(ZooKeeper delivers a session's watch events in order), and the controller
epoch in each state still fences a stale controller.

Size: Kafka's ReplicaManager is one object for the same reason: the roles of
every local replica, the ISR proposals, the high watermark, the produce waits
and session-loss handling share one partition table and one ordering of state
changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headwater.cluster.cluster_view import ClusterChange, ClusterView
from headwater.cluster.fetcher_assignment import fetcher_index, resize_plan
from headwater.cluster.hw_checkpoint_tracker import HighWatermarkTracker
from headwater.cluster.inter_broker import InterBrokerConnector
from headwater.cluster.isr_watch import IsrWatch
from headwater.cluster.partition import PartitionReplica, ReplicaAssignment
from headwater.cluster.process_pulse import ProcessPulse
from headwater.cluster.produce_purgatory import ProducePurgatory, await_acks
from headwater.cluster.replica_fetcher import FetcherConfig, ReplicaFetcher
from headwater.cluster.replication_quota import ReplicationQuotaConfig, ReplicationThrottles
from headwater.cluster.stale_leader import LedPartition, StaleLeaderGuard
from headwater.cluster.store import (
    ClusterStore,
    ClusterStoreUnavailableError,
    PartitionState,
    SessionEvent,
)
from headwater.fetch.replica_selector import (
    NO_PREFERRED_REPLICA,
    ReplicaView,
    preferred_read_replica,
)
from headwater.log.errors import KafkaApiError
from headwater.log.hw_checkpoint import DirectoryCheckpoints
from headwater.log.log import AppendResult, Log, LogEvent, LogListener
from headwater.log.log_directory import LogDirectory
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_types import PartitionData, PartitionFetch

log = logging.getLogger(__name__)


PartitionKey = tuple[str, int]
LeadershipListener = Callable[[str, int, bool], None]
"""Called with (topic, partition, is_leader) when this broker gains or loses a leadership."""
OutOfSyncListener = Callable[[str, int], None]
"""Called with (topic, partition) for a led partition with an assigned replica outside its ISR."""

HW_CHECKPOINT_FILE = "replication-offset-checkpoint"
#: Longest run of partition-state applications between two turns of the event loop.
APPLY_SLICE_S = 0.010
#: Tries at telling the controller that a log directory failed (backing off to 2 s).
LOG_DIR_NOTIFY_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    replica_lag_time_max_ms: int = 30_000
    min_insync_replicas: int = 1
    num_replica_fetchers: int = 1
    high_watermark_checkpoint_interval_ms: int = 5_000
    fetcher: FetcherConfig = field(default_factory=FetcherConfig)
    throttles: ReplicationQuotaConfig = field(default_factory=ReplicationQuotaConfig)
    #: ``replica.selector.class`` (KIP-392): "rack-aware", or None to keep consumers on leaders.
    replica_selector: str | None = None


class ReplicaManager:
    """Leader and follower roles of the local replicas, driven by the cluster view."""

    def __init__(
        self,
        local_id: int,
        logs: LogDirectory,
        view: ClusterView,
        store: ClusterStore,
        config: ReplicationConfig,
        *,
        data_dir: Path,
    ) -> None:
        self.local_id = local_id
        self.logs = logs
        self.view = view
        self._isr_ineligible = IsrIneligible(view)
        self.store = store
        self.config = config
        self.purgatory = ProducePurgatory()
        self.replicas: dict[PartitionKey, PartitionReplica] = {}
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        #: Fetchers per leader (``num.replica.fetchers``, dynamic: see ``resize_fetchers``).
        self.num_replica_fetchers = config.num_replica_fetchers
        self.leadership_listeners: list[LeadershipListener] = []
        #: Told of led partitions with a replica outside the ISR, so that the
        #: follower's fetch session reads them again (see ``_nudge_out_of_sync``).
        self.out_of_sync_listeners: list[OutOfSyncListener] = []
        #: How this broker reaches its peers (replica fetchers, transaction markers).
        self.connector = InterBrokerConnector(local_id, self._address_of)
        #: KIP-73 replication throttles, both sides (the fetch handler applies the leader's).
        self.throttles = ReplicationThrottles(local_id, self._topic_configs, config.throttles)
        #: The first directory's checkpoint lives in ``data_dir`` (the same directory
        #: for a broker; unit tests keep their logs in a subdirectory of it).
        self._checkpoint_home = data_dir
        self._checkpoint = DirectoryCheckpoints(
            [data_dir, *(d for d in logs.dirs if d != logs.path)],
            self._checkpoint_dir,
            self._checkpoint_dir_offline,
        )
        self._checkpointed: dict[PartitionKey, int] = {}
        #: The checkpoint's content from log events: an idle tick reads no HW.
        self._hw_tracker = HighWatermarkTracker()
        #: The led partitions the next ISR check looks at: an idle round visits none.
        self._isr_watch = IsrWatch()
        self._tasks: list[asyncio.Task[None]] = []
        self._isr_writes: set[asyncio.Future[Any]] = set()
        #: ISR changes proposed in this turn of the loop, written together at its end.
        self._isr_proposals: list[_IsrProposal] = []
        self._stopping: set[asyncio.Future[None]] = set()
        #: Partitions whose state is still to be applied, in arrival order, once each.
        self._queue: deque[PartitionKey] = deque()
        self._queued: set[PartitionKey] = set()
        self._applier: asyncio.Task[None] | None = None
        self._append_listeners: dict[PartitionKey, LogListener] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0
        #: Controlled shutdown under way: follow no leader (see ``stop_following``).
        self.following_stopped = False
        #: Counts ZooKeeper session losses and restorations: a refresh of the
        #: partition states belongs to one restored session.
        self._session_generation = 0
        #: From a session loss until the states were read again on the new
        #: session: the view's cached states may be stale, so none makes this
        #: broker a leader.
        self._awaiting_fresh_states = False
        self._refresher: asyncio.Task[None] | None = None
        #: Failed-log-directory notifications still being sent (retried; see
        #: ``on_log_dir_failure``), cancelled by ``stop``.
        self._notifications: set[asyncio.Task[None]] = set()
        #: Replicas found on a directory offline since the start, not yet reported.
        self._offline_pending: set[PartitionKey] = set()
        #: DeleteRecords waiting for the followers' log starts: (offset, future) per partition.
        self._low_watermark_waiters: dict[PartitionKey, list[tuple[int, asyncio.Future[int]]]] = {}
        #: Each partition's role change is logged at this level (a cluster of one,
        #: which leads every partition from the start, says it at DEBUG).
        self.role_log_level = logging.INFO
        #: Stepping down without ZooKeeper (issue 31; ``headwater.cluster.stale_leader``).
        self.stale_leader = StaleLeaderGuard(
            int(getattr(store, "session_timeout_ms", 18_000)), config.replica_lag_time_max_ms
        )
        #: Tells a busy event loop from a paused process (``check_loop_stall``).
        self.process_pulse = ProcessPulse(
            max(50, min(500, self.stale_leader.stall_threshold_ms // 10))
        )
        #: When this broker became leader of each partition it leads (its epoch's start).
        self._led_since: dict[PartitionKey, int] = {}
        #: Partitions given up by the rule above (a metric and the tests read it).
        self.stale_step_downs = 0

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self._checkpointed = self._checkpoint.read()
        self._hw_tracker.seed(self._checkpointed)
        self.view.on_change(self._on_change)
        self.view.on_session(self._on_session)
        self._apply_all()
        await self.settled()
        interval = max(self.config.replica_lag_time_max_ms / 2, 100) / 1000
        self._tasks.append(asyncio.create_task(self._every(interval, self._check_isr), name="isr"))
        guard = self.stale_leader
        self.store.add_session_listener(self.process_pulse.session_event)
        self.process_pulse.start()
        guard.alive(_now_ms())  # stalls are measured from here
        tick_s = min(guard.session_timeout_ms, guard.replica_lag_time_max_ms) / 4000
        self._tasks.append(
            asyncio.create_task(
                self._every(min(max(tick_s, 0.1), 1.0), self._tick_stale_leadership),
                name="stale-leader",
            )
        )
        self._tasks.append(
            asyncio.create_task(
                self._every(
                    self.config.high_watermark_checkpoint_interval_ms / 1000,
                    self.checkpoint_high_watermarks,
                ),
                name="hw-checkpoint",
            )
        )

    async def stop(self) -> None:
        for notification in list(self._notifications):
            notification.cancel()
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresher
        if self._applier is not None:
            self._applier.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._applier
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self.process_pulse.stop()
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        self.purgatory.fail_all()
        self.checkpoint_high_watermarks()

    def stop_following(self) -> None:
        """Controlled shutdown: fetch from no leader from now on (Kafka's StopReplica).

        A stopping broker that kept fetching would be taken back into the ISRs
        the controller just took it out of, and acks=all writes would then wait
        ``replica.lag.time.max.ms`` for it once it is gone.
        """
        self.following_stopped = True
        for key in [k for k, r in self.replicas.items() if not r.is_leader]:
            self._unfollow(key)

    @staticmethod
    async def _every(interval_s: float, action: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                action()
            except Exception:
                log.exception("%s failed; will retry", getattr(action, "__name__", action))

    def _checkpoint_dir(self, topic: str, partition: int) -> str:
        """The directory whose checkpoint lists the partition: its own."""
        where = self.logs.dir_of(topic, partition)
        return str(self._checkpoint_home) if where == str(self.logs.path) else where

    def _checkpoint_dir_offline(self, directory: str) -> str | None:
        if directory == str(self._checkpoint_home):
            directory = str(self.logs.path)
        return self.logs.dir_offline(directory)

    def checkpoint_high_watermarks(self) -> None:
        """Write every replica's HW to its directory's ``replication-offset-checkpoint``
        when one moved (one file per data directory, as Kafka; see DirectoryCheckpoints)."""
        current = self._hw_tracker.due()
        if current is None:
            return
        failed = self._checkpoint.write(current)
        for directory, exc in failed:  # a full or failing disk: try again next interval
            log.warning("cannot write the high-watermark checkpoint of %s: %s", directory, exc)
        if failed:
            return
        self._hw_tracker.written()
        self._checkpointed = current

    # -- the cluster view drives roles ----------------------------------------------------

    def _apply_all(self) -> None:
        for name in list(self.view.topics):
            self._ensure_local_topic(name)
        self._apply_partitions(list(self.view.partition_states))

    def _on_change(self, change: ClusterChange) -> None:
        for name in change.topics_removed:
            self._drop_topic(name)
        for name in change.topics_added:
            self._ensure_local_topic(name)
        for name in change.configs_changed:
            self._apply_topic_configs(name)
        keys = set(change.partitions_changed)
        for name in change.topics_added:
            assignment = self.view.topics.get(name)
            if assignment is not None:
                keys.update((name, p) for p in assignment.replicas)
        self._apply_partitions(sorted(keys))

    def _on_session(self, event: SessionEvent) -> None:
        """A lost ZooKeeper session means the controller has given our leaderships away.

        Kafka's rule: a broker whose session expired stops acting as leader
        until ZooKeeper tells it otherwise. Its partitions answer
        NOT_LEADER_OR_FOLLOWER (clients move), waiting ``acks=all`` produces
        fail, groups unload; once the session is restored (the store has
        re-registered the broker) the partition states are read again from
        ZooKeeper and every partition takes its role afresh from them (see
        :meth:`_refresh_states`). A merely *suspended* connection changes
        nothing: leaders keep serving, ISR writes fail until it is back.
        """
        if event in (SessionEvent.SUSPENDED, SessionEvent.LOST):
            self.stale_leader.zookeeper_lost(_now_ms())
        else:
            self.stale_leader.zookeeper_back()
        if event in (SessionEvent.LOST, SessionEvent.RESTORED):
            self._session_generation += 1
        if event is SessionEvent.LOST:
            self._awaiting_fresh_states = True
            for replica in self.replicas.values():
                if replica.is_leader:
                    log.warning(
                        "ZooKeeper session lost: no longer leading %s-%d until told again",
                        replica.topic,
                        replica.partition,
                    )
                    self._step_down(replica)
        elif event is SessionEvent.RECONNECTED and self._awaiting_fresh_states:
            # Stepped down by the clock (``check_stale_leadership``) on a session the
            # server kept after all: read the states again before leading anything.
            self._session_generation += 1
            if self._refresher is not None:
                self._refresher.cancel()
            self._refresher = asyncio.get_running_loop().create_task(
                self._refresh_states(self._session_generation), name="refresh-partition-states"
            )
        elif event is SessionEvent.RESTORED:
            self._awaiting_fresh_states = True
            if self._refresher is not None:
                self._refresher.cancel()
            self._refresher = asyncio.get_running_loop().create_task(
                self._refresh_states(self._session_generation), name="refresh-partition-states"
            )

    def _step_down(self, replica: PartitionReplica) -> None:
        """Stop acting as the partition's leader until ZooKeeper says otherwise."""
        self._unwatch_appends(replica)
        self.purgatory.fail(replica.key)
        replica.leader = -1
        replica.followers = {}
        self._led_since.pop(replica.key, None)
        self._check_low_watermark(replica)
        self._tell_leadership(replica.topic, replica.partition, False)

    def _tick_stale_leadership(self) -> None:
        self.check_loop_stall()
        self.check_stale_leadership()

    def check_loop_stall(self, now_ms: int | None = None) -> list[PartitionKey]:
        """Called for every request and tick: after a stall of the whole process that
        may have cost the ZooKeeper session (``StaleLeaderGuard.alive``), step down from
        every led partition with other replicas and read the states again before
        leading any, as after a session loss. Returns the partitions given up."""
        if not self._tasks:
            return []  # not started: nothing is led yet
        now = _now_ms() if now_ms is None else now_ms
        process_gap_ms, session_troubled = self.process_pulse.take(now)
        session_troubled = session_troubled or not self.store.connected
        guard = self.stale_leader
        stalled_ms = guard.alive(now, process_gap_ms, session_troubled)
        if guard.busy_stall_ms is not None:
            log.warning(
                "the event loop was blocked for %d ms, while the process ran (longest "
                "pause %d ms) and ZooKeeper stayed connected: the session held, nothing "
                "steps down",
                guard.busy_stall_ms,
                process_gap_ms,
            )
            guard.busy_stall_ms = None
        if stalled_ms is None:
            return []
        given_up = [
            key
            for key, replica in self.replicas.items()
            if replica.is_leader and any(r != self.local_id for r in replica.replicas)
        ]
        log.warning(
            "the process was stalled for %d ms (the ZooKeeper session may have expired "
            "meanwhile): stepping down from %d partition(s) until their states are read again",
            stalled_ms,
            len(given_up),
        )
        if not given_up:
            return []
        self._awaiting_fresh_states = True
        for key in given_up:
            self._step_down(self.replicas[key])
        self._session_generation += 1
        if self._refresher is not None:
            self._refresher.cancel()
        self._refresher = asyncio.get_running_loop().create_task(
            self._refresh_states(self._session_generation), name="refresh-partition-states"
        )
        return given_up

    def check_stale_leadership(self, now_ms: int | None = None) -> list[PartitionKey]:
        """Step down from every led partition the stale-leader rule gives up (issue 31):
        without ZooKeeper past the session timeout, and no follower fetching from here
        for ``replica.lag.time.max.ms``. Until the states are read again on a ZooKeeper
        session, those partitions answer NOT_LEADER_OR_FOLLOWER. Returns them."""
        now = _now_ms() if now_ms is None else now_ms
        guard = self.stale_leader
        if not guard.without_zookeeper_too_long(now):
            return []
        led = {
            key: LedPartition(
                tuple(r for r in replica.replicas if r != self.local_id),
                self._led_since.get(key, now),
            )
            for key, replica in self.replicas.items()
            if replica.is_leader
        }
        stale = guard.tick(now, led)
        if not stale:
            return []
        self._awaiting_fresh_states = True
        since = guard.without_zookeeper_since_ms or now
        for key in stale:
            replica = self.replicas[key]
            log.warning(
                "stepping down as leader of %s-%d (epoch %d): without ZooKeeper for %d ms "
                "(session timeout %d ms) and no follower fetched for %d ms",
                key[0], key[1], replica.leader_epoch, now - since,
                guard.session_timeout_ms, guard.replica_lag_time_max_ms,
            )  # fmt: skip
            self._step_down(replica)
        self.stale_step_downs += len(stale)
        return stale

    async def _refresh_states(self, generation: int) -> None:
        """Read this broker's partition states on the restored session, then take roles.

        The view's snapshot is what the watches delivered before the session
        was lost: while this broker was paused or cut off, the controller
        elected other leaders at higher epochs, and the re-armed watches
        deliver those only some time after the session is back. Taking roles
        from the snapshot meanwhile made a deposed leader lead again at its
        old epoch, accept writes and truncate them moments later. So, as
        Kafka's broker waits for the controller's LeaderAndIsr, this one reads
        the current states first; until then its partitions answer
        NOT_LEADER_OR_FOLLOWER and its coordinators stay unloaded.
        """
        loop = asyncio.get_running_loop()
        keys = [
            (name, partition)
            for name, assignment in self.view.topics.items()
            for partition, replicas in assignment.replicas.items()
            if self.local_id in replicas
        ]
        delay = 0.2
        while generation == self._session_generation:
            try:
                fresh = await loop.run_in_executor(None, self.store.partition_states, keys)
                break
            except Exception as exc:  # ZooKeeper went away again: retry on this session
                log.warning("cannot read partition states after the session was restored: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        else:
            return  # a newer session event took over
        if generation != self._session_generation:
            return
        self.view.refresh_partition_states(fresh)
        self._awaiting_fresh_states = False
        log.info("read %d partition states after the ZooKeeper session was restored", len(fresh))
        self._apply_all()

    def _ensure_local_topic(self, name: str) -> None:
        """Mirror a ZooKeeper topic in the local registry (same id, same partition count)."""
        assignment = self.view.topics.get(name)
        if assignment is None:
            return
        local = self.logs.topics().get(name)
        count = len(assignment.replicas)
        if local is not None and local.topic_id != assignment.topic_id:
            # Deleted and re-created while we were away: the old data is another topic's.
            log.info("topic %s was re-created; dropping the local copy of the old one", name)
            self._drop_topic(name)
            local = None
        if local is None:
            self.logs.create_topic(
                name, count, dict(assignment.configs), topic_id=assignment.topic_id
            )
        else:
            if count > local.num_partitions:
                self.logs.create_partitions(name, count)
            self._apply_topic_configs(name)  # changed while this broker was away

    def _apply_topic_configs(self, name: str) -> None:
        """A topic's overrides changed in ZooKeeper: the local logs follow at once."""
        assignment = self.view.topics.get(name)
        local = self.logs.topics().get(name)
        if assignment is None or local is None or local.configs == assignment.configs:
            return
        try:
            self.logs.alter_topic_configs(name, dict(assignment.configs))
        except (ValueError, KafkaApiError) as exc:  # a bad value from another tool: keep ours
            log.error("topic %s: ignoring ZooKeeper configs %s: %s", name, assignment.configs, exc)
            return
        log.info("topic %s configs are now %s (from ZooKeeper)", name, assignment.configs)

    def _drop_topic(self, name: str) -> None:
        for key in [k for k in self.replicas if k[0] == name]:
            self._remove_replica(key)
        if name in self.logs.topics():
            self.logs.delete_topic(name)
            log.info("deleted local replicas of topic %s", name)

    def _apply_partitions(self, keys: Iterable[PartitionKey]) -> None:
        """Queue partitions whose state changed; roles are taken in time slices.

        A topic of 10,000 partitions changes 10,000 states at once. Applying
        them in one go would hold the event loop (and the GIL: kazoo's
        heartbeat thread with it, so the ZooKeeper session could expire) for
        seconds; slices of ``APPLY_SLICE_S`` leave room between them. The
        latest state is read when a partition's turn comes, so a partition
        queued twice is applied once, as it is now.
        """
        for key in keys:
            if key not in self._queued:
                self._queued.add(key)
                self._queue.append(key)
        if self._queued and (self._applier is None or self._applier.done()):
            self._applier = asyncio.get_running_loop().create_task(
                self._drain(), name="apply-partition-states"
            )

    async def _drain(self) -> None:
        while self._queued:
            deadline = time.monotonic() + APPLY_SLICE_S
            now = _now_ms()
            while self._queued and time.monotonic() < deadline:
                key = self._queue.popleft()
                self._queued.discard(key)
                try:
                    self._apply_partition(key, now)
                except Exception:
                    log.exception("cannot apply the state of %s-%d", key[0], key[1])
            await asyncio.sleep(0)

    async def settled(self) -> None:
        """Wait until every queued partition state has been applied."""
        while self._applier is not None and not self._applier.done():
            await asyncio.shield(self._applier)

    def _apply_partition(self, key: PartitionKey, now_ms: int) -> None:
        topic, partition = key
        assignment = self.view.topics.get(topic)
        state = self.view.partition_states.get(key)
        replicas = tuple(assignment.replicas.get(partition, ())) if assignment else ()
        if self.local_id not in replicas or state is None:
            if key in self.replicas and self.local_id not in replicas:
                self._remove_replica(key)
                if assignment is not None:  # reassigned away (KIP-455): delete the copy
                    self.logs.delete_partition(topic, partition)
                    log.info("deleted the local replica of %s-%d (reassigned away)", *key)
            return
        if self._awaiting_fresh_states and state.leader == self.local_id:
            return  # maybe a stale state: leadership waits for the refresh
        replica = self.replicas.get(key)
        if replica is None:
            self._ensure_local_topic(topic)
            plog = self.logs.log(topic, partition)
            plog.enable_replication(self._checkpointed.get(key, 0))
            replica = PartitionReplica(topic, partition, plog, self.local_id)
            self.replicas[key] = replica
            self._hw_tracker.track(key, plog)
            if plog.offline is not None:
                self._offline_from_start(key)
        was_leader = replica.is_leader
        role = replica.apply_state(
            ReplicaAssignment(
                replicas=replicas,
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                isr=tuple(state.isr),
                zk_version=state.zk_version,
            ),
            now_ms,
        )
        if replica.is_leader:
            self._isr_watch.touch(key)
        if role == "leader":
            self._led_since[key] = now_ms
            self._unfollow(key)
            self._watch_appends(replica)
            log.log(
                self.role_log_level,
                "leader of %s-%d at epoch %d, ISR %s",
                topic,
                partition,
                state.leader_epoch,
                state.isr,
            )
            self._high_watermark_may_move(replica)
            if not was_leader:
                self._tell_leadership(topic, partition, True)
        elif role == "follower":
            self._led_since.pop(key, None)
            self.purgatory.fail(key)
            self._check_low_watermark(replica)  # waiting DeleteRecords: not the leader now
            self._unwatch_appends(replica)
            self._unfollow(key)
            if (
                state.leader >= 0
                and not self.following_stopped
                and replica.log.offline is None
                and not self._corrupt_in_isr(replica, state.isr)
            ):
                self._fetcher_for(state.leader, key).add(replica)
            log.log(
                self.role_log_level,
                "follower of %s-%d (leader %d, epoch %d)",
                topic,
                partition,
                state.leader,
                state.leader_epoch,
            )
            if was_leader:
                self._tell_leadership(topic, partition, False)
        elif replica.is_leader:
            self._high_watermark_may_move(replica)
        self._nudge_out_of_sync(replica)
        if replica.log.corrupt and not replica.is_leader and self.local_id not in state.isr:
            self._repair_corrupt(replica, state.leader)

    # -- corrupt replicas (issue 31 item 4) ------------------------------------------------

    def on_corrupt(self, topic: str, partition: int) -> None:
        """The scrubber found a corrupt range in this replica (on the loop).

        With other replicas, the good copy comes from them: this broker tells the
        controller (a log dir event notification, reason "corrupt"), which moves a
        leadership away and takes it out of the ISR; out of the ISR and following, it
        truncates to the first corrupt offset and re-fetches (``_repair_corrupt``). At
        replication factor 1 there is no good copy: readers get CORRUPT_MESSAGE.
        """
        key = (topic, partition)
        replica = self.replicas.get(key)
        state = self.view.partition_states.get(key)
        assignment = self.view.topics.get(topic)
        replicas = assignment.replicas.get(partition, []) if assignment is not None else []
        if replica is None or state is None or len(replicas) <= 1:
            return
        if not replica.is_leader and self.local_id not in state.isr:
            self._repair_corrupt(replica, state.leader)
            return
        if not replica.is_leader:
            # An in-sync follower stops fetching until it is out of the ISR: fetching
            # at its log end, it would look caught up and the leader would put it back
            # in the ISR the moment the controller took it out. Not fetching, it also
            # leaves the ISR by replica.lag.time.max.ms if the controller never acts.
            self._unfollow(key)
        task = asyncio.get_running_loop().create_task(
            self._notify_corrupt(key), name=f"corrupt-notification-{topic}-{partition}"
        )
        self._notifications.add(task)
        task.add_done_callback(self._notifications.discard)

    def _corrupt_in_isr(self, replica: PartitionReplica, isr: Iterable[int]) -> bool:
        """A corrupt follower still in the ISR: it waits, not fetching, to be taken out."""
        return bool(replica.log.corrupt) and self.local_id in isr

    async def _notify_corrupt(self, key: PartitionKey) -> None:
        """Tell the controller, retried as a log directory failure is."""
        await self._notify_log_dir_event([key], "corrupt")

    def on_log_dir_failure(self, keys: list[PartitionKey]) -> None:
        """A data directory failed (KIP-112, Kafka's handleLogDirFailure; on the loop):
        stop fetching for its replicas (their logs answer KAFKA_STORAGE_ERROR) and tell
        the controller, which moves their leaderships and takes them out of the ISRs.

        The notification is retried (a ZooKeeper hiccup at that moment left the
        partitions led here, answering KAFKA_STORAGE_ERROR, for good)."""
        hosted = [key for key in keys if key in self.replicas]
        for key in hosted:
            self._unfollow(key)
        if not hosted:
            return
        task = asyncio.get_running_loop().create_task(
            self._notify_log_dir_failure(hosted), name="log-dir-failure-notification"
        )
        self._notifications.add(task)
        task.add_done_callback(self._notifications.discard)

    def _offline_from_start(self, key: PartitionKey) -> None:
        """A replica on a directory that failed before this broker started (KIP-112):
        the controller is told, in one notification per turn of the loop, as for a
        directory failing later. Kafka's controller learned it from the broker's
        LeaderAndIsr answer (KAFKA_STORAGE_ERROR)."""
        if not self._offline_pending:
            asyncio.get_running_loop().call_soon(self._report_offline_from_start)
        self._offline_pending.add(key)

    def _report_offline_from_start(self) -> None:
        keys, self._offline_pending = sorted(self._offline_pending), set()
        log.warning("%d replica(s) on a data directory offline since the start: %s",
                    len(keys), ", ".join(f"{t}-{p}" for t, p in keys[:10]))  # fmt: skip
        self.on_log_dir_failure(keys)

    async def _notify_log_dir_failure(self, hosted: list[PartitionKey]) -> None:
        await self._notify_log_dir_event(hosted, "log_dir_failure")

    async def _notify_log_dir_event(self, keys: list[PartitionKey], reason: str) -> None:
        """A log dir event notification for the controller, retried with backoff."""
        loop = asyncio.get_running_loop()
        delay = 0.2
        for attempt in range(1, LOG_DIR_NOTIFY_ATTEMPTS + 1):
            try:
                await loop.run_in_executor(
                    None, self.store.notify_log_dir_event, self.local_id, keys, reason
                )
                return
            except Exception as exc:
                if attempt == LOG_DIR_NOTIFY_ATTEMPTS:
                    log.error("cannot tell the controller about %s of %s: %s",
                              reason.replace("_", " "), keys, exc)  # fmt: skip
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _repair_corrupt(self, replica: PartitionReplica, leader: int) -> None:
        """A follower out of the ISR: cut the log at its first corrupt batch and fetch
        the rest again from the leader."""
        ranges = replica.log.corrupt_ranges()
        if not ranges:
            replica.log.corrupt = ()
            return
        first = ranges[0][0]
        self._unfollow(replica.key)
        replica.log.truncate_to(first)
        log.warning("%s-%d: corrupt from offset %d here; truncated there, re-fetching from "
                    "leader %d", replica.topic, replica.partition, first, leader)  # fmt: skip
        if leader >= 0 and not self.following_stopped:
            self._fetcher_for(leader, replica.key).add(replica)

    def _nudge_out_of_sync(self, replica: PartitionReplica) -> None:
        """Have followers outside the ISR tell this leader where they are.

        Kafka's leader evaluates ISR expansion on every follower fetch, for
        every partition of the fetch session. Headwater's incremental
        sessions read only partitions with something pending, and an idle
        partition whose ISR the controller shrank (a paused follower's session
        expired) changes neither its log nor its leader epoch: nothing would
        make it pending, and a follower that came back caught up would stay
        out of the ISR until the next write. The listeners (the fetch
        sessions' watcher) mark the partition pending in follower sessions,
        whose next fetch then reads it at the follower's cached offset:
        O(partitions out of sync), never O(session).
        """
        if not replica.is_leader or not self.out_of_sync_listeners:
            return
        if all(r in replica.isr for r in replica.replicas):
            return
        for listener in self.out_of_sync_listeners:
            try:
                listener(replica.topic, replica.partition)
            except Exception:
                log.exception("out-of-sync listener failed for %s-%d", *replica.key)

    def _watch_appends(self, replica: PartitionReplica) -> None:
        """Every append to a led log (produce, group commits) moves follower and HW state."""
        if replica.key in self._append_listeners:
            return

        def changed(_log: Log, _event: LogEvent) -> None:
            if replica.is_leader and replica.on_log_change(_now_ms()):
                self._isr_watch.touch(replica.key)
                self._high_watermark_may_move(replica)

        self._append_listeners[replica.key] = changed
        replica.log.add_listener(changed)

    def _unwatch_appends(self, replica: PartitionReplica) -> None:
        listener = self._append_listeners.pop(replica.key, None)
        if listener is not None:
            with contextlib.suppress(ValueError):
                replica.log.remove_listener(listener)

    async def wait_replicated(
        self, topic: str, partition: int, offset: int, timeout_s: float
    ) -> int:
        """Wait until the ISR has everything before ``offset``; the error code, 0 when it does."""
        replica = self.replicas.get((topic, partition))
        if replica is None or not replica.is_leader:
            return ErrorCode.not_leader_or_follower
        if replica.log.high_watermark >= offset:
            return (
                ErrorCode.none
                if self.enough_isr(replica)
                else ErrorCode.not_enough_replicas_after_append
            )
        future = self.purgatory.wait(replica.key, offset)
        codes = await await_acks(self.purgatory, {replica.key: future}, timeout_s)
        return codes[replica.key]

    def _remove_replica(self, key: PartitionKey) -> None:
        replica = self.replicas.pop(key, None)
        self._hw_tracker.untrack(key)
        if replica is not None:
            self._unwatch_appends(replica)
        self._unfollow(key)
        self.purgatory.fail(key)
        if replica is not None and replica.is_leader:
            self._tell_leadership(key[0], key[1], False)

    def _tell_leadership(self, topic: str, partition: int, is_leader: bool) -> None:
        for listener in self.leadership_listeners:
            try:
                listener(topic, partition, is_leader)
            except Exception:
                log.exception("leadership listener failed for %s-%d", topic, partition)

    # -- fetchers ------------------------------------------------------------------------

    def _fetcher_for(self, leader: int, key: PartitionKey) -> ReplicaFetcher:
        index = fetcher_index(key[0], key[1], self.num_replica_fetchers)
        fetcher = self.fetchers.get((leader, index))
        if fetcher is None:
            fetcher = ReplicaFetcher(
                self.local_id,
                leader,
                self.connector,
                self.config.fetcher,
                name=f"replica-fetcher-{self.local_id}-from-{leader}-{index}",
                throttles=self.throttles,
            )
            self.fetchers[(leader, index)] = fetcher
            fetcher.start()
        return fetcher

    def _unfollow(self, key: PartitionKey) -> None:
        for fetcher_key, fetcher in list(self.fetchers.items()):
            if key in fetcher.partitions:
                fetcher.remove(key)
                self._stop_if_empty(fetcher_key)

    def _stop_if_empty(self, fetcher_key: tuple[int, int]) -> None:
        fetcher = self.fetchers.get(fetcher_key)
        if fetcher is None or len(fetcher):
            return
        del self.fetchers[fetcher_key]
        stopping = asyncio.ensure_future(fetcher.stop())
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)

    def resize_fetchers(self, count: int) -> None:
        """``num.replica.fetchers`` changed: re-home each followed partition whose
        fetcher index changes (Kafka's ``resizeThreadPool``), stop emptied fetchers.

        A moved partition keeps its place: the new fetcher fetches from the
        local log's end, as the old one would have next, and an answer the old
        one still has in flight is dropped on arrival (``remove``), so no record
        is appended twice or skipped. It runs between two turns of the event
        loop, so no fetch is applied half-way through a move.
        """
        count = max(1, count)
        if count == self.num_replica_fetchers:
            return
        placements = {
            key: fetcher_key
            for fetcher_key, fetcher in self.fetchers.items()
            for key in fetcher.partitions
        }
        moves = resize_plan(placements, count)
        self.num_replica_fetchers = count
        for key, (leader, _) in moves.items():
            old_key = placements[key]
            replica = self.fetchers[old_key].partitions[key]
            self.fetchers[old_key].remove(key)
            self._fetcher_for(leader, key).add(replica)
        for fetcher_key in list(self.fetchers):
            self._stop_if_empty(fetcher_key)
        running: dict[int, int] = {}
        for leader, _ in self.fetchers:
            running[leader] = running.get(leader, 0) + 1
        log.info(
            "resized replica fetchers to %d per leader: moved %d partitions; running %s",
            count,
            len(moves),
            ", ".join(f"{n} from broker {leader}" for leader, n in sorted(running.items()))
            or "none",
        )

    def _topic_configs(self, topic: str) -> dict[str, str]:
        assignment = self.view.topics.get(topic)
        return assignment.configs if assignment is not None else {}

    def _address_of(self, broker_id: int, listener: str | None) -> tuple[str, int] | None:
        """The peer's endpoint on ``listener``; its default address when it registered
        no endpoints (or no listener is named)."""
        broker = self.view.brokers.get(broker_id)
        if broker is None:
            return None
        if listener is None or not broker.endpoints:
            return broker.host, broker.port
        return broker.endpoint(listener)

    # -- what the request handlers ask ---------------------------------------------------

    def leads_per_stale_view(self, leader: int) -> bool:
        """A cached state names this broker leader and cannot be trusted yet: between
        a ZooKeeper session loss and the re-read of the partition states, the
        controller may have given the partition away (FindCoordinator then answers
        COORDINATOR_NOT_AVAILABLE, and the client asks again)."""
        return leader == self.local_id and self._awaiting_fresh_states

    def replica(self, topic: str, partition: int) -> PartitionReplica | None:
        return self.replicas.get((topic, partition))

    def serving_error(self, topic: str, partition: int) -> int:
        """0 when this broker leads the partition; the error a client must see otherwise."""
        replica = self.replicas.get((topic, partition))
        if replica is not None:
            return ErrorCode.none if replica.is_leader else ErrorCode.not_leader_or_follower
        assignment = self.view.topics.get(topic)
        if assignment is None or partition not in assignment.replicas:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.not_leader_or_follower

    def consumer_serving_error(self, topic: str, partition: int) -> int:
        """As :meth:`serving_error` for a consumer that may read from followers (Fetch
        v11+, KIP-392): an in-sync replica here serves it, as Kafka's ``fetchOnlyLeader``
        is false for a consumer that sent client metadata.

        Beyond Kafka, a follower outside the ISR refuses (NOT_LEADER_OR_FOLLOWER): its
        high watermark has stopped, so a consumer it kept would stall until its
        preferred-replica lease ran out; the error sends it back to the leader at once.
        """
        replica = self.replicas.get((topic, partition))
        if replica is not None and replica.leader >= 0:
            if replica.is_leader or self.local_id in replica.isr:
                return ErrorCode.none
            return ErrorCode.not_leader_or_follower
        return self.serving_error(topic, partition)

    def serves_as_follower(self, topic: str, partition: int) -> bool:
        replica = self.replicas.get((topic, partition))
        return replica is not None and not replica.is_leader

    def preferred_read_replica(
        self, topic: str, partition: int, fetch_offset: int, client_rack: str
    ) -> int:
        """KIP-392 on the leader: the in-sync replica in ``client_rack`` that should serve
        this consumer, or -1 to serve it here (``headwater.fetch.replica_selector``)."""
        replica = self.replicas.get((topic, partition))
        if replica is None or not replica.is_leader or self.config.replica_selector is None:
            return NO_PREFERRED_REPLICA
        brokers = self.view.brokers
        me = brokers.get(self.local_id)
        log = replica.log
        leader = ReplicaView(
            self.local_id,
            me.rack if me is not None else None,
            log.log_start_offset,
            log.log_end_offset,
            log.high_watermark,
            0,
        )
        now = _now_ms()
        followers = []
        for replica_id in replica.isr:
            state = replica.followers.get(replica_id)
            broker = brokers.get(replica_id)
            if state is None or broker is None or replica_id == self.local_id:
                continue
            followers.append(
                ReplicaView(
                    replica_id,
                    broker.rack,
                    state.log_start_offset,
                    state.log_end_offset,
                    min(state.high_watermark_sent, state.log_end_offset),
                    now - state.last_caught_up_ms,
                )
            )
        return preferred_read_replica(client_rack, fetch_offset, leader, followers)

    def on_follower_response(self, replica_id: int, partitions: Iterable[PartitionData]) -> None:
        """What a leader's answer told a follower: the high watermark it will know, which
        KIP-392 selection needs (a follower serves consumers only up to it)."""
        for data in partitions:
            if data.error_code or data.high_watermark < 0:
                continue
            replica = self.replicas.get((data.topic, data.partition))
            if replica is None or not replica.is_leader:
                continue
            state = replica.followers.get(replica_id)
            if state is not None and data.high_watermark > state.high_watermark_sent:
                state.high_watermark_sent = data.high_watermark

    def follower_serving_error(self, replica_id: int, topic: str, partition: int) -> int:
        """As :meth:`serving_error`, and the fetching broker must be a replica (Kafka's rule)."""
        error = self.serving_error(topic, partition)
        if error:
            return error
        replica = self.replicas[(topic, partition)]
        return (
            ErrorCode.none if replica_id in replica.replicas else ErrorCode.not_leader_or_follower
        )

    def min_insync_replicas(self, topic: str) -> int:
        assignment = self.view.topics.get(topic)
        configured = assignment.configs.get("min.insync.replicas") if assignment else None
        try:
            return int(configured) if configured is not None else self.config.min_insync_replicas
        except ValueError:
            return self.config.min_insync_replicas

    def enough_isr(self, replica: PartitionReplica) -> bool:
        return len(replica.isr) >= self.min_insync_replicas(replica.topic)

    def leader_log(self, topic: str, partition: int) -> Log | int:
        """The partition's log when this broker leads it, else the error code to answer.

        For the APIs that only a partition's leader serves (ListOffsets,
        OffsetsForLeaderEpoch, DeleteRecords, DescribeProducers, markers).
        """
        error = self.serving_error(topic, partition)
        return error if error else self.replicas[(topic, partition)].log

    # -- the data path --------------------------------------------------------------------

    def append_records(
        self, topic: str, partition: int, records: bytes | memoryview, now_ms: int, acks: int
    ) -> tuple[AppendResult, asyncio.Future[int] | None]:
        """Produce's one road to a partition: append to the log this broker leads (the
        caller checked ``serving_error``). With ``acks=all`` and records beyond the
        high watermark, also a future that completes once the ISR has them; the
        append itself moved the high watermark if the ISR is this broker alone."""
        replica = self.replicas[(topic, partition)]
        result = replica.log.append(records, now_ms)
        if acks != -1 or replica.log.high_watermark > result.last_offset:
            return result, None
        return result, self.purgatory.wait(replica.key, result.last_offset + 1)

    def low_watermark(self, topic: str, partition: int) -> int:
        """The led partition's low watermark (see ``PartitionReplica.low_watermark``)."""
        replica = self.replicas.get((topic, partition))
        if replica is None or not replica.is_leader:
            return -1
        return replica.low_watermark(self.view.brokers)

    async def wait_low_watermark(
        self, topic: str, partition: int, offset: int, timeout_s: float
    ) -> int:
        """Kafka's DelayedDeleteRecords: until every live replica's log starts at
        ``offset`` or later (followers learn the new log start from their next
        fetch, then say theirs in the one after). An error code: REQUEST_TIMED_OUT,
        or NOT_LEADER_OR_FOLLOWER when the leadership moved meanwhile."""
        replica = self.replicas.get((topic, partition))
        if replica is None or not replica.is_leader:
            return ErrorCode.not_leader_or_follower
        if replica.low_watermark(self.view.brokers) >= offset:
            return ErrorCode.none
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiters = self._low_watermark_waiters.setdefault(replica.key, [])
        waiters.append((offset, future))
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(future)
        except TimeoutError:
            return ErrorCode.request_timed_out
        finally:
            if (offset, future) in waiters:
                waiters.remove((offset, future))
            if not waiters:
                self._low_watermark_waiters.pop(replica.key, None)

    def _check_low_watermark(self, replica: PartitionReplica) -> None:
        waiters = self._low_watermark_waiters.get(replica.key, [])
        low = replica.low_watermark(self.view.brokers) if replica.is_leader else -1
        for offset, future in list(waiters):
            if future.done():
                continue
            if not replica.is_leader:
                future.set_result(ErrorCode.not_leader_or_follower)
            elif low >= offset:
                future.set_result(ErrorCode.none)

    # -- events from the request handlers -----------------------------------------------

    def on_follower_fetch(self, replica_id: int, partitions: Iterable[PartitionFetch]) -> None:
        """A follower named these partitions in a fetch: it has everything before each offset."""
        now = _now_ms()
        self.stale_leader.follower_fetched(replica_id, now)
        for p in partitions:
            replica = self.replicas.get((p.topic, p.partition))
            if replica is None or not replica.is_leader:
                continue
            replica.update_follower(replica_id, p.fetch_offset, now, p.log_start_offset)
            self._isr_watch.touch(replica.key)
            if replica.key in self._low_watermark_waiters:
                self._check_low_watermark(replica)
            expanded = replica.isr_to_expand(replica_id, self._isr_ineligible)
            if expanded is not None:
                self._propose_isr(replica, expanded, "expand")
            self._high_watermark_may_move(replica)

    def _high_watermark_may_move(self, replica: PartitionReplica) -> None:
        replica.maybe_increment_high_watermark()
        key = replica.key
        if self.purgatory.has_waiters(key):
            self.purgatory.check(key, replica.log.high_watermark, lambda: self.enough_isr(replica))

    # -- ISR changes ---------------------------------------------------------------------

    def _check_isr(self) -> None:
        """Shrink lagging followers out, nudge those outside the ISR: only for the led
        partitions touched since or not settled (see IsrWatch)."""
        self._isr_watch.check(
            self.replicas,
            _now_ms(),
            self.config.replica_lag_time_max_ms,
            lambda replica, isr: self._propose_isr(replica, isr, "shrink"),
            self._nudge_out_of_sync,
        )

    def _propose_isr(self, replica: PartitionReplica, isr: tuple[int, ...], why: str) -> None:
        """Write a new ISR to ZooKeeper, conditional on the state version we hold.

        Proposals made in one turn of the loop go to ZooKeeper together
        (``_write_isr_proposals``), pipelined: after a restart a broker's followers
        rejoin tens of thousands of ISRs at once, and one blocking write per partition
        from the executor's few threads took minutes at 50,000 partitions (issue 33).
        """
        replica.pending_isr = isr
        current = self.view.partition_states.get(replica.key)
        state = PartitionState(
            leader=replica.leader,
            leader_epoch=replica.leader_epoch,
            isr=isr,
            controller_epoch=current.controller_epoch if current is not None else 0,
        )
        self._isr_proposals.append(_IsrProposal(replica, why, replica.zk_version, state))
        if len(self._isr_proposals) == 1:
            asyncio.get_running_loop().call_soon(self._write_isr_proposals)

    def _write_isr_proposals(self) -> None:
        proposals, self._isr_proposals = self._isr_proposals, []
        if not proposals:
            return
        future = asyncio.get_running_loop().run_in_executor(
            None,
            self.store.update_partition_states,
            [(p.replica.topic, p.replica.partition, p.state, p.expected) for p in proposals],
        )
        self._isr_writes.add(future)

        def done(f: asyncio.Future[list[int | ClusterStoreUnavailableError | None]]) -> None:
            self._isr_writes.discard(f)
            results: list[int | BaseException | None]
            if f.cancelled():
                results = [asyncio.CancelledError()] * len(proposals)
            elif (error := f.exception()) is not None:
                results = [error] * len(proposals)
            else:
                results = list(f.result())
            for proposal, result in zip(proposals, results, strict=True):
                self._isr_written(proposal, result)

        future.add_done_callback(done)

    def _isr_written(self, proposal: _IsrProposal, result: int | BaseException | None) -> None:
        """One proposal's answer: the new znode version, None (a lost race), or an error."""
        replica, isr, why = proposal.replica, proposal.state.isr, proposal.why
        if replica.pending_isr != isr:
            # A newer state arrived from ZooKeeper meanwhile (often this very
            # write, through the watch): say what was written all the same.
            if isinstance(result, int):
                self._isr_changed(replica, None, isr, why)
            return
        replica.pending_isr = None
        if isinstance(result, BaseException):
            log.warning(
                "cannot %s the ISR of %s-%d to %s: %s",
                why,
                replica.topic,
                replica.partition,
                list(isr),
                result,
            )
            return
        if result is None:
            log.info(
                "ISR %s of %s-%d lost a race; waiting for the new state",
                why,
                replica.topic,
                replica.partition,
            )
            return
        if replica.leader_epoch != proposal.state.leader_epoch or not replica.is_leader:
            return
        self._isr_changed(replica, replica.isr, isr, why)
        replica.isr = isr
        replica.zk_version = result
        self._high_watermark_may_move(replica)
        self._nudge_out_of_sync(replica)
        # A follower that caught up while this write was in flight was not taken
        # in (one write at a time); an idle partition's follower may not fetch it
        # again, so look now (a reassignment's new replicas waited forever).
        for follower in replica.followers:
            expanded = replica.isr_to_expand(follower, self._isr_ineligible)
            if expanded is not None:
                self._propose_isr(replica, expanded, "expand")
                break

    def _isr_changed(
        self,
        replica: PartitionReplica,
        old: tuple[int, ...] | None,
        isr: tuple[int, ...],
        why: str,
    ) -> None:
        """Log and count one ISR write of this leader that took effect (``old`` None:
        its state reached the leader through the watch before the write's answer)."""
        if old is None:
            log.info("ISR of %s-%d: -> %s (%s; applied from ZooKeeper)",
                     replica.topic, replica.partition, list(isr), why)  # fmt: skip
        else:
            log.info("ISR of %s-%d: %s -> %s (%s)",
                     replica.topic, replica.partition, list(old), list(isr), why)  # fmt: skip
        if why == "shrink":
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1
            if replica.log.corrupt and replica.is_leader:
                # A corrupt leader alone in its ISR kept leading (no good copy was in
                # sync); now one is: ask the controller again to hand it over.
                self.on_corrupt(replica.topic, replica.partition)


@dataclass(frozen=True, slots=True)
class _IsrProposal:
    """A leader's ISR change on its way to ZooKeeper: the state to write (its ISR, and
    the leader epoch the answer is checked against) and the version it expects."""

    replica: PartitionReplica
    why: str
    expected: int
    state: PartitionState


class IsrIneligible:
    """The brokers no ISR may take in now (Kafka's KIP-841): those in controlled
    shutdown and those not registered (gone), read from the view when asked.

    Without it a stopping follower whose last fetch had caught up was taken back
    into the ISR the controller had just taken it out of, at the leader's next
    expansion, and its controlled shutdown waited out every attempt.
    """

    __slots__ = ("view",)

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def __contains__(self, broker_id: object) -> bool:
        view = self.view
        return broker_id in view.brokers_in_controlled_shutdown or broker_id not in view.brokers


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000
