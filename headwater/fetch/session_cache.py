"""The broker's bounded set of fetch sessions and its eviction rule (KIP-227).

Sessions cost broker memory, so there are at most
``max.incremental.fetch.session.cache.slots`` of them. A newcomer that
finds the cache full may evict one session, and only:

1. the least recently used session, if it has been idle longer than
   ``min.incremental.fetch.session.eviction.ms``; otherwise
2. the smallest by (privileged, partition count, id) among the *evictable*
   sessions, if the newcomer is bigger by the same ordering. For a follower
   newcomer every consumer session is evictable, and follower sessions
   created longer ago than the eviction time; for a consumer newcomer only
   consumer sessions created longer ago than the eviction time.

Otherwise the newcomer is declined and served without a session (id 0).

**Deviation from Kafka (issues 8, 9, 12): a consumer never evicts a follower
session**, not even an idle or old one. Kafka lets any newcomer take the
globally least recently used session once it is idle past the eviction time,
and lets a larger consumer evict an old follower session; a flood of
consumer sessions can then push replica fetchers to sessionless full
fetches, which costs the whole cluster. So a consumer newcomer looks only at
consumer sessions: their own use order for step 1 and their own sorted lists
for step 2. A follower newcomer takes step 1 among consumer sessions, then
step 2, and only then evicts the least recently used *follower* session if
idle past the eviction time: follower sessions parked in long polls are
often the least recently used of all, and two replica fetchers resetting
their sessions must not evict each other in turn while consumers hold
slots (seen as a cluster test losing a follower session). Likewise the
per-principal and per-client limits count and replace consumer sessions only
(followers are exempt from them). Seed 004 adds an optional minimum session
size and a separate, smaller pool of slots for consumers.

Each of those decisions costs O(log n) compares, not a scan of the sessions:
an ``OrderedDict`` keeps use order, and per kind of session (consumer,
follower) two sorted lists of (size, id) hold the sessions younger and older
than the eviction time; a queue in creation order moves sessions from the
first to the second as they age.
"""

from __future__ import annotations

import bisect
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable

from headwater.fetch.session import FetchSession, PartitionWatcher
from headwater.protocol.fetch_metadata import MAX_EPOCH

SizeKey = tuple[int, int]
"""(partition count, session id): eviction order within one kind of session."""


def random_session_id() -> int:
    """A fresh id: random in 1..2^31-1, so ids leak nothing and cannot be guessed."""
    return secrets.randbelow(MAX_EPOCH) + 1


class _Slot:
    """The cache's bookkeeping for one session (what it is indexed under)."""

    __slots__ = ("mature", "removed", "session", "size")

    def __init__(self, session: FetchSession, size: int) -> None:
        self.session = session
        self.size = size
        self.mature = False
        """Created longer ago than the eviction time (as of the last ripening)."""
        self.removed = False

    @property
    def size_key(self) -> SizeKey:
        return (self.size, self.session.id)


class _Pool:
    """The sessions of one kind, indexed for the eviction rule.

    A plain sorted list with ``bisect`` rather than a balanced tree: the
    lists hold at most one entry per cache slot (1,000 by default), so an
    insert or delete is a binary search plus a short C-level memmove, with
    no dependency.
    """

    __slots__ = ("lru", "mature", "young")

    def __init__(self) -> None:
        self.lru: OrderedDict[int, _Slot] = OrderedDict()
        self.young: list[SizeKey] = []
        self.mature: list[SizeKey] = []

    def __len__(self) -> int:
        return len(self.lru)

    def index(self, slot: _Slot) -> None:
        bisect.insort(self.mature if slot.mature else self.young, slot.size_key)

    def unindex(self, slot: _Slot) -> None:
        keys = self.mature if slot.mature else self.young
        i = bisect.bisect_left(keys, slot.size_key)
        if i < len(keys) and keys[i] == slot.size_key:
            del keys[i]


