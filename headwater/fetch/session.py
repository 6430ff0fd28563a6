"""One fetch session (KIP-227): what the broker remembers about one fetcher.

Kafka's ``FetchSession`` keeps every partition of the session in LRU order
and, on each incremental fetch, re-reads *all* of them and filters the
results afterwards (KAFKA-9039), so broker work grows with session size.
Headwater's session also keeps a *pending* set: the partitions that may
have something to tell the client. A partition enters it when its log
changes (the broker calls :meth:`FetchSession.partition_changed` from the
log listener), when a request names it, and when, after a response, the
client has still not caught up or the partition has an error. An
incremental fetch reads only the pending partitions, so an idle fetch on a
100,000-partition session reads nothing.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Protocol

from headwater.fetch.types import PartitionData, PartitionFetch, TopicIdPartition

INVALID_SESSION_ID = 0
"""A request or response session id meaning "no session"."""
INITIAL_EPOCH = 0
"""Request epoch of a full fetch that asks for a new session."""
FINAL_EPOCH = -1
"""Request epoch of a full fetch that wants no session (every request before v7)."""
MAX_EPOCH = 2**31 - 1
"""The largest epoch; the one after it is 1 (epochs are always positive)."""

SessionKey = tuple[uuid.UUID | str, int]
"""How a session indexes a partition: (topic id, partition) in topic-id mode
(v13+), (topic name, partition) otherwise. The other half of a
``TopicIdPartition`` may be missing (a forgotten entry carries only the id,
a planner may fill in an id the request lacked), so it is not compared."""

ChangeListener = Callable[[], None]


def next_epoch(epoch: int) -> int:
    """The epoch that follows ``epoch``: +1, wrapping from 2^31-1 to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch >= MAX_EPOCH:
        return 1
    return epoch + 1


class Addressed(Protocol):
    """Anything naming a partition: ``TopicIdPartition``, ``PartitionFetch``, ``PartitionData``."""

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


def session_key(item: Addressed, uses_topic_ids: bool) -> SessionKey:
    """The part of ``item``'s address that identifies a partition in this mode.

    Read from the fields directly: building a ``TopicIdPartition`` per
    partition is most of the cost of creating a 100,000-partition session.
    """
    return (item.topic_id, item.partition) if uses_topic_ids else (item.topic, item.partition)


class PartitionWatcher(Protocol):
    """The broker's side of change notification, so sessions stay free of logs.

    The session calls ``watch`` when a partition joins it and ``unwatch``
    when it leaves (forgotten, or the session is closed or evicted); the
    broker must then call ``session.partition_changed(key)`` whenever that
    partition's log appends, moves its high watermark or log start, or is
    truncated.
    """

    def watch(self, key: TopicIdPartition, session: FetchSession) -> None: ...

    def unwatch(self, key: TopicIdPartition, session: FetchSession) -> None: ...


class CachedPartition:
    """What the session remembers of one partition (Kafka's ``CachedPartition``).

    ``request`` is the latest ``PartitionFetch`` the client sent for it (fetch
    offset, max bytes, log start, leader epochs). ``high_watermark``,
    ``last_stable_offset`` and ``log_start_offset`` are what the client was
    last *told*; -1 means "never told", so a new partition is always sent.
    """

    __slots__ = (
        "changed_at",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "position",
        "request",
    )

    def __init__(self, request: PartitionFetch, position: int) -> None:
        self.request = request
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.position = position
        """Sequence number of the partition's place in session order."""
        self.changed_at = 0
        """Session change clock at the partition's latest log notification."""

    @property
    def key(self) -> TopicIdPartition:
        return self.request.key

    def absorb(self, data: PartitionData) -> bool:
        """Remember what ``data`` tells the client; return whether it must be sent.

        A partition is sent when it has records, an error, a preferred read
        replica, or when its high watermark, last stable offset or log start
        differ from what the client last heard. After an error the cached
        high watermark is forgotten so the partition is sent again once the
        error clears.
        """
        must_send = data.records_size > 0 or data.preferred_read_replica >= 0
        if data.high_watermark != self.high_watermark:
            self.high_watermark = data.high_watermark
            must_send = True
        if data.last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = data.last_stable_offset
            must_send = True
        if data.log_start_offset != self.log_start_offset:
            self.log_start_offset = data.log_start_offset
            must_send = True
        if data.error_code:
            self.high_watermark = -1
            must_send = True
        return must_send

    def caught_up(self, data: PartitionData, read_committed: bool) -> bool:
        """Whether the client's fetch offset has reached the end it may read.

        A client below that end either just got records (it will name the
        partition with a new offset next time; if it does not, Kafka sends the
        same records again, and so do we) or was cut by the response size
        limit: either way the partition must be read on the next fetch.
        """
        bound = data.readable_end
        if bound < 0:
            bound = data.high_watermark
            if read_committed and data.last_stable_offset >= 0:
                bound = data.last_stable_offset
        return self.request.fetch_offset >= bound


