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

Size: one data structure, the KIP-227 session with its compact per-partition
slots, whose memory layout and change tracking (pending set, change clock,
listeners) are shared by every method; splitting it would expose that layout.
"""

from __future__ import annotations

import contextlib
import uuid
from array import array
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Sequence
from typing import Protocol

from headwater.protocol.fetch_metadata import (
    INITIAL_EPOCH,
    next_epoch,
)
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    PartitionData,
    PartitionFetch,
    TopicIdPartition,
)
from headwater.steps import drain

SessionKey = tuple[uuid.UUID | str, int]
"""How a session indexes a partition: (topic id, partition) in topic-id mode
(v13+), (topic name, partition) otherwise. The other half of a
``TopicIdPartition`` may be missing (a forgotten entry carries only the id,
a planner may fill in an id the request lacked), so it is not compared."""

ChangeListener = Callable[[], None]


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

    def release(self, session: FetchSession, keys: Iterator[TopicIdPartition]) -> None:
        """``session`` closed: unwatch all of ``keys``, at once or later.

        Unwatching 100,000 partitions takes longer than any client may wait,
        so a broker may spread it over time; the closed session ignores
        changes meanwhile.
        """
        ...


class CachedPartition:
    """A read-only view of what the session remembers of one partition (Kafka's
    ``CachedPartition``), made on demand for inspection and tests.

    The session itself keeps no object per partition (see :class:`FetchSession`).
    ``high_watermark``, ``last_stable_offset`` and ``log_start_offset`` are what
    the client was last *told*; -1 means "never told".
    """

    __slots__ = ("_i", "_s")

    def __init__(self, session: FetchSession, index: int) -> None:
        self._s = session
        self._i = index

    @property
    def request(self) -> PartitionFetch:
        """The latest ``PartitionFetch`` the client sent for it (rebuilt from the arrays)."""
        return self._s._request(self._i)

    @property
    def key(self) -> TopicIdPartition:
        return self.request.key

    @property
    def high_watermark(self) -> int:
        return self._s._told_hw[self._i]

    @property
    def last_stable_offset(self) -> int:
        return self._s._told_lso[self._i]

    @property
    def log_start_offset(self) -> int:
        return self._s._told_start[self._i]

    @property
    def position(self) -> int:
        """Sequence number of the partition's place in session order."""
        return self._s._position[self._i]


class _PartitionIndex:
    """partition number -> slot, for one topic of one session.

    Dense (an ``array`` of slot + 1, 0 for absent: 4 bytes per partition)
    while the partition numbers are dense, which is what consumers and
    followers ask for; a dict once a client names sparse, large partition
    numbers, so a request for partition 2^31-1 cannot allocate gigabytes.
    """

    __slots__ = ("count", "dense", "sparse")

    def __init__(self) -> None:
        self.dense: array[int] | None = array("i")
        self.sparse: dict[int, int] | None = None
        self.count = 0

    def get(self, partition: int) -> int:
        """The slot of ``partition``, or -1."""
        dense = self.dense
        if dense is not None:
            return dense[partition] - 1 if 0 <= partition < len(dense) else -1
        assert self.sparse is not None
        return self.sparse.get(partition, -1)

    def set(self, partition: int, slot: int) -> None:
        dense = self.dense
        if dense is not None:
            if 0 <= partition < len(dense):
                if not dense[partition]:
                    self.count += 1
                dense[partition] = slot + 1
                return
            if 0 <= partition < 4 * self.count + 1024:
                dense.extend(_zeros(partition + 1 - len(dense)))
                dense[partition] = slot + 1
                self.count += 1
                return
            self.sparse = {p: v - 1 for p, v in enumerate(dense) if v}
            self.dense = None
        assert self.sparse is not None
        if partition not in self.sparse:
            self.count += 1
        self.sparse[partition] = slot

    def delete(self, partition: int) -> None:
        dense = self.dense
        if dense is not None:
            if 0 <= partition < len(dense) and dense[partition]:
                dense[partition] = 0
                self.count -= 1
            return
        assert self.sparse is not None
        if self.sparse.pop(partition, None) is not None:
            self.count -= 1