class FetchSessionCache:
    """All incremental fetch sessions of a broker: admission, use order, eviction.

    It knows nothing of requests: ``headwater.fetch.contexts.new_fetch_context``
    serves each FetchRequest against a cache (so the dependency runs one way,
    contexts -> cache). Metrics are plain attributes the broker exports
    (names follow Kafka's FetchSessionCache group).
    """

    def __init__(
        self,
        *,
        max_slots: int = 1000,
        eviction_ms: int = 120_000,
        min_session_size: int = 0,
        consumer_slots: int | None = None,
        retransmit_enabled: bool = True,
        new_session_id: Callable[[], int] = random_session_id,
        max_slots_per_client: int | None = None,
        slots_per_owner: int | None = None,
    ) -> None:
        """Settings map to broker config keys.

        ``max_slots``: max.incremental.fetch.session.cache.slots;
        ``eviction_ms``: min.incremental.fetch.session.eviction.ms;
        ``min_session_size``: min.incremental.fetch.session.size (0 = any);
        ``consumer_slots``: incremental.fetch.session.consumer.cache.slots
        (None = all slots); ``retransmit_enabled``:
        headwater.fetch.session.retransmit.enable; ``max_slots_per_client``:
        headwater.fetch.session.slots.per.client (None = no limit), so one
        client address cannot take every consumer slot; ``slots_per_owner``:
        max.incremental.fetch.session.cache.slots.per.principal (None = no
        limit; followers are exempt).
        """
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.min_session_size = min_session_size
        self.consumer_slots = max_slots if consumer_slots is None else consumer_slots
        self.retransmit_enabled = retransmit_enabled
        self._new_session_id = new_session_id
        self.max_slots_per_client = max_slots_per_client
        self._client_of: dict[int, str] = {}  # session id -> client address
        self._per_client: dict[str, int] = {}
        self.slots_per_owner = slots_per_owner
        self._by_owner: dict[str, OrderedDict[int, _Slot]] = {}

        self._slots: dict[int, _Slot] = {}
        self._lru: OrderedDict[int, _Slot] = OrderedDict()
        self._consumers = _Pool()
        self._followers = _Pool()
        self._ripening: deque[_Slot] = deque()

        # Metrics.
        self.num_incremental_fetch_partitions_cached = 0
        """NumIncrementalFetchPartitionsCached: sum of the sessions' sizes."""
        self.evictions_total = 0
        """Sessions evicted for a newcomer (IncrementalFetchSessionEvictionsPerSec
        is its rate); a client closing its own session does not count."""
        self.full_fetches_total = 0
        """Fetches answered in full: sessionless, or creating/resetting a session."""
        self.incremental_fetches_total = 0
        self.session_errors_total = 0
        """Fetches refused with a top-level session error (70, 71, 106)."""
        self.incremental_partitions_read_total = 0
        """Partitions handed to the planner by incremental fetches: O(changed)."""
        self.client_limit_declines_total = 0
        """New sessions declined because their client address held its limit."""
        self.foreign_session_attempts_total = 0
        """Requests naming a live session of another owner (refused with error 70)."""

    # -- lookup and metrics -----------------------------------------------

    @property
    def num_incremental_fetch_sessions(self) -> int:
        """NumIncrementalFetchSessions."""
        return len(self._slots)

    @property
    def num_follower_sessions(self) -> int:
        """Sessions of replica fetchers: the privileged ones of KIP-227's eviction rules."""
        return len(self._followers)

    def __contains__(self, session_id: int) -> bool:
        return session_id in self._slots

    def get(self, session_id: int) -> FetchSession | None:
        slot = self._slots.get(session_id)
        return None if slot is None else slot.session

    def sessions(self) -> list[FetchSession]:
        return [slot.session for slot in self._slots.values()]

    # -- life cycle -------------------------------------------------------

    def maybe_create_session(
        self,
        now_ms: int,
        *,
        privileged: bool,
        size: int,
        uses_topic_ids: bool,
        watcher: PartitionWatcher,
        populate: Callable[[FetchSession], None],
        client: str = "",
        owner: str = "",
    ) -> FetchSession | None:
        """Admit a new session of ``size`` partitions if there is or can be made room.

        ``populate`` fills the session (and starts watching its partitions)
        only once it is admitted, so a declined fetch costs nothing extra.
        """
        if size < self.min_session_size:
            return None
        limit = self.max_slots_per_client
        if not privileged and limit is not None and self._per_client.get(client, 0) >= limit:
            # Declined, not evicting the client's own sessions: its extra
            # consumers keep working with sessionless fetches.
            self.client_limit_declines_total += 1
            return None
        if not privileged and not self._room_for_owner(owner, size, now_ms):
            return None
        if not self._make_room(privileged, size, now_ms):
            return None
        session = FetchSession(
            self._unused_session_id(),
            privileged=privileged,
            uses_topic_ids=uses_topic_ids,
            now_ms=now_ms,
            watcher=watcher,
            owner=owner,
        )
        populate(session)  # may be a no-op: the session is then filled to ``size`` later
        if not privileged:  # followers are exempt from the per-client limit
            self._client_of[session.id] = client
            self._per_client[client] = self._per_client.get(client, 0) + 1
        slot = _Slot(session, size)
        self._slots[session.id] = slot
        self._lru[session.id] = slot
        pool = self._pool(session)
        pool.lru[session.id] = slot
        pool.index(slot)
        self._ripening.append(slot)
        if not privileged:  # ... and from the per-principal one
            self._by_owner.setdefault(owner, OrderedDict())[session.id] = slot
        self.num_incremental_fetch_partitions_cached += slot.size
        return session

    def sessions_of(self, owner: str) -> int:
        """Consumer sessions held by ``owner`` (what the per-principal limit counts)."""
        owned = self._by_owner.get(owner)
        return len(owned) if owned else 0

    def _room_for_owner(self, owner: str, size: int, now_ms: int) -> bool:
        """Per-principal limit: a tenant at its limit replaces its own least
        recently used session, never someone else's, so flooding the cache
        only churns the flooder's own sessions."""
        limit = self.slots_per_owner
        if limit is None:
            return True
        if limit <= 0:
            return False
        owned = self._by_owner.get(owner)
        while owned and len(owned) >= limit:
            self._evict(next(iter(owned.values())))
            owned = self._by_owner.get(owner)
        return True

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Mark ``session`` used now and re-index it under its current size."""
        slot = self._slots.get(session.id)
        if slot is None or slot.session is not session:
            return
        session.last_used_ms = now_ms
        self._lru.move_to_end(session.id)
        if not session.privileged:
            self._by_owner[session.owner].move_to_end(session.id)
        pool = self._pool(session)
        pool.lru.move_to_end(session.id)
        size = session.size
        if size != slot.size:
            pool.unindex(slot)
            self.num_incremental_fetch_partitions_cached += size - slot.size
            slot.size = size
            pool.index(slot)

    def remove(self, session_id: int) -> FetchSession | None:
        """Close a session at its client's request (not an eviction)."""
        slot = self._slots.get(session_id)
        if slot is None:
            return None
        self._drop(slot)
        return slot.session

    # -- eviction ---------------------------------------------------------

    def _make_room(self, privileged: bool, size: int, now_ms: int) -> bool:
        self._ripen(now_ms)
        if not privileged and len(self._consumers) >= self.consumer_slots:
            return self._evict_for(privileged, size, now_ms)
        if len(self._slots) < self.max_slots:
            return True
        return self._evict_for(privileged, size, now_ms)

    def _evict_for(self, privileged: bool, size: int, now_ms: int) -> bool:
        # A consumer newcomer sees consumer sessions only (see the module docstring).
        # A follower newcomer takes a consumer's slot before another follower's:
        # with follower sessions parked in long polls they are often the least
        # recently used, and two replica fetchers must not evict each other in turn.
        if self._evict_stale(self._consumers.lru, now_ms):
            return True
        victim = self._smallest_evictable(privileged)
        if victim is not None and (privileged, size, 0) > (
            victim.session.privileged,
            victim.size,
            victim.session.id,
        ):
            self._evict(victim)
            return True
        return privileged and self._evict_stale(self._followers.lru, now_ms)

    def _evict_stale(self, lru: OrderedDict[int, _Slot], now_ms: int) -> bool:
        """Evict the least recently used session of ``lru`` if idle past the eviction time."""
        if not lru:
            return False
        stalest = next(iter(lru.values()))
        if now_ms - stalest.session.last_used_ms > self.eviction_ms:
            self._evict(stalest)
            return True
        return False

    def _smallest_evictable(self, privileged: bool) -> _Slot | None:
        consumers, followers = self._consumers, self._followers
        if privileged:
            # Every consumer session, and follower sessions past the eviction time.
            firsts = consumers.young[:1] + consumers.mature[:1]
            if firsts:
                return self._slots[min(firsts)[1]]
            return self._slots[followers.mature[0][1]] if followers.mature else None
        # Only consumer sessions past the eviction time: never a follower's.
        return self._slots[consumers.mature[0][1]] if consumers.mature else None

    def _ripen(self, now_ms: int) -> None:
        """Move sessions created longer ago than the eviction time to the mature lists."""
        queue = self._ripening
        while queue and now_ms - queue[0].session.created_ms > self.eviction_ms:
            slot = queue.popleft()
            if slot.removed:
                continue
            pool = self._pool(slot.session)
            pool.unindex(slot)
            slot.mature = True
            pool.index(slot)

    def _evict(self, slot: _Slot) -> None:
        self.evictions_total += 1
        self._drop(slot)

    def _drop(self, slot: _Slot) -> None:
        session = slot.session
        del self._slots[session.id]
        del self._lru[session.id]
        owned = self._by_owner.get(session.owner)
        if owned is not None and owned.pop(session.id, None) is not None and not owned:
            del self._by_owner[session.owner]
        pool = self._pool(session)
        del pool.lru[session.id]
        pool.unindex(slot)
        slot.removed = True
        client = self._client_of.pop(session.id, None)
        if client is not None:
            left = self._per_client[client] - 1
            if left:
                self._per_client[client] = left
            else:
                del self._per_client[client]
        self.num_incremental_fetch_partitions_cached -= slot.size
        session.close()

    def _pool(self, session: FetchSession) -> _Pool:
        return self._followers if session.privileged else self._consumers

    def _unused_session_id(self) -> int:
        while True:
            session_id = self._new_session_id()
            if session_id > 0 and session_id not in self._slots:
                return session_id
