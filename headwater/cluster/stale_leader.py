"""When a leader cut off from ZooKeeper steps down by its own clock (issue 31).

A leader learns that its ZooKeeper session expired only when it reaches
ZooKeeper again: kazoo says SUSPENDED when the connection drops and LOST
only once the server answers that the session is gone. A leader cut from
ZooKeeper *and* from its followers, but still reachable by clients, would
otherwise answer as leader for as long as the cut lasts, while the
controller has elected another leader at a higher epoch (the cut leader
cannot acknowledge ``acks=all`` writes, its ISR being unreachable, but it
serves stale reads and takes ``acks=1`` writes it will truncate).

The rule, per led partition that has other replicas:

* this broker has been without ZooKeeper for longer than its session
  timeout (so the server has expired the session and the controller has
  had the chance to move the leadership), **and**
* no other replica of the partition has fetched from this broker for
  ``replica.lag.time.max.ms`` (they follow another leader, or cannot reach
  this one).

Then the partition steps down: it answers NOT_LEADER_OR_FOLLOWER to produce
and fetch until ZooKeeper is back and its state is read afresh. The window
in which a cut leader answers as leader is bounded by ``session timeout +
replica.lag.time.max.ms`` after the cut (both clocks run at once, so by the
larger of the two plus a check interval), not by how long the cut lasts.

When only ZooKeeper is down and followers still fetch, nothing steps down:
the followers cannot have been given another leader (the controller needs
ZooKeeper for that), so the leader keeps serving, as Kafka's does.

A partition with a single replica never steps down here: no other broker
can lead it, and the controller only marks it offline; stepping down would
only make it unavailable.

Followers are tracked per broker, not per partition: an incremental fetch
session names only partitions with something pending, so an idle
partition's follower fetches from the leader without naming it. A broker
that still fetches anything from this one can reach it, and while it can,
no partition is given up on its account (stepping down later than needed
is the safe side).

The same doubt follows a stall of the whole process (SIGSTOP, swapping) longer
than two thirds of the session timeout (``alive``): the session may have
expired meanwhile, and the requests queued during the stall are read before
the ZooKeeper client can say so. Led partitions with other replicas step down
at once and the states are read again from ZooKeeper before any is led. A loop
that was only busy while the process ran (``headwater.cluster.process_pulse``)
kept its session, and nothing steps down.

Sans-I/O: times come in as arguments (``tick(now_ms)``); the replica
manager applies the decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class LedPartition:
    """What the decision needs of one partition this broker leads."""

    #: The other replicas of the partition (its possible followers).
    followers: tuple[int, ...]
    #: When this broker became its leader (a follower is not blamed for before).
    led_since_ms: int


@dataclass(slots=True)
class StaleLeaderGuard:
    """Decides which led partitions must step down while ZooKeeper is out of reach."""

    session_timeout_ms: int
    replica_lag_time_max_ms: int
    #: Since when this broker has had no ZooKeeper connection (None: it has one).
    without_zookeeper_since_ms: int | None = None
    #: The last fetch of each follower broker from this one.
    last_fetch_ms: dict[int, int] = field(default_factory=dict)
    #: When the event loop last ran a request or a tick (None: not yet).
    last_alive_ms: int | None = None
    #: A stall longer than this is treated as a possible session loss (None: two
    #: thirds of the session timeout; see ``stall_threshold_ms``).
    stall_after_ms: int | None = None
    #: The last long stall dismissed as a busy loop (see ``alive``), until logged.
    busy_stall_ms: int | None = None

    def zookeeper_lost(self, now_ms: int) -> None:
        """The connection dropped (SUSPENDED) or the session expired (LOST)."""
        if self.without_zookeeper_since_ms is None:
            self.without_zookeeper_since_ms = now_ms

    def zookeeper_back(self) -> None:
        """Connected again (RECONNECTED or RESTORED)."""
        self.without_zookeeper_since_ms = None

    def follower_fetched(self, broker_id: int, now_ms: int) -> None:
        self.last_fetch_ms[broker_id] = now_ms

    def without_zookeeper_too_long(self, now_ms: int) -> bool:
        since = self.without_zookeeper_since_ms
        return since is not None and now_ms - since > self.session_timeout_ms

    def followers_gone(self, partition: LedPartition, now_ms: int) -> bool:
        """No follower of ``partition`` fetched from here for ``replica.lag.time.max.ms``."""
        if not partition.followers:
            return False  # a single replica: nobody else can lead it
        for broker_id in partition.followers:
            heard = max(self.last_fetch_ms.get(broker_id, -1), partition.led_since_ms)
            if now_ms - heard <= self.replica_lag_time_max_ms:
                return False
        return True

    def tick(self, now_ms: int, led: Mapping[PartitionKey, LedPartition]) -> list[PartitionKey]:
        """The led partitions that must step down now (sorted; empty most of the time)."""
        if not self.without_zookeeper_too_long(now_ms):
            return []
        return sorted(key for key, p in led.items() if self.followers_gone(p, now_ms))

    @property
    def stall_threshold_ms(self) -> int:
        """A stall this long may have cost the session: the server expires it a session
        timeout after the last ping it heard, and pings go out every third of it."""
        if self.stall_after_ms is not None:
            return self.stall_after_ms
        return self.session_timeout_ms * 2 // 3

    def alive(
        self, now_ms: int, process_gap_ms: int | None = None, session_troubled: bool = False
    ) -> int | None:
        """The event loop runs now: how long it was stalled when that may have cost the
        session (a SIGSTOP, a swapped-out process), None otherwise.

        After such a stall the requests that queued meanwhile are read before the
        ZooKeeper client has noticed anything, and answering them from the cached
        leaderships (a transaction coordinator's state above all) would answer for
        partitions the controller has given away.

        ``process_gap_ms``: the longest the whole process stood still meanwhile
        (``ProcessPulse``; None: not known). A loop that was only busy, while the
        process ran and ZooKeeper's client stayed connected (``session_troubled``
        False), kept its session: kazoo pinged from its own thread. That stall is
        recorded in ``busy_stall_ms`` (for a log line) and nothing steps down."""
        last, self.last_alive_ms = self.last_alive_ms, now_ms
        if last is None or now_ms - last <= self.stall_threshold_ms:
            return None
        if (
            process_gap_ms is not None
            and process_gap_ms <= self.stall_threshold_ms
            and not session_troubled
        ):
            self.busy_stall_ms = now_ms - last
            return None
        return now_ms - last

    def forget(self, broker_ids: Iterable[int]) -> None:
        for broker_id in broker_ids:
            self.last_fetch_ms.pop(broker_id, None)
