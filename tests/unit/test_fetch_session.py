"""KIP-227 fetch sessions: the (session id, epoch) table and what responses carry.

The support classes at the top (``World``, ``Client``) are shared by the
other test_fetch_session*.py files: ``World`` is a set of in-memory logs
that is also the broker's ``PartitionWatcher`` and a KIP-74 stand-in for the
planner; ``Client`` follows the client session handler's rules.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from headwater.fetch.contexts import (
    FetchContext,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
    new_fetch_context,
)
from headwater.fetch.session import FetchSession
from headwater.fetch.session_cache import FetchSessionCache
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_metadata import MAX_EPOCH, next_epoch
from headwater.protocol.fetch_types import (
    FetchRequestData,
    FetchResponseData,
    PartitionData,
    PartitionFetch,
    TopicIdPartition,
)

RECORD_SIZE = 10
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6

TP = tuple[str, int]


def topic_id(topic: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, topic)


@dataclass
class MemoryLog:
    high_watermark: int = 0
    log_start_offset: int = 0
    last_stable_offset: int | None = None  # None: equal to the high watermark
    error_code: int = 0
    preferred_read_replica: int = -1

    @property
    def lso(self) -> int:
        return self.high_watermark if self.last_stable_offset is None else self.last_stable_offset


@dataclass
class World:
    """In-memory logs, the broker's PartitionWatcher, and a KIP-74 stand-in planner."""

    logs: dict[TP, MemoryLog] = field(default_factory=dict)
    watchers: dict[TP, set[FetchSession]] = field(default_factory=dict)
    partitions_read: int = 0

    @classmethod
    def with_partitions(cls, count: int, topic: str = "t", records: int = 0) -> World:
        return cls({(topic, p): MemoryLog(high_watermark=records) for p in range(count)})

    # PartitionWatcher
    def watch(self, key: TopicIdPartition, session: FetchSession) -> None:
        self.watchers.setdefault((key.topic, key.partition), set()).add(session)

    def unwatch(self, key: TopicIdPartition, session: FetchSession) -> None:
        watching = self.watchers.get((key.topic, key.partition))
        if watching is not None:
            watching.discard(session)
            if not watching:
                del self.watchers[(key.topic, key.partition)]

    def release(self, session: FetchSession, keys: Iterator[TopicIdPartition]) -> None:
        for key in keys:
            self.unwatch(key, session)

    def watching(self, tp: TP) -> set[FetchSession]:
        return self.watchers.get(tp, set())

    # log changes, each notifying the sessions watching the partition
    def append(self, tp: TP, records: int = 1) -> None:
        self.logs[tp].high_watermark += records
        self.notify(tp)

    def set_log_start(self, tp: TP, offset: int) -> None:
        self.logs[tp].log_start_offset = offset
        self.notify(tp)

    def set_error(self, tp: TP, error_code: int) -> None:
        self.logs[tp].error_code = error_code
        self.notify(tp)

    def notify(self, tp: TP) -> None:
        key = TopicIdPartition(topic_id(tp[0]), tp[0], tp[1])
        for session in list(self.watching(tp)):
            session.partition_changed(key)

    # planner stand-in
    def read(
        self,
        to_read: Sequence[PartitionFetch],
        *,
        max_bytes: int = 1 << 30,
        read_committed: bool = False,
    ) -> list[PartitionData]:
        """Serve in order: each partition up to its max bytes and what is left of
        ``max_bytes``; the first partition with data gets at least one record."""
        self.partitions_read += len(to_read)
        remaining = max_bytes
        first = True
        out: list[PartitionData] = []
        for p in to_read:
            data = PartitionData(p.topic_id, p.topic, p.partition)
            out.append(data)
            log = self.logs.get((p.topic, p.partition))
            if log is None:
                data.error_code = UNKNOWN_TOPIC_OR_PARTITION
                continue
            data.high_watermark = log.high_watermark
            data.last_stable_offset = log.lso
            data.log_start_offset = log.log_start_offset
            data.preferred_read_replica = log.preferred_read_replica
            if log.error_code:
                data.error_code = log.error_code
                continue
            if not log.log_start_offset <= p.fetch_offset <= log.high_watermark:
                data.error_code = OFFSET_OUT_OF_RANGE
                continue
            bound = log.lso if read_committed else log.high_watermark
            available = max(0, bound - p.fetch_offset)
            count = min(available, min(p.partition_max_bytes, remaining) // RECORD_SIZE)
            if first and available and not count:
                count = 1
            if count:
                data.records = b"r" * (count * RECORD_SIZE)
                remaining = max(0, remaining - count * RECORD_SIZE)
                first = False
        return out

    def serve(
        self, cache: FetchSessionCache, request: FetchRequestData, now_ms: int = 0
    ) -> tuple[FetchContext, FetchResponseData]:
        """What the broker does with one request, without the long-poll."""
        ctx = new_fetch_context(cache, request, now_ms, self)
        if ctx.error_code:
            return ctx, ctx.update_and_generate_response([], now_ms)
        results = self.read(
            ctx.partitions_to_read(),
            max_bytes=request.max_bytes,
            read_committed=request.isolation_level == 1,
        )
        return ctx, ctx.update_and_generate_response(results, now_ms)


def fetch(topic: str, partition: int, offset: int = 0, **kw: int) -> PartitionFetch:
    return PartitionFetch(topic_id(topic), topic, partition, offset, **kw)


def tpkey(topic: str, partition: int) -> TopicIdPartition:
    return TopicIdPartition(topic_id(topic), topic, partition)


def request(
    session_id: int,
    epoch: int,
    partitions: Sequence[PartitionFetch] = (),
    forgotten: Sequence[TopicIdPartition] = (),
    **kw: Any,
) -> FetchRequestData:
    kw.setdefault("version", 12)
    return FetchRequestData(
        session_id=session_id,
        session_epoch=epoch,
        partitions=list(partitions),
        forgotten=list(forgotten),
        **kw,
    )


def tps(response: FetchResponseData) -> list[TP]:
    return [(p.topic, p.partition) for p in response.partitions]


class Client:
    """A fetcher that keeps a session the way Kafka's client session handler does.

    Error 70 -> next request (0, 0); other top-level errors -> (id, 0); a
    response with session id 0 -> (0, 0). Incremental requests name only
    partitions whose fetch offset changed (or are new) and forget the rest.
    """

    def __init__(
        self,
        cache: FetchSessionCache,
        world: World,
        partitions: Sequence[TP],
        *,
        replica_id: int = -1,
        max_bytes: int = 1 << 30,
        version: int = 12,
    ) -> None:
        self.cache = cache
        self.world = world
        self.replica_id = replica_id
        self.max_bytes = max_bytes
        self.version = version
        self.wanted: list[TP] = list(partitions)
        self.offsets: dict[TP, int] = dict.fromkeys(self.wanted, 0)
        self.view: dict[TP, tuple[int, int, int]] = {}  # (high watermark, log start, error)
        self.session_id = 0
        self.epoch = 0
        self.in_session: dict[TP, int] = {}  # what the broker's session holds: offset
        self.consume = True  # advance offsets past received records

    def want(self, tp: TP) -> None:
        if tp not in self.offsets:
            self.wanted.append(tp)
            self.offsets[tp] = 0

    def drop(self, tp: TP) -> None:
        if tp in self.offsets:
            self.wanted.remove(tp)
            del self.offsets[tp]  # what it last heard stays: it may want it back

    def build(self) -> FetchRequestData:
        full = self.epoch in (0, -1)
        if full:
            names = list(self.wanted)
            forgotten: list[TopicIdPartition] = []
        else:
            names = [tp for tp in self.wanted if self.in_session.get(tp) != self.offsets[tp]]
            forgotten = [tpkey(*tp) for tp in self.in_session if tp not in self.offsets]
        return request(
            self.session_id,
            self.epoch,
            [fetch(t, p, self.offsets[(t, p)]) for t, p in names],
            forgotten,
            replica_id=self.replica_id,
            max_bytes=self.max_bytes,
            version=self.version,
        )

    def poll(self, now_ms: int = 0) -> tuple[FetchContext, FetchResponseData]:
        req = self.build()
        ctx, resp = self.world.serve(self.cache, req, now_ms)
        self.handle(req, resp)
        return ctx, resp

    def handle(self, req: FetchRequestData, resp: FetchResponseData) -> None:
        full = req.session_epoch in (0, -1)
        if resp.error_code == ErrorCode.fetch_session_id_not_found:
            self.session_id, self.epoch = 0, 0
            self.in_session = {}
            return
        if resp.error_code:
            self.epoch = 0
            self.in_session = {}
            return
        if resp.session_id == 0:
            self.session_id, self.epoch = 0, 0
            self.in_session = {}
        elif full:
            self.session_id, self.epoch = resp.session_id, 1
            self.in_session = {(p.topic, p.partition): p.fetch_offset for p in req.partitions}
        else:
            self.epoch = next_epoch(self.epoch)
            for p in req.partitions:
                self.in_session[(p.topic, p.partition)] = p.fetch_offset
            for k in req.forgotten:
                self.in_session.pop((k.topic, k.partition), None)
        for data in resp.partitions:
            tp = (data.topic, data.partition)
            if tp not in self.offsets:
                continue
            self.view[tp] = (data.high_watermark, data.log_start_offset, data.error_code)
            if data.error_code == OFFSET_OUT_OF_RANGE:  # auto.offset.reset=earliest
                self.offsets[tp] = data.log_start_offset
            elif self.consume and data.records_size:
                self.offsets[tp] += data.records_size // RECORD_SIZE


# ---------------------------------------------------------------------------
# The (session id, epoch) table


def new_session(
    cache: FetchSessionCache, world: World, partitions: Sequence[PartitionFetch], now_ms: int = 0
) -> FetchSession:
    _, resp = world.serve(cache, request(0, 0, partitions), now_ms)
    session = cache.get(resp.session_id)
    assert session is not None
    return session


def test_sessionless_full_fetch_answers_every_partition_without_a_session() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3, records=2)
    ctx, resp = world.serve(cache, request(0, -1, [fetch("t", 2), fetch("t", 0)]))
    assert isinstance(ctx, SessionlessFetchContext)
    assert resp.session_id == 0 and resp.error_code == 0
    assert tps(resp) == [("t", 2), ("t", 0)]
    assert cache.num_incremental_fetch_sessions == 0 and cache.full_fetches_total == 1


