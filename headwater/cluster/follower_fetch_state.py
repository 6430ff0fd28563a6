"""A follower's fetching from one leader, as sans-I/O state (``AbstractFetcherThread``'s logic).

No socket, no event loop, no log writes: ``next_request(now)`` says what to
fetch (partitions, offsets, leader epochs, KIP-227 session id and epoch, how
long the leader may hold the request) or that there is nothing to fetch
until some time; ``on_response(response, now)`` reads the leader's answer and
returns typed decisions (:mod:`headwater.cluster.follower_decisions`) for the
caller to apply to the logs. The asyncio task in ``replica_fetcher`` is a thin
loop around it; unit tests drive it against a leader's fetch planner.

Per partition the request carries the follower's log end as the fetch
offset, the leader epoch it believes in, and the epoch of its last record
(``last_fetched_epoch``, Fetch v12); the leader answers records to append
as they are (offsets and epochs kept), its high watermark, or, when the
logs diverged after a leader change, the point to truncate to (Kafka's
truncation on fetch, so no OffsetsForLeaderEpoch round trip is needed).
One ``FetchSessionHandler`` (the consumer's) keeps one incremental session
with the leader: a follower of thousands of idle partitions sends and
receives a few dozen bytes per round trip. Building that request is
O(changed) too (``FetchSessionHandler.build_changes``): the
state keeps what the session should hold (``_wanted``) and the partitions
whose entry may have changed since the last request (``_dirty``: added,
removed, log changed, answered with records, backed off or back from a
backoff); an idle round trip visits no partition (issue 33 item 2: the
follower's per-fetch scan of every partition was most of an idle broker's
CPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.client.session_handler import FetchSessionHandler
from headwater.cluster.follower_decisions import (
    AppendRecords,
    Backoff,
    Decision,
    StartOver,
    TruncateTo,
)
from headwater.cluster.partition import PartitionReplica
from headwater.cluster.replication_quota import ReplicationThrottles
from headwater.log.log import Log
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchRequestData,
    FetchResponseData,
    PartitionData,
    PartitionFetch,
)

#: A new leader answers these until it has applied the state ZooKeeper just
#: gave both of us (the watches fire together): retry soon, a few times, rather
#: than after replica.fetch.backoff.ms, which added up to a second to failover.
LEADER_CATCHING_UP = (ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch)
CATCH_UP_RETRY_S = 0.05
CATCH_UP_RETRIES = 10
#: Fetch v12: the last version that names topics (followers here fetch by name)
#: and the first with last_fetched_epoch / diverging epochs.
FOLLOWER_FETCH_VERSION = 12

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """Kafka's ``replica.fetch.*`` settings."""

    max_bytes: int = 1_048_576  # replica.fetch.max.bytes (per partition)
    response_max_bytes: int = 10_485_760  # replica.fetch.response.max.bytes
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    sessions: bool = True  # headwater.replica.fetch.sessions.enable


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to fetch now: wait for a change, or ``wait_s`` seconds (None: no limit)."""

    wait_s: float | None


@dataclass(slots=True)
class FetchOutcome:
    """What one response means: decisions per partition, and a pause before the next fetch."""

    decisions: list[Decision] = field(default_factory=list)
    #: Seconds to wait before fetching again (a top-level error: the session failed).
    pause_s: float = 0.0


def truncation_offset(follower: Log, epoch: int, leader_end: int) -> int:
    """Where a follower cuts its log when the leader names (epoch, end) as the divergence.

    The leader names the largest epoch both may share and where it ends on
    the leader; our copy of that epoch may end earlier, so we keep the
    smaller of the two ends (Kafka's ``getOffsetTruncationState``).
    """
    ours_epoch, ours_end = follower.end_offset_for_epoch(epoch)
    target = leader_end if ours_epoch != epoch or ours_end < 0 else min(leader_end, ours_end)
    return max(min(target, follower.log_end_offset), 0)


class FollowerFetchState:
    """The partitions this broker follows on ``leader_id`` and what to fetch next."""

    def __init__(
        self,
        local_id: int,
        leader_id: int,
        config: FetcherConfig,
        *,
        throttles: ReplicationThrottles | None = None,
    ) -> None:
        self.local_id = local_id
        self.leader_id = leader_id
        self.config = config
        self.throttles = throttles
        self.partitions: dict[PartitionKey, PartitionReplica] = {}
        self.session = FetchSessionHandler(leader_id, enabled=config.sessions)
        self._delayed: dict[PartitionKey, float] = {}
        #: What the next request should have the session hold: every partition not
        #: backed off, with its request (the old per-fetch scan, kept up to date).
        self._wanted: dict[PartitionKey, PartitionFetch] = {}
        #: Partitions whose ``_wanted`` entry may be stale: the only ones the next
        #: request looks at, so an idle round trip costs nothing per partition.
        self._dirty: set[PartitionKey] = set()
        #: Partitions removed (or re-added) since the request in flight was built:
        #: an answer for them is for a log end we no longer fetch from.
        self._stale: set[PartitionKey] = set()
        #: Partitions visited to build requests (a counter for tests: O(changed)).
        self.visited = 0
        #: Quick retries spent per partition on a leader still catching up.
        self._quick_retries: dict[PartitionKey, int] = {}
        #: The last PartitionFetch built per partition, dropped when its log changes:
        #: an idle partition costs no rebuilding, and the session handler sees
        #: the same object (nothing to resend) without comparing fields.
        self._requests: dict[PartitionKey, PartitionFetch] = {}
        #: Fetch requests answered (a metric).
        self.fetches = 0

    # -- membership --------------------------------------------------------------

    def add(self, replica: PartitionReplica) -> None:
        self.remove(replica.key)
        self.partitions[replica.key] = replica
        self._dirty.add(replica.key)

    def remove(self, key: PartitionKey) -> PartitionReplica | None:
        """Stop following ``key``; an answer for it already on its way is ignored."""
        self._delayed.pop(key, None)
        self._quick_retries.pop(key, None)
        self._requests.pop(key, None)
        if key in self._wanted:
            self._stale.add(key)
        self._dirty.add(key)
        return self.partitions.pop(key, None)

    def log_changed(self, key: PartitionKey) -> None:
        """The partition's log changed (an append, a truncation, retention): rebuild its request."""
        self._invalidate(key)

    def _invalidate(self, key: PartitionKey) -> None:
        """Rebuild the partition's request before the next fetch."""
        self._requests.pop(key, None)
        self._dirty.add(key)

    def __len__(self) -> int:
        return len(self.partitions)

    def __contains__(self, key: object) -> bool:
        return key in self.partitions

    @property
    def needs_leader(self) -> bool:
        """True while a request may be due: partitions to fetch, or a session to wind down."""
        return bool(self.partitions) or self.session.has_partitions

    # -- requests ----------------------------------------------------------------

    def next_request(
        self, now: float, version: int = FOLLOWER_FETCH_VERSION
    ) -> FetchRequestData | Idle:
        """The next FetchRequest to send the leader, or how long there is nothing to send.

        ``now`` is monotonic seconds; ``version`` the Fetch version both ends speak.
        """
        changes = self._changes(now)
        wanted = self._wanted
        if not wanted and not self.session.has_partitions:
            return Idle(self.until_next_retry(now) if self._delayed else None)
        max_wait_ms = self.config.max_wait_ms
        if self._quick_retries and self._delayed:
            # Do not long-poll past a quick retry that is due.
            max_wait_ms = min(max_wait_ms, max(10, int(self.until_next_retry(now) * 1000)))
        if self.session.builds_changes(version):
            req = self.session.build_changes(
                changes,
                version=version,
                max_wait_ms=max_wait_ms,
                min_bytes=self.config.min_bytes,
                max_bytes=self.config.response_max_bytes,
            )
        else:  # a full (or sessionless) request names every partition wanted
            self.visited += len(wanted)
            req = self.session.build(
                wanted.values(),
                version=version,
                max_wait_ms=max_wait_ms,
                min_bytes=self.config.min_bytes,
                max_bytes=self.config.response_max_bytes,
            )
        req.replica_id = self.local_id
        self._stale.clear()
        return req

    def _changes(self, now: float) -> dict[PartitionKey, PartitionFetch | None]:
        """Bring ``_wanted`` up to date; each entry that may have changed, with its
        request (None: not wanted now). Visits only the dirty, the backed off and,
        while over the follower throttle's budget, the throttled partitions."""
        dirty = self._dirty
        delayed = self._delayed
        if delayed:
            for key, until in list(delayed.items()):
                if until <= now:
                    del delayed[key]
                    dirty.add(key)
        throttles = self.throttles
        # KIP-73: over the follower budget, throttled replicas that are not in
        # the ISR sit out (until the backoff) and the rest fetch on.
        if (
            throttles is not None
            and throttles.follower.enabled
            and throttles.follower.exceeded(now * 1000)
        ):
            for key, replica in self.partitions.items():
                if (
                    key not in delayed
                    and self.local_id not in replica.isr
                    and throttles.follower_throttled(*key)
                ):
                    self._delay(replica, now)
        changes: dict[PartitionKey, PartitionFetch | None] = {}
        if not dirty:
            return changes
        self.visited += len(dirty)
        wanted = self._wanted
        requests = self._requests
        for key in dirty:
            followed = self.partitions.get(key)
            if followed is None or key in delayed:
                wanted.pop(key, None)
                changes[key] = None
                continue
            request = requests.get(key)
            if request is None or request.current_leader_epoch != followed.leader_epoch:
                plog = followed.log
                request = requests[key] = PartitionFetch(
                    topic_id=ZERO_UUID,
                    topic=followed.topic,
                    partition=followed.partition,
                    fetch_offset=plog.log_end_offset,
                    log_start_offset=plog.log_start_offset,
                    partition_max_bytes=self.config.max_bytes,
                    current_leader_epoch=followed.leader_epoch,
                    last_fetched_epoch=plog.latest_epoch,
                )
            wanted[key] = request
            changes[key] = request
        dirty.clear()
        return changes

    # -- responses ---------------------------------------------------------------

    def on_response(self, response: FetchResponseData, now: float) -> FetchOutcome:
        """Read the leader's answer to the last request: the session moves on, and per
        partition a decision (append, truncate, start over, back off)."""
        self.fetches += 1
        outcome = FetchOutcome()
        if not self.session.handle_response(response):
            if response.error_code:
                outcome.pause_s = self.config.backoff_ms / 1000
            return outcome
        throttles = self.throttles
        asked_for = self._wanted  # unchanged since the request was built
        stale = self._stale
        for data in response.partitions:
            key = (data.topic, data.partition)
            replica = self.partitions.get(key)
            if replica is None or replica.leader != self.leader_id:
                continue  # removed, or now led elsewhere, while the fetch was out
            if (
                throttles is not None
                and throttles.follower.enabled
                and throttles.follower_throttled(data.topic, data.partition)
            ):
                throttles.follower.record(data.records_size, now * 1000)
            asked = None if key in stale else asked_for.get(key)
            if asked is None or asked.fetch_offset != replica.log.log_end_offset:
                # Re-added or truncated while the fetch was out: the answer is for
                # another log end; the next request asks again from the right one.
                self._invalidate(key)
                continue
            outcome.decisions.append(self._decide(replica, data, now))
        return outcome

    def _decide(self, replica: PartitionReplica, data: PartitionData, now: float) -> Decision:
        key = replica.key
        if data.error_code == ErrorCode.offset_out_of_range:
            return self._out_of_range(replica, data, now)
        if data.error_code:
            # NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH...: ZooKeeper
            # will tell us who leads now; until then, do not hammer this one.
            return self._delay(replica, now, data.error_code)
        self._quick_retries.pop(key, None)
        if data.diverging_epoch >= 0:
            # A truncation at our log end changes only the epoch history (an epoch
            # we led without writing is dropped) and fires no log listener: the
            # cached request would name that epoch again, get the same answer and
            # loop forever, never fetching (seen in the fault campaign).
            self._invalidate(key)
            return TruncateTo(
                replica,
                truncation_offset(replica.log, data.diverging_epoch, data.diverging_end_offset),
                f"diverged from leader {self.leader_id} at epoch {data.diverging_epoch}",
            )
        records = data.records
        if not isinstance(records, (bytes, memoryview)):
            records = b""
        if records or data.log_start_offset > replica.log.log_start_offset:
            self._invalidate(key)
        return AppendRecords(replica, records, data.high_watermark, data.log_start_offset)

    def _out_of_range(self, replica: PartitionReplica, data: PartitionData, now: float) -> Decision:
        """Our fetch offset is outside what the leader serves (Kafka's ``handleOutOfRangeError``).

        Below the leader's log start (retention moved on): start over there.
        Above its high watermark (we hold records it never had and no epoch
        told us where to cut): truncate to it, which it surely has. Otherwise
        the leader's epoch history could not place our last fetched epoch:
        fall back to our own high watermark, as Kafka's fetcher does when the
        leader answers an unknown end offset, and ask again; at the high
        watermark already, back off.
        """
        plog = replica.log
        offset = plog.log_end_offset
        self._invalidate(replica.key)
        if data.log_start_offset >= 0 and offset < data.log_start_offset:
            return StartOver(replica, data.log_start_offset)
        if data.high_watermark >= 0 and offset > data.high_watermark:
            return TruncateTo(replica, data.high_watermark, f"is ahead of leader {self.leader_id}")
        if plog.high_watermark < offset:
            return TruncateTo(
                replica,
                plog.high_watermark,
                f"has a last epoch leader {self.leader_id} cannot place",
            )
        return self._delay(replica, now, data.error_code)

    def on_error(self, error: BaseException | None = None) -> None:
        """The round trip failed (connection, timeout): the next request is a full one."""
        self.session.handle_error(error)

    def on_apply_error(self, replica: PartitionReplica, now: float) -> Backoff:
        """The log refused a decision (corrupt batch, append out of step): try later."""
        self._invalidate(replica.key)
        return self._delay(replica, now)

    # -- backoff -----------------------------------------------------------------

    def _delay(self, replica: PartitionReplica, now: float, error: int = 0) -> Backoff:
        key = replica.key
        backoff = self.config.backoff_ms / 1000
        if error in LEADER_CATCHING_UP:
            spent = self._quick_retries.get(key, 0)
            if spent < CATCH_UP_RETRIES:
                self._quick_retries[key] = spent + 1
                backoff = min(backoff, CATCH_UP_RETRY_S)
        until = now + backoff
        if key in self.partitions:  # not one removed meanwhile
            self._delayed[key] = until
            self._dirty.add(key)  # out of the session until then
        return Backoff(replica, error, until)

    def until_next_retry(self, now: float) -> float:
        """Seconds until the first backed-off partition may be fetched again (0 if none)."""
        if not self._delayed:
            return 0.0
        return max(0.0, min(self._delayed.values()) - now)