def _zeros(n: int) -> array[int]:
    return array("i", bytes(4 * n))


ADD_STEP = 64
"""Partitions a session adds or absorbs between two yields of its step generators
(adding one may create its partition's ``Log`` object: 256 made 13-17 ms steps)."""


class FetchSession:
    """A fetcher's incremental fetch session: id, epoch, partitions, pending set.

    Memory: a session may hold 100,000 partitions and a broker 1,000
    sessions, so a partition costs no Python object. Its state lives in one
    slot of parallel ``array``s (fetch offset, log start, max bytes, leader
    epochs, what the client was last told, session position, last change):
    76 bytes. Topics are numbered per session; each topic maps partition
    numbers to slots with a :class:`_PartitionIndex`. Freed slots (forgotten
    partitions) are reused.

    Partitions are kept in *session order*: insertion order, with a
    partition moved to the end whenever it returns records, so that a small
    response size limit still serves every partition in turn (KIP-227's
    starvation rule). The order is each slot's ``position`` number, so
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
        self.wake_clock = 0
        """Counts the notifications that wake a parked fetch (not a follower's high
        watermark news), so a fetch about to park can tell whether one arrived since
        its read."""
        self.partitions_read_total = 0
        """Partitions handed to the planner by incremental fetches of this session."""
        # Per topic: its session key half, id, name and partition index.
        self._topic_slot: dict[uuid.UUID | str, int] = {}
        self._topic_by_name: dict[str, int] = {}
        self._topic_ids: list[uuid.UUID] = []
        self._topic_names: list[str] = []
        self._topic_index: list[_PartitionIndex] = []
        # Per partition slot (see the class docstring); _topic is -1 in a free slot.
        self._fetch_offset = array("q")
        self._log_start = array("q")
        self._told_hw = array("q")
        self._told_lso = array("q")
        self._told_start = array("q")
        self._position = array("q")
        self._changed_at = array("q")
        self._topic = array("i")
        self._partition = array("i")
        self._max_bytes = array("i")
        self._leader_epoch = array("i")
        self._last_epoch = array("i")
        self._free: list[int] = []
        self._size = 0
        self._pending: set[int] = set()
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
        return self._size

    def __contains__(self, key: TopicIdPartition) -> bool:
        return self._slot_of(self.key_of(key)) >= 0

    def __repr__(self) -> str:
        kind = "follower" if self.privileged else "consumer"
        return f"FetchSession(id={self.id}, epoch={self.epoch}, {kind}, partitions={self.size})"

    def key_of(self, key: TopicIdPartition) -> SessionKey:
        return session_key(key, self.uses_topic_ids)

    def partitions(self) -> Iterator[CachedPartition]:
        """All partitions in session order (O(session): for inspection, not fetches)."""
        topic, position = self._topic, self._position
        live = [i for i in range(len(topic)) if topic[i] >= 0]
        live.sort(key=position.__getitem__)
        return (CachedPartition(self, i) for i in live)

    def get(self, key: TopicIdPartition) -> CachedPartition | None:
        slot = self._slot_of(self.key_of(key))
        return None if slot < 0 else CachedPartition(self, slot)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def is_pending(self, key: TopicIdPartition) -> bool:
        return self._slot_of(self.key_of(key)) in self._pending

    # -- slots --------------------------------------------------------------

    def _slot_of(self, k: SessionKey) -> int:
        t = self._topic_slot.get(k[0])
        return -1 if t is None else self._topic_index[t].get(k[1])

    def _topic_of(self, fetch: PartitionFetch) -> int:
        half: uuid.UUID | str = fetch.topic_id if self.uses_topic_ids else fetch.topic
        t = self._topic_slot.get(half)
        if t is None:
            t = self._topic_slot[half] = len(self._topic_ids)
            self._topic_ids.append(fetch.topic_id)
            self._topic_names.append(fetch.topic)
            self._topic_index.append(_PartitionIndex())
        else:
            # Remember the other half when a request brings it (a planner may
            # fill in an id, a v13 request resolves a name).
            if fetch.topic and not self._topic_names[t]:
                self._topic_names[t] = fetch.topic
            if fetch.topic_id != ZERO_UUID and self._topic_ids[t] == ZERO_UUID:
                self._topic_ids[t] = fetch.topic_id
        if fetch.topic:
            self._topic_by_name.setdefault(fetch.topic, t)
        return t

    def _store(self, i: int, fetch: PartitionFetch) -> None:
        self._fetch_offset[i] = fetch.fetch_offset
        self._log_start[i] = fetch.log_start_offset
        self._max_bytes[i] = fetch.partition_max_bytes
        self._leader_epoch[i] = fetch.current_leader_epoch
        self._last_epoch[i] = fetch.last_fetched_epoch

    def _add(self, fetch: PartitionFetch, t: int) -> int:
        """A new slot for ``fetch`` in topic ``t``, last in session order, never told."""
        position = self._take_position()
        if self._free:
            i = self._free.pop()
            self._topic[i] = t
            self._partition[i] = fetch.partition
            self._told_hw[i] = self._told_lso[i] = self._told_start[i] = -1
            self._position[i] = position
            self._changed_at[i] = 0
            self._store(i, fetch)
        else:
            i = len(self._topic)
            self._topic.append(t)
            self._partition.append(fetch.partition)
            self._fetch_offset.append(fetch.fetch_offset)
            self._log_start.append(fetch.log_start_offset)
            self._max_bytes.append(fetch.partition_max_bytes)
            self._leader_epoch.append(fetch.current_leader_epoch)
            self._last_epoch.append(fetch.last_fetched_epoch)
            self._told_hw.append(-1)
            self._told_lso.append(-1)
            self._told_start.append(-1)
            self._position.append(position)
            self._changed_at.append(0)
        self._topic_index[t].set(fetch.partition, i)
        self._size += 1
        return i

    def _remove(self, i: int) -> None:
        t = self._topic[i]
        self._topic_index[t].delete(self._partition[i])
        self._topic[i] = -1
        self._free.append(i)
        self._size -= 1

    def _request(self, i: int) -> PartitionFetch:
        t = self._topic[i]
        return PartitionFetch(
            self._topic_ids[t],
            self._topic_names[t],
            self._partition[i],
            self._fetch_offset[i],
            self._log_start[i],
            self._max_bytes[i],
            self._leader_epoch[i],
            self._last_epoch[i],
        )

    def _key(self, i: int) -> TopicIdPartition:
        t = self._topic[i]
        return TopicIdPartition(self._topic_ids[t], self._topic_names[t], self._partition[i])

    def _session_key(self, i: int) -> SessionKey:
        t = self._topic[i]
        half = self._topic_ids[t] if self.uses_topic_ids else self._topic_names[t]
        return (half, self._partition[i])

    # -- membership -------------------------------------------------------

    def update(
        self, partitions: Iterable[PartitionFetch], forgotten: Iterable[TopicIdPartition]
    ) -> None:
        """Apply a request: add or update named partitions, then drop forgotten ones.

        Every named partition becomes pending: its fetch offset may have
        moved, so it must be read. The order matches Kafka (a partition both
        named and forgotten ends up removed).
        """
        drain(self.update_steps(partitions, forgotten))

    def update_steps(
        self, partitions: Iterable[PartitionFetch], forgotten: Iterable[TopicIdPartition]
    ) -> Generator[None, None, None]:
        """:meth:`update`, yielding every ``ADD_STEP`` partitions (an incremental
        request may name 100,000 of them: ~120 ms at once, measured)."""
        for n, fetch in enumerate(partitions, 1):
            t = self._topic_of(fetch)
            i = self._topic_index[t].get(fetch.partition)
            if i < 0:
                i = self._add(fetch, t)
                self.watcher.watch(fetch.key, self)
            else:
                self._store(i, fetch)
            self._pending.add(i)
            if n % ADD_STEP == 0:
                yield None
                if self.closed:
                    return  # evicted meanwhile: watch nothing more
        for n, key in enumerate(forgotten, 1):
            i = self._slot_of(self.key_of(key))
            if i >= 0:
                gone = self._key(i)
                self._unpend(i)
                self._remove(i)
                self.watcher.unwatch(gone, self)
            if n % ADD_STEP == 0:
                yield None

    def add_steps(self, partitions: Sequence[PartitionFetch]) -> Generator[None, None, None]:
        """Add the partitions of a new session, watching each; yields every ``ADD_STEP``.

        The first step of a full fetch that creates a session, run *before*
        its partitions are read: a log change after a partition's read then
        reaches the session and keeps it pending (see :meth:`absorb_steps`).
        Stops early if the session is closed (evicted) meanwhile.
        """
        watch = self.watcher.watch
        index = self._topic_index
        for start in range(0, len(partitions), ADD_STEP):
            if self.closed:
                return
            for fetch in partitions[start : start + ADD_STEP]:
                t = self._topic_of(fetch)
                if index[t].get(fetch.partition) < 0:
                    self._add(fetch, t)
                    watch(fetch.key, self)
            yield None

    def absorb_steps(
        self, results: Sequence[PartitionData], *, read_since: int, read_committed: bool
    ) -> Generator[None, None, None]:
        """Remember what a full fetch's response tells the client; yields every ``ADD_STEP``.

        A partition stays pending when it is not settled: an error, the client
        not caught up, or a change notified after ``read_since``.
        """
        for start in range(0, len(results), ADD_STEP):
            if self.closed:
                return
            for data in results[start : start + ADD_STEP]:
                i = self._slot_of(session_key(data, self.uses_topic_ids))
                if i < 0:
                    continue
                self._absorb(i, data)
                if self._settled(i, data, read_since, read_committed):
                    self._unpend(i)  # notified before its read: the read has it
                else:
                    self._pending.add(i)
            yield None

    def populate(
        self,
        partitions: Sequence[PartitionFetch],
        results: Sequence[PartitionData],
        *,
        read_committed: bool,
    ) -> None:
        """Fill a new session at once from a full fetch: its partitions in request
        order, and what the client was just told of each."""
        for _ in self.add_steps(partitions):
            pass
        for _ in self.absorb_steps(
            results, read_since=self.change_clock, read_committed=read_committed
        ):
            pass

    def close(self) -> None:
        """Stop watching every partition and wake any fetch waiting on the session."""
        if self.closed:
            return
        self.closed = True
        self.watcher.release(self, self._watched_keys())
        self._pending.clear()
        self._notify()

    def _watched_keys(self) -> Iterator[TopicIdPartition]:
        """The key of every partition, read lazily (a closed session's slots no longer change)."""
        topic = self._topic
        for i in range(len(topic)):
            if topic[i] >= 0:
                yield self._key(i)

    # -- change signal ----------------------------------------------------

    def partition_changed(self, key: TopicIdPartition) -> None:
        """The broker's log listener: this partition may have news for the client."""
        if not self.closed:
            self._changed(self._slot_of(self.key_of(key)))

    def log_changed(self, topic: str, partition: int, wake: bool = True) -> None:
        """Like :meth:`partition_changed`, by topic name (what a log knows itself by).

        ``wake`` False: news for the next response that does not complete a parked
        fetch (a follower's, on a high watermark move alone: Kafka's DelayedFetch
        for a follower waits for bytes, and the next answer carries the new HW).
        """
        if self.closed:
            return  # still watched while its release runs
        t = self._topic_by_name.get(topic)
        if t is not None:
            self._changed(self._topic_index[t].get(partition), wake)

    def _changed(self, i: int, wake: bool = True) -> None:
        if i < 0:
            return
        self.change_clock += 1
        self._changed_at[i] = self.change_clock
        self._pending.add(i)
        if wake:
            self.wake_clock += 1
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

    def pending_requests(self, extra: Collection[SessionKey] = ()) -> list[PartitionFetch]:
        """Pending partitions (plus ``extra`` keys still in the session), in session order.

        Cost is O(p log p) in the number p of pending partitions: the rest of
        the session is never visited.
        """
        return drain(self.pending_requests_steps(extra))

    def pending_requests_steps(
        self, extra: Collection[SessionKey] = ()
    ) -> Generator[None, None, list[PartitionFetch]]:
        """:meth:`pending_requests`, yielding every ``ADD_STEP`` partitions built."""
        chosen: Collection[int] = self._pending
        if extra:
            chosen = set(self._pending)
            for k in extra:
                i = self._slot_of(k)
                if i >= 0:
                    chosen.add(i)
        ordered = sorted(chosen, key=self._position.__getitem__)
        out: list[PartitionFetch] = []
        request = self._request
        for start in range(0, len(ordered), ADD_STEP):
            out.extend(request(i) for i in ordered[start : start + ADD_STEP])
            if start + ADD_STEP < len(ordered):
                yield None
        return out

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
        return drain(
            self.absorb_results_steps(
                results,
                read_since=read_since,
                read_committed=read_committed,
                always_send=always_send,
            )
        )

    def absorb_results_steps(
        self,
        results: Sequence[PartitionData],
        *,
        read_since: int,
        read_committed: bool,
        always_send: Collection[SessionKey] = (),
    ) -> Generator[None, None, list[PartitionData]]:
        """:meth:`absorb_results`, yielding every ``ADD_STEP`` partitions."""
        answer: list[PartitionData] = []
        served: list[int] = []
        by_id = self.uses_topic_ids
        for n, data in enumerate(results, 1):
            if n % ADD_STEP == 0:
                yield None
            k = session_key(data, by_id)
            i = self._slot_of(k)
            if i < 0:
                continue
            if self._absorb(i, data) or k in always_send:
                answer.append(data)
            if data.records_size > 0:
                served.append(i)
            if self._settled(i, data, read_since, read_committed):
                self._unpend(i)
            else:
                self._pending.add(i)
        for i in served:
            self._position[i] = self._take_position()
        return answer

    def _absorb(self, i: int, data: PartitionData) -> bool:
        """Remember what ``data`` tells the client; return whether it must be sent.

        A partition is sent when it has records, an error, a preferred read
        replica, or when its high watermark, last stable offset or log start
        differ from what the client last heard. After an error the cached
        high watermark is forgotten so the partition is sent again once the
        error clears.
        """
        must_send = data.records_size > 0 or data.preferred_read_replica >= 0
        if data.high_watermark != self._told_hw[i]:
            self._told_hw[i] = data.high_watermark
            must_send = True
        if data.last_stable_offset != self._told_lso[i]:
            self._told_lso[i] = data.last_stable_offset
            must_send = True
        if data.log_start_offset != self._told_start[i]:
            self._told_start[i] = data.log_start_offset
            must_send = True
        if data.error_code:
            self._told_hw[i] = -1
            must_send = True
        return must_send

    def _settled(self, i: int, data: PartitionData, read_since: int, read_committed: bool) -> bool:
        """Nothing more to tell: no error, no change since the read, and caught up.

        A client below the end it may read either just got records (it will
        name the partition with a new offset next time; if it does not, Kafka
        sends the same records again, and so do we) or was cut by the
        response size limit: either way the partition must be read again.
        """
        if data.error_code or self._changed_at[i] > read_since:
            return False
        bound = data.readable_end
        if bound < 0:
            bound = data.high_watermark
            if read_committed and data.last_stable_offset >= 0:
                bound = data.last_stable_offset
        return self._fetch_offset[i] >= bound

    def _unpend(self, i: int) -> None:
        """Drop slot ``i`` from the pending set, compacting the set now and then.

        A set never shrinks on deletion and iterating it walks every slot it
        ever used: after 100,000 partitions were pending once, even an empty
        pending set would cost 100,000 steps per fetch. Rebuilding it once
        removals outnumber what is left keeps iteration O(pending) at an
        amortised O(1) per removal.
        """
        if i not in self._pending:
            return
        self._pending.discard(i)
        self._pending_removals += 1
        if self._pending_removals > 2 * len(self._pending) + 64:
            self._pending = {i for i in self._pending}  # a fresh, small table
            self._pending_removals = 0

    def _take_position(self) -> int:
        self._next_position += 1
        return self._next_position