def test_requests_before_v7_are_sessionless() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    req = FetchRequestData(version=4, partitions=[fetch("t", 0)])  # codec's (0, -1)
    ctx, resp = world.serve(cache, req)
    assert isinstance(ctx, SessionlessFetchContext)
    assert resp.session_id == 0 and tps(resp) == [("t", 0)]


def test_initial_full_fetch_creates_a_session_at_epoch_one() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(2)
    ctx, resp = world.serve(cache, request(0, 0, [fetch("t", 0), fetch("t", 1)]))
    assert isinstance(ctx, FullFetchContext)
    assert resp.session_id > 0 and tps(resp) == [("t", 0), ("t", 1)]
    session = cache.get(resp.session_id)
    assert session is not None and session.epoch == 1 and session.size == 2
    assert cache.num_incremental_fetch_sessions == 1
    assert cache.num_incremental_fetch_partitions_cached == 2
    assert world.watching(("t", 0)) == {session}


def test_full_fetch_with_epoch_zero_closes_the_named_session_and_creates_another() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(2)
    old = new_session(cache, world, [fetch("t", 0), fetch("t", 1)])
    ctx, resp = world.serve(cache, request(old.id, 0, [fetch("t", 1)]))
    assert isinstance(ctx, FullFetchContext)
    assert old.id not in cache and old.closed
    assert resp.session_id not in (0, old.id) and tps(resp) == [("t", 1)]
    assert world.watching(("t", 0)) == set()
    assert cache.evictions_total == 0  # a client closing its own session is no eviction
    assert cache.num_incremental_fetch_partitions_cached == 1


