"""One partition's replica on this broker: leader or follower (Kafka's ``Partition``).

Sans-I/O: it holds the partition's replication state (the leader, the leader
epoch, the ISR, what each follower has) and decides what follows from an
event (a follower fetched, the leader appended, time passed), but it writes
nothing to ZooKeeper and opens no socket. The replica manager applies its
decisions: an ISR change is *proposed* here and becomes real only when the
conditional ZooKeeper write succeeds (``apply_state``).

High watermark (leader): the smallest log end offset over the ISR, never
moving back. A follower that fetched at offset ``n`` has everything before
``n``; with replicas that copy the leader's batches byte for byte, ``n`` is a
batch boundary of the leader's log too.

"Caught up" (Kafka's ``lastCaughtUpTimeMs``): a follower is caught up while
its log end equals the leader's. When the leader appends, every follower that
was at the old log end was caught up *until now*; a follower then lags once
``replica.lag.time.max.ms`` passes without it reaching the log end again.
This is event-driven on purpose: an idle follower in an incremental fetch
session names no partition, so nothing per partition arrives to refresh it,
and a dead follower is taken out of the ISR by the controller when its
ZooKeeper session ends.
"""

from __future__ import annotations

from collections.abc import Collection, Container
from dataclasses import dataclass, field

from headwater.log.log import Log


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower replica."""

    log_end_offset: int = -1  # -1: not fetched from this leader yet
    last_caught_up_ms: int = 0
    #: The follower's log start offset, from its fetches (-1: unknown yet).
    log_start_offset: int = -1
    #: The highest high watermark this leader has sent it: what it knows is committed,
    #: so what it may serve to consumers (KIP-392).
    high_watermark_sent: int = -1


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """The partition's state as ZooKeeper holds it (assignment plus leadership)."""

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int