class FetchSession:
    """A fetcher's incremental fetch session: id, epoch, partitions, pending set.

    Partitions are kept in *session order*: insertion order, with a
    partition moved to the end whenever it returns records, so that a small
    response size limit still serves every partition in turn (KIP-227's
    starvation rule). The order lives in an ``OrderedDict`` (O(1) per move)
    and, for the pending subset, in each partition's ``position`` number, so
    "pending partitions in session order" is a sort of the pending set only.
    """

    def __init__(
        self,
        session_id: int,
        *,
        privileged: bool,
        uses_topic_ids: bool,
        now_ms: int,
        watcher: PartitionWatcher,
        owner: str = "",
    ) -> None:
        self.id = session_id
        self.owner = owner
        """Who created the session (the broker passes the principal): only the
        owner may continue or close it, whatever connection it comes from."""
        self.privileged = privileged
        """Created by a follower (replica_id >= 0): wins over consumers in the cache."""
        self.uses_topic_ids = uses_topic_ids
        self.created_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        """The epoch the next incremental request must carry."""
        self.watcher = watcher
        self.closed = False
        self.change_clock = 0
        """Counts log notifications, so a reader can tell whether any arrived since."""
        self.partitions_read_total = 0
        """Partitions handed to the planner by incremental fetches of this session."""
        self._partitions: OrderedDict[SessionKey, CachedPartition] = OrderedDict()
        self._pending: dict[SessionKey, CachedPartition] = {}
        self._pending_removals = 0
        self._next_position = 0
        self._listeners: list[ChangeListener] = []
        # Retransmission memory (seed 001): the last incremental request's
        # epoch and fingerprint, and the partitions its response carried.
        self.last_request_epoch: int | None = None
        self.last_request_fingerprint: int | None = None
        self.last_response_keys: list[SessionKey] = []

    @property
    def size(self) -> int:
        """Partitions in the session (a property, not ``len``: empty sessions are real)."""
        return len(self._partitions)

    def __contains__(self, key: TopicIdPartition) -> bool:
        return self.key_of(key) in self._partitions

    def __repr__(self) -> str:
        kind = "follower" if self.privileged else "consumer"
        return f"FetchSession(id={self.id}, epoch={self.epoch}, {kind}, partitions={self.size})"

    def key_of(self, key: TopicIdPartition) -> SessionKey:
        return session_key(key, self.uses_topic_ids)

    def partitions(self) -> Iterator[CachedPartition]:
        """All partitions in session order (O(session): for inspection, not fetches)."""
        return iter(self._partitions.values())

    def get(self, key: TopicIdPartition) -> CachedPartition | None:
        return self._partitions.get(self.key_of(key))

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def is_pending(self, key: TopicIdPartition) -> bool:
        return self.key_of(key) in self._pending

    # -- membership -------------------------------------------------------

    def update(
        self, partitions: Iterable[PartitionFetch], forgotten: Iterable[TopicIdPartition]
    ) -> None:
        """Apply a request: add or update named partitions, then drop forgotten ones.

        Every named partition becomes pending: its fetch offset may have
        moved, so it must be read. The order matches Kafka (a partition both
        named and forgotten ends up removed).
        """
        by_id = self.uses_topic_ids
        for fetch in partitions:
            k = session_key(fetch, by_id)
            cached = self._partitions.get(k)
            if cached is None:
                cached = CachedPartition(fetch, self._take_position())
                self._partitions[k] = cached
                self.watcher.watch(fetch.key, self)
            else:
                cached.request = fetch
            self._pending[k] = cached
        for key in forgotten:
            k = self.key_of(key)
            gone = self._partitions.pop(k, None)
            if gone is not None:
                self._unpend(k)
                self.watcher.unwatch(gone.key, self)

    def populate(
        self,
        partitions: Iterable[PartitionFetch],
        results: Iterable[PartitionData],
        *,
        read_committed: bool,
    ) -> None:
        """Fill a new session from a full fetch: its partitions in request order,
        and what the client was just told of each.

        One pass each, with only the partitions that are not settled made
        pending: this is the one O(session) step, so it is kept lean.
        """
        by_id = self.uses_topic_ids
        entries = self._partitions
        watch = self.watcher.watch
        for fetch in partitions:
            k = session_key(fetch, by_id)
            if k not in entries:
                entries[k] = CachedPartition(fetch, self._take_position())
                watch(fetch.key, self)
        for data in results:
            k = session_key(data, by_id)
            cached = entries.get(k)
            if cached is None:
                continue
            cached.absorb(data)
            if data.error_code or not cached.caught_up(data, read_committed):
                self._pending[k] = cached

    def close(self) -> None:
        """Stop watching every partition and wake any fetch waiting on the session."""
        if self.closed:
            return
        self.closed = True
        for cached in self._partitions.values():
            self.watcher.unwatch(cached.key, self)
        self._pending.clear()
        self._notify()

    # -- change signal ----------------------------------------------------

    def partition_changed(self, key: TopicIdPartition) -> None:
        """The broker's log listener: this partition may have news for the client."""
        k = self.key_of(key)
        cached = self._partitions.get(k)
        if cached is None:
            return
        self.change_clock += 1
        cached.changed_at = self.change_clock
        self._pending[k] = cached
        self._notify()

    def add_listener(self, listener: ChangeListener) -> None:
        """Call ``listener`` on every partition change and on close (long-poll wake-up)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: ChangeListener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def _notify(self) -> None:
        for listener in tuple(self._listeners):
            listener()

    # -- reading and answering -------------------------------------------

    def pending_in_order(self, extra: Collection[SessionKey] = ()) -> list[CachedPartition]:
        """Pending partitions (plus ``extra`` keys still in the session), in session order.

        Cost is O(p log p) in the number p of pending partitions: the rest of
        the session is never visited.
        """
        chosen = self._pending
        if extra:
            chosen = dict(self._pending)
            for k in extra:
                cached = self._partitions.get(k)
                if cached is not None:
                    chosen[k] = cached
        return sorted(chosen.values(), key=_by_position)

    def absorb_results(
        self,
        results: Sequence[PartitionData],
        *,
        read_since: int,
        read_committed: bool,
        always_send: Collection[SessionKey] = (),
    ) -> list[PartitionData]:
        """Fold the planner's results into the session; return those the client must get.

        ``read_since`` is the change clock when the partitions were chosen: a
        partition notified after that stays pending even if its read looked
        idle. Partitions that returned records move to the end of session
        order, keeping their relative order. ``always_send`` forces keys into
        the answer (a retransmitted response must repeat the lost one).
        """
        answer: list[PartitionData] = []
        served: list[SessionKey] = []
        by_id = self.uses_topic_ids
        for data in results:
            k = session_key(data, by_id)
            cached = self._partitions.get(k)
            if cached is None:
                continue
            if cached.absorb(data) or k in always_send:
                answer.append(data)
            if data.records_size > 0:
                served.append(k)
            settled = (
                not data.error_code
                and cached.changed_at <= read_since
                and cached.caught_up(data, read_committed)
            )
            if settled:
                self._unpend(k)
            else:
                self._pending[k] = cached
        for k in served:
            self._move_to_end(k)
        return answer

    def _unpend(self, k: SessionKey) -> None:
        """Drop ``k`` from the pending set, compacting the dict now and then.

        A dict never shrinks on deletion and iterating it walks every slot
        it ever used: after 100,000 partitions were pending once, even an
        empty pending set would cost 100,000 steps per fetch. Rebuilding it
        once removals outnumber what is left keeps iteration O(pending) at an
        amortised O(1) per removal.
        """
        if self._pending.pop(k, None) is None:
            return
        self._pending_removals += 1
        if self._pending_removals > 2 * len(self._pending) + 64:
            # A comprehension re-inserts entry by entry; dict() may copy the table as is.
            self._pending = {key: cached for key, cached in self._pending.items()}
            self._pending_removals = 0

    def _take_position(self) -> int:
        self._next_position += 1
        return self._next_position

    def _move_to_end(self, k: SessionKey) -> None:
        self._partitions.move_to_end(k)
        self._partitions[k].position = self._take_position()


def _by_position(cached: CachedPartition) -> int:
    return cached.position