def test_full_fetch_naming_an_unknown_session_is_not_an_error() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    _, resp = world.serve(cache, request(12345, 0, [fetch("t", 0)]))
    assert resp.error_code == 0 and resp.session_id > 0


def test_final_epoch_closes_the_session_and_serves_sessionless() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    old = new_session(cache, world, [fetch("t", 0)])
    ctx, resp = world.serve(cache, request(old.id, -1, [fetch("t", 0)]))
    assert isinstance(ctx, SessionlessFetchContext)
    assert resp.session_id == 0 and tps(resp) == [("t", 0)]
    assert (
        cache.num_incremental_fetch_sessions == 0
        and old.closed
        and world.watching(("t", 0)) == set()
    )


def test_incremental_fetch_on_an_unknown_session_gets_70() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    for session_id in (777, 0):  # (0, n > 0) is looked up like any id, and not found
        ctx, resp = world.serve(cache, request(session_id, 1, [fetch("t", 0)]))
        assert isinstance(ctx, SessionErrorContext)
        assert (resp.error_code, resp.session_id, resp.partitions) == (70, 0, [])
    assert cache.session_errors_total == 2


def test_incremental_fetch_with_the_wrong_epoch_gets_71_and_leaves_the_session_intact() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    session = new_session(cache, world, [fetch("t", 0)])
    for wrong in (2, 5, MAX_EPOCH):
        _, resp = world.serve(cache, request(session.id, wrong))
        assert (resp.error_code, resp.session_id, resp.partitions) == (71, 0, [])
    assert session.epoch == 1
    _, resp = world.serve(cache, request(session.id, 1))
    assert resp.error_code == 0 and resp.session_id == session.id and session.epoch == 2