@dataclass(slots=True)
class PartitionReplica:
    """This broker's replica of ``topic``-``partition``."""

    topic: str
    partition: int
    log: Log
    local_id: int
    replicas: tuple[int, ...] = ()
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    zk_version: int = -1
    followers: dict[int, FollowerState] = field(default_factory=dict)
    #: An ISR write on its way to ZooKeeper; no second one starts meanwhile.
    pending_isr: tuple[int, ...] | None = None
    #: The log end the leader last saw, to tell appends from other log changes.
    known_end: int = 0

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_id

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    # -- leadership changes -------------------------------------------------------

    def apply_state(self, state: ReplicaAssignment, now_ms: int) -> str:
        """Take ZooKeeper's state; returns "leader", "follower" or "" (only the ISR moved).

        A new leader epoch or leader always means a role change, even when
        this broker stays leader (every decision of the controller bumps the
        epoch so that fetchers and clients with the old one are fenced).
        """
        role_changed = state.leader_epoch != self.leader_epoch or state.leader != self.leader
        self.replicas = state.replicas
        self.isr = state.isr
        self.zk_version = state.zk_version
        self.pending_isr = None
        if not role_changed:
            if self.is_leader:
                for replica in self.replicas:
                    if replica != self.local_id and replica not in self.followers:
                        self.followers[replica] = FollowerState(-1, now_ms)
            return ""
        self.leader = state.leader
        self.leader_epoch = state.leader_epoch
        self.log.partition_leader_epoch = max(state.leader_epoch, 0)
        if self.is_leader:
            self._become_leader(now_ms)
            return "leader"
        self.followers = {}
        return "follower"

    def _become_leader(self, now_ms: int) -> None:
        # Records the new leader appends carry its epoch; the history starts
        # where its log ends now (Kafka's maybeAssignEpochStartOffset).
        self.log.assign_leader_epoch(self.leader_epoch)
        self.known_end = self.log.log_end_offset
        # Followers in the ISR start out caught up: they were when elected.
        self.followers = {r: FollowerState(-1, now_ms) for r in self.replicas if r != self.local_id}

    # -- leader: followers and the high watermark ---------------------------------

    def update_follower(
        self, replica_id: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1
    ) -> None:
        """A follower fetched from ``fetch_offset``: it has everything before it (and
        nothing before ``log_start_offset``, when it says)."""
        follower = self.followers.get(replica_id)
        if follower is None:
            return
        if log_start_offset >= 0:
            follower.log_start_offset = log_start_offset
        leo = self.log.log_end_offset
        offset = min(fetch_offset, leo)
        follower.log_end_offset = offset
        if offset >= leo:
            follower.last_caught_up_ms = now_ms

    def on_append(self, previous_end: int, now_ms: int) -> None:
        """The leader's log grew from ``previous_end``: followers there were caught up until now."""
        for follower in self.followers.values():
            if follower.log_end_offset >= previous_end:
                follower.last_caught_up_ms = now_ms

    def on_log_change(self, now_ms: int) -> bool:
        """A log listener fired; True when it was an append (the log end moved)."""
        end = self.log.log_end_offset
        if end == self.known_end:
            return False
        if end > self.known_end:
            self.on_append(self.known_end, now_ms)
        self.known_end = end
        return True

    def maybe_increment_high_watermark(self) -> bool:
        """Move the HW to the smallest log end over the ISR; True when it moved."""
        if not self.is_leader:
            return False
        hw = self.log.log_end_offset
        for replica in self.isr:
            if replica == self.local_id:
                continue
            follower = self.followers.get(replica)
            if follower is None or follower.log_end_offset < 0:
                return False  # an ISR member we have not heard from holds the HW back
            hw = min(hw, follower.log_end_offset)
        if hw > self.log.high_watermark:
            return self.log.update_high_watermark(hw)
        return False

    def low_watermark(self, alive: Collection[int]) -> int:
        """Kafka's low watermark: the smallest log start offset over this leader and
        its followers on live brokers (-1 while a live follower has not said its
        own). DeleteRecords is answered once it passes the requested offset."""
        low = self.log.log_start_offset
        for replica_id, follower in self.followers.items():
            if replica_id in alive:
                low = min(low, follower.log_start_offset)
        return low

    def follower_is_caught_up(self, replica_id: int, now_ms: int, lag_max_ms: int) -> bool:
        follower = self.followers.get(replica_id)
        if follower is None:
            return False
        if follower.log_end_offset >= self.log.log_end_offset:
            return True
        return now_ms - follower.last_caught_up_ms <= lag_max_ms

    def isr_to_shrink(self, now_ms: int, lag_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without followers that lag by more than ``lag_max_ms``, or None."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        lagging = [
            r
            for r in self.isr
            if r != self.local_id and not self.follower_is_caught_up(r, now_ms, lag_max_ms)
        ]
        if not lagging:
            return None
        return tuple(r for r in self.isr if r not in lagging)

    def isr_to_expand(
        self, replica_id: int, ineligible: Container[int] = ()
    ) -> tuple[int, ...] | None:
        """The ISR plus ``replica_id`` if it has caught up, or None.

        Kafka's rule: a follower out of the ISR rejoins once it has reached the
        high watermark and the start of the current leader epoch, so that it
        holds every record the ISR acknowledged. Brokers in ``ineligible`` (gone,
        or in controlled shutdown: KIP-841) never rejoin, however caught up
        their last fetch left them.
        """
        if (
            not self.is_leader
            or self.pending_isr is not None
            or replica_id in self.isr
            or replica_id in ineligible
        ):
            return None
        follower = self.followers.get(replica_id)
        if follower is None or replica_id not in self.replicas:
            return None
        epoch_start = self._epoch_start_offset()
        if follower.log_end_offset < max(self.log.high_watermark, epoch_start):
            return None
        return tuple(r for r in self.replicas if r in self.isr or r == replica_id)

    def _epoch_start_offset(self) -> int:
        for entry in reversed(self.log.leader_epoch_cache.entries):
            if entry.epoch == self.leader_epoch:
                return entry.start_offset
        return 0