def test_topic_id_mode_differing_from_the_session_gets_106() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    by_name = new_session(cache, world, [fetch("t", 0)])  # v12
    _, resp = world.serve(cache, request(by_name.id, 1, version=13))
    assert (resp.error_code, resp.session_id) == (ErrorCode.fetch_session_topic_id_error, 0)
    _, resp = world.serve(cache, request(0, 0, [fetch("t", 0)], version=13))
    by_id = cache.get(resp.session_id)
    assert by_id is not None and by_id.uses_topic_ids
    _, resp = world.serve(cache, request(by_id.id, 1, version=12))
    assert resp.error_code == ErrorCode.fetch_session_topic_id_error
    _, resp = world.serve(cache, request(by_id.id, 1, version=16))
    assert resp.error_code == 0


def test_epoch_wraps_from_max_int_to_one() -> None:
    assert next_epoch(1) == 2
    assert next_epoch(MAX_EPOCH - 1) == MAX_EPOCH
    assert next_epoch(MAX_EPOCH) == 1
    cache, world = FetchSessionCache(), World.with_partitions(1)
    session = new_session(cache, world, [fetch("t", 0)])
    session.epoch = MAX_EPOCH  # as if 2^31-2 incremental fetches had happened
    _, resp = world.serve(cache, request(session.id, MAX_EPOCH))
    assert resp.error_code == 0 and session.epoch == 1
    _, resp = world.serve(cache, request(session.id, 1))
    assert resp.error_code == 0 and session.epoch == 2


def test_session_ids_are_random_positive_and_unique() -> None:
    repeats = iter([5, 5, 0, 5, 9])
    cache, world = FetchSessionCache(new_session_id=lambda: next(repeats)), World.with_partitions(1)
    ids = [new_session(cache, world, [fetch("t", 0)]).id for _ in range(2)]
    assert ids == [5, 9]
    cache = FetchSessionCache()
    ids = [new_session(cache, world, [fetch("t", 0)]).id for _ in range(50)]
    assert len(set(ids)) == 50 and all(0 < i <= MAX_EPOCH for i in ids)
    steps = {b - a for a, b in itertools.pairwise(ids)}
    assert len(steps) > 1  # not sequential


# ---------------------------------------------------------------------------
# Full and incremental responses


def test_full_response_lists_each_requested_partition_once_in_request_order() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3, records=1)
    # librdkafka may list the same topic twice; a repeat keeps its first position.
    req = request(0, 0, [fetch("t", 2), fetch("t", 0), fetch("t", 2, 1), fetch("t", 1)])
    _, resp = world.serve(cache, req)
    assert tps(resp) == [("t", 2), ("t", 0), ("t", 1)]
    session = cache.get(resp.session_id)
    assert session is not None
    assert [c.key.partition for c in session.partitions()] == [2, 0, 1]
    cached = session.get(tpkey("t", 2))
    assert cached is not None and cached.request.fetch_offset == 1  # the repeat's values win


def test_incremental_fetch_omits_unchanged_partitions() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(4, records=3)
    client = Client(cache, world, [("t", p) for p in range(4)])
    _, resp = client.poll()
    assert len(resp.partitions) == 4 and all(p.records_size == 30 for p in resp.partitions)
    _, resp = client.poll()  # names all four with new offsets, nothing new to read
    assert resp.partitions == []
    world.append(("t", 2))
    _, resp = client.poll()
    assert tps(resp) == [("t", 2)] and resp.partitions[0].records_size == RECORD_SIZE
    assert resp.session_id == client.session_id


def test_empty_incremental_fetch_is_answered_with_no_partitions() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(2)
    session = new_session(cache, world, [fetch("t", 0), fetch("t", 1)])
    ctx, resp = world.serve(cache, request(session.id, 1))
    assert isinstance(ctx, IncrementalFetchContext)
    assert resp == FetchResponseData(session_id=session.id)
    assert ctx.partitions_read == 0 and cache.incremental_fetches_total == 1


def test_incremental_request_adds_updates_and_forgets_partitions() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3, records=5)
    session = new_session(cache, world, [fetch("t", 0, 5), fetch("t", 1, 5)])
    req = request(session.id, 1, [fetch("t", 2, 0), fetch("t", 0, 3)], [tpkey("t", 1)])
    _, resp = world.serve(cache, req)
    assert tps(resp) == [("t", 0), ("t", 2)]  # session order: 0 was there first
    assert [p.records_size for p in resp.partitions] == [20, 50]
    assert ("t", 1) not in [(c.key.topic, c.key.partition) for c in session.partitions()]
    assert world.watching(("t", 1)) == set() and world.watching(("t", 2)) == {session}
    assert cache.num_incremental_fetch_partitions_cached == 2


def test_forgotten_partition_is_no_longer_read_or_sent() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(2)
    session = new_session(cache, world, [fetch("t", 0), fetch("t", 1)])
    world.serve(cache, request(session.id, 1, forgotten=[tpkey("t", 0)]))
    world.append(("t", 0))  # nobody watches it any more
    world.append(("t", 1))
    ctx, resp = world.serve(cache, request(session.id, 2))
    assert tps(resp) == [("t", 1)] and ctx.partitions_read == 1


def test_forgetting_every_partition_drops_the_session_and_serves_sessionless() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    session = new_session(cache, world, [fetch("t", 0)])
    ctx, resp = world.serve(cache, request(session.id, 1, forgotten=[tpkey("t", 0)]))
    assert isinstance(ctx, SessionlessFetchContext)
    assert resp.session_id == 0 and resp.error_code == 0 and resp.partitions == []
    assert cache.num_incremental_fetch_sessions == 0 and cache.evictions_total == 0
    assert cache.num_incremental_fetch_partitions_cached == 0


def test_error_partition_is_sent_every_time_and_again_when_the_error_clears() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(2)
    session = new_session(cache, world, [fetch("t", 0), fetch("t", 1)])
    world.set_error(("t", 0), NOT_LEADER_OR_FOLLOWER)
    for epoch in (1, 2):
        _, resp = world.serve(cache, request(session.id, epoch))
        assert tps(resp) == [("t", 0)] and resp.partitions[0].error_code == 6
    world.set_error(("t", 0), 0)  # high watermark unchanged, but the client saw an error
    _, resp = world.serve(cache, request(session.id, 3))
    assert tps(resp) == [("t", 0)] and resp.partitions[0].error_code == 0
    assert resp.partitions[0].high_watermark == 0
    _, resp = world.serve(cache, request(session.id, 4))
    assert resp.partitions == []


def test_metadata_changes_are_sent_without_records() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3, records=10)
    session = new_session(cache, world, [fetch("t", p, 10) for p in range(3)])
    world.set_log_start(("t", 0), 4)
    world.logs[("t", 1)].last_stable_offset = 8
    world.notify(("t", 1))
    _, resp = world.serve(cache, request(session.id, 1))
    assert tps(resp) == [("t", 0), ("t", 1)]
    assert resp.partitions[0].log_start_offset == 4
    assert resp.partitions[1].last_stable_offset == 8
    assert all(p.records is None for p in resp.partitions)


def test_preferred_read_replica_forces_the_partition_into_the_response() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(2)
    session = new_session(cache, world, [fetch("t", 0), fetch("t", 1)])
    world.logs[("t", 1)].preferred_read_replica = 3
    world.notify(("t", 1))
    for epoch in (1, 2):  # sent as long as it is set, pending until then
        world.notify(("t", 1))
        _, resp = world.serve(cache, request(session.id, epoch))
        assert tps(resp) == [("t", 1)] and resp.partitions[0].preferred_read_replica == 3


def test_client_that_does_not_advance_gets_the_same_records_again() -> None:
    # Kafka re-reads from the cached fetch offset; so must we, though nothing changed.
    cache, world = FetchSessionCache(), World.with_partitions(1, records=2)
    client = Client(cache, world, [("t", 0)])
    client.consume = False
    for _ in range(3):
        _, resp = client.poll()
        assert tps(resp) == [("t", 0)] and resp.partitions[0].records_size == 20


def test_read_committed_client_is_caught_up_at_the_last_stable_offset() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1, records=5)
    world.logs[("t", 0)].last_stable_offset = 3
    req = request(0, 0, [fetch("t", 0, 3)], isolation_level=1)
    _, resp = world.serve(cache, req)
    session = cache.get(resp.session_id)
    assert session is not None and not session.is_pending(tpkey("t", 0))
    # The same offsets under read_uncommitted are behind the high watermark.
    _, resp = world.serve(cache, request(0, 0, [fetch("t", 0, 3)]))
    session = cache.get(resp.session_id)
    assert session is not None and session.is_pending(tpkey("t", 0))


# ---------------------------------------------------------------------------
# Session order and starvation


def test_partitions_with_records_move_to_the_end_metadata_only_ones_stay() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(4)
    session = new_session(cache, world, [fetch("t", p) for p in range(4)])
    world.append(("t", 1))
    world.set_log_start(("t", 2), 0)  # a notification with no change: not sent, not moved
    world.logs[("t", 3)].last_stable_offset = 0
    world.notify(("t", 0))
    _, resp = world.serve(cache, request(session.id, 1))
    assert tps(resp) == [("t", 1)]
    assert [c.key.partition for c in session.partitions()] == [0, 2, 3, 1]
    world.logs[("t", 0)].log_start_offset = 0
    world.set_log_start(("t", 3), 0)
    world.append(("t", 3))
    world.append(("t", 0))
    _, resp = world.serve(cache, request(session.id, 2, [fetch("t", 1, 1)]))
    assert tps(resp) == [("t", 0), ("t", 3)]
    assert [c.key.partition for c in session.partitions()] == [2, 1, 0, 3]


def test_tiny_max_bytes_serves_every_partition_with_data_in_turn() -> None:
    count = 40
    cache, world = FetchSessionCache(), World.with_partitions(count, records=5)
    # Room for one record per response: KIP-74's one-batch minimum only.
    client = Client(cache, world, [("t", p) for p in range(count)], max_bytes=1)
    served_at: dict[int, int] = {}
    for n in range(2 * count):
        for p in range(3):  # the head of the request order never runs dry
            world.append(("t", p))
        _, resp = client.poll()
        assert resp.error_code == 0
        for data in resp.partitions:
            if data.records_size:
                served_at.setdefault(data.partition, n)
    assert sorted(served_at) == list(range(count))
    assert max(served_at.values()) <= count + 1


# ---------------------------------------------------------------------------
# Long-poll support: change signal, races, overtaken requests


def test_log_change_wakes_listeners_and_sets_has_news() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(2)
    session = new_session(cache, world, [fetch("t", 0), fetch("t", 1)])
    ctx = new_fetch_context(cache, request(session.id, 1), 0, world)
    assert ctx.partitions_to_read() == [] and not ctx.has_news()
    woken: list[int] = []
    assert ctx.add_change_listener(lambda: woken.append(1))
    world.append(("t", 1))
    assert woken == [1] and ctx.has_news()
    to_read = ctx.partitions_to_read()  # the broker re-reads
    assert [p.partition for p in to_read] == [1] and not ctx.has_news()
    resp = ctx.update_and_generate_response(world.read(to_read), 0)
    assert tps(resp) == [("t", 1)]


def test_full_fetch_contexts_have_no_session_signal() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    ctx = new_fetch_context(cache, request(0, 0, [fetch("t", 0)]), 0, world)
    assert not ctx.add_change_listener(lambda: None) and not ctx.has_news()


def test_change_between_read_and_response_keeps_the_partition_pending() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    session = new_session(cache, world, [fetch("t", 0)])
    world.notify(("t", 0))
    ctx = new_fetch_context(cache, request(session.id, 1), 0, world)
    results = world.read(ctx.partitions_to_read())  # reads nothing new
    world.append(("t", 0))  # lands after the read
    resp = ctx.update_and_generate_response(results, 0)
    assert resp.partitions == [] and session.is_pending(tpkey("t", 0))
    _, resp = world.serve(cache, request(session.id, 2))
    assert tps(resp) == [("t", 0)] and resp.partitions[0].records_size == RECORD_SIZE


def test_request_overtaken_by_a_newer_one_gets_71_at_completion() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    session = new_session(cache, world, [fetch("t", 0)])
    waiting = new_fetch_context(cache, request(session.id, 1), 0, world)
    to_read = waiting.partitions_to_read()
    world.serve(cache, request(session.id, 2))  # the client gave up and moved on
    assert waiting.completion_error() == ErrorCode.invalid_fetch_session_epoch
    resp = waiting.update_and_generate_response(world.read(to_read), 0)
    assert (resp.error_code, resp.session_id, resp.partitions) == (71, 0, [])


def test_request_whose_session_was_closed_while_waiting_gets_70() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1)
    session = new_session(cache, world, [fetch("t", 0)])
    waiting = new_fetch_context(cache, request(session.id, 1), 0, world)
    woken: list[int] = []
    waiting.add_change_listener(lambda: woken.append(1))
    world.serve(cache, request(session.id, -1, [fetch("t", 0)]))
    assert woken == [1] and waiting.has_news()
    resp = waiting.update_and_generate_response([], 0)
    assert (resp.error_code, resp.session_id) == (ErrorCode.fetch_session_id_not_found, 0)


# ---------------------------------------------------------------------------
# Retransmission (seed 001): a retried request is answered again


def test_retried_incremental_request_gets_the_lost_partitions_again() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(3)
    session = new_session(cache, world, [fetch("t", p) for p in range(3)])
    world.append(("t", 0), 2)
    lost_req = request(session.id, 1, [fetch("t", 1, 0)])  # re-names t-1, unchanged
    _, lost = world.serve(cache, lost_req)
    assert tps(lost) == [("t", 0)] and session.epoch == 2
    world.append(("t", 2))
    ctx, again = world.serve(cache, lost_req)  # same epoch, same content
    assert isinstance(ctx, IncrementalFetchContext) and ctx.is_retransmission
    assert again.error_code == 0 and again.session_id == session.id
    # The lost one (moved to the end when it returned records), and what is new since.
    assert tps(again) == [("t", 2), ("t", 0)]
    assert again.partitions[1].records_size == 2 * RECORD_SIZE
    assert session.epoch == 2  # not advanced again
    _, resp = world.serve(cache, request(session.id, 2, [fetch("t", 0, 2), fetch("t", 2, 1)]))
    assert resp.error_code == 0 and resp.partitions == []


def test_retransmitted_metadata_only_change_is_sent_again() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(1, records=5)
    session = new_session(cache, world, [fetch("t", 0, 5)])
    world.set_log_start(("t", 0), 2)
    lost_req = request(session.id, 1)
    _, lost = world.serve(cache, lost_req)
    assert tps(lost) == [("t", 0)] and not session.is_pending(tpkey("t", 0))
    _, again = world.serve(cache, lost_req)
    assert tps(again) == [("t", 0)] and again.partitions[0].log_start_offset == 2


def test_repeated_epoch_with_different_content_gets_71() -> None:
    cache, world = FetchSessionCache(), World.with_partitions(2)
    session = new_session(cache, world, [fetch("t", 0), fetch("t", 1)])
    world.serve(cache, request(session.id, 1, [fetch("t", 0, 0)]))
    _, resp = world.serve(cache, request(session.id, 1, [fetch("t", 0, 1)]))
    assert resp.error_code == ErrorCode.invalid_fetch_session_epoch
    _, resp = world.serve(cache, request(session.id, 1, [fetch("t", 0, 0)], max_bytes=5))
    assert resp.error_code == ErrorCode.invalid_fetch_session_epoch
    world.serve(cache, request(session.id, 2))
    _, resp = world.serve(cache, request(session.id, 1, [fetch("t", 0, 0)]))
    assert resp.error_code == ErrorCode.invalid_fetch_session_epoch  # only the latest epoch repeats


@pytest.mark.parametrize("enabled", [True, False])
def test_retransmission_can_be_switched_off(enabled: bool) -> None:
    cache = FetchSessionCache(retransmit_enabled=enabled)
    world = World.with_partitions(1)
    session = new_session(cache, world, [fetch("t", 0)])
    world.serve(cache, request(session.id, 1))
    _, resp = world.serve(cache, request(session.id, 1))
    assert resp.error_code == (0 if enabled else ErrorCode.invalid_fetch_session_epoch)
    assert session.epoch == 2
