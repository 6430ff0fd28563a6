"""A model test: random fetchers, log changes and time against what clients must see.

Hypothesis drives several ``Client`` fetchers (consumers and followers,
some with a tiny response limit) through full, incremental, closing,
stale-epoch, unknown-id and retried requests while logs grow, move their
log start, fail and recover, and time passes so sessions get evicted. A
reference model of the cache (a brute-force version of the eviction rule)
predicts which session each newcomer evicts. After every successful
response the client's view of each partition must equal the truth, and an
incremental response must carry exactly the changed partitions.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from headwater.fetch.contexts import unique_partitions
from headwater.fetch.session_cache import FetchSessionCache
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_metadata import MAX_EPOCH
from tests.unit.test_fetch_session import (
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    RECORD_SIZE,
    TP,
    Client,
    MemoryLog,
    World,
    fetch,
    request,
    tps,
)

SLOTS = 3
EVICTION_MS = 100
PARTITIONS: list[TP] = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
#: (replica id, response limit) per client: consumers and followers, some starved for room.
CLIENTS = [(-1, 1 << 30), (-1, 1), (-1, 25), (1, 1 << 30), (2, 15)]


@dataclass
class ModelSession:
    privileged: bool
    size: int
    created_ms: int
    last_used_ms: int
    touched: int  # global use order, for ties in last use


class FetchSessionMachine(RuleBasedStateMachine):
    @initialize(
        wanted=st.lists(
            st.lists(st.sampled_from(PARTITIONS), min_size=1, max_size=5, unique=True),
            min_size=len(CLIENTS),
            max_size=len(CLIENTS),
        )
    )
    def setup(self, wanted: list[list[TP]]) -> None:
        self.world = World({tp: MemoryLog() for tp in PARTITIONS})
        self.cache = FetchSessionCache(max_slots=SLOTS, eviction_ms=EVICTION_MS)
        self.clients = [
            Client(self.cache, self.world, w, replica_id=r, max_bytes=m)
            for w, (r, m) in zip(wanted, CLIENTS, strict=True)
        ]
        self.now = 0
        self.model: dict[int, ModelSession] = {}
        self.evictions = 0
        self.uses = 0

    # -- the reference cache ----------------------------------------------

    def predict_admission(self, privileged: bool, size: int) -> tuple[bool, int | None]:
        """(admitted, evicted id) by Headwater's rule, found by brute force.

        Kafka's rule, except that a consumer newcomer only ever considers
        consumer sessions (issues 8, 9, 12): it never evicts a follower's; and
        a follower newcomer takes a consumer's slot before another follower's.
        """
        if len(self.model) < SLOTS:
            return True, None
        now = self.now

        def stalest_of(ids: list[int]) -> int | None:
            if not ids:
                return None
            i = min(ids, key=lambda j: (self.model[j].last_used_ms, self.model[j].touched))
            return i if now - self.model[i].last_used_ms > EVICTION_MS else None

        consumers = [i for i, m in self.model.items() if not m.privileged]
        stale = stalest_of(consumers)
        if stale is not None:
            return True, stale
        candidates = {i: m for i, m in self.model.items() if privileged or not m.privileged}

        def old(i: int) -> bool:
            return now - candidates[i].created_ms > EVICTION_MS

        evictable = [
            i for i, m in candidates.items() if (old(i) or (privileged and not m.privileged))
        ]
        if evictable:
            victim = min(evictable, key=lambda i: (candidates[i].privileged, candidates[i].size, i))
            v = candidates[victim]
            if (privileged, size, 0) > (v.privileged, v.size, victim):
                return True, victim
        if privileged:
            stale = stalest_of([i for i, m in self.model.items() if m.privileged])
            if stale is not None:
                return True, stale
        return False, None

    def use(self, session_id: int, size: int) -> None:
        self.uses += 1
        m = self.model[session_id]
        m.last_used_ms, m.touched, m.size = self.now, self.uses, size

    # -- truth --------------------------------------------------------------

    def truth(self, tp: TP, offset: int) -> tuple[int, int, int]:
        log = self.world.logs[tp]
        error = log.error_code
        if not error and not log.log_start_offset <= offset <= log.high_watermark:
            error = OFFSET_OUT_OF_RANGE
        return (log.high_watermark, log.log_start_offset, error)

    def has_data(self, tp: TP, offset: int) -> bool:
        log = self.world.logs[tp]
        return self.truth(tp, offset)[2] == 0 and offset < log.high_watermark

    # -- fetching -------------------------------------------------------------

    @rule(c=st.integers(0, len(CLIENTS) - 1), lose_first=st.booleans())
    def poll(self, c: int, lose_first: bool) -> None:
        client = self.clients[c]
        req = client.build()
        offsets = dict(client.offsets)
        view = dict(client.view)
        in_session = set(client.in_session)
        full = req.session_epoch in (0, -1)
        known = req.session_id in self.model

        if full and req.session_id:
            self.model.pop(req.session_id, None)  # the client closes its own session
        admitted, evicted, size = False, None, 0
        if full and req.session_epoch == 0:
            size = len(unique_partitions(req.partitions, req.uses_topic_ids))
            admitted, evicted = self.predict_admission(client.replica_id >= 0, size)

        _, resp = self.world.serve(self.cache, req, self.now)
        if lose_first and not full and resp.error_code == 0 and resp.session_id:
            # The response is lost; the client retries the very same request.
            _, again = self.world.serve(self.cache, req, self.now)
            assert again.error_code == 0 and again.session_id == resp.session_id
            assert set(tps(resp)) <= set(tps(again))
            event("retried a lost response")
            resp = again
        client.handle(req, resp)

        if not full and not known:
            event("70 after eviction")
            assert (resp.error_code, resp.session_id, resp.partitions) == (70, 0, [])
            return
        assert resp.error_code == 0
        wanted = set(client.wanted)
        if full:
            assert tps(resp) == [(p.topic, p.partition) for p in req.partitions]
            if req.session_epoch == 0:
                if admitted:
                    assert resp.session_id > 0
                    if evicted is not None:
                        event("evicted")
                        self.model.pop(evicted)
                        self.evictions += 1
                    self.model[resp.session_id] = ModelSession(
                        client.replica_id >= 0, size, self.now, self.now, 0
                    )
                    self.use(resp.session_id, size)
                else:
                    event("declined")
                    assert resp.session_id == 0
            else:
                assert resp.session_id == 0
        elif not wanted:
            # Everything forgotten: the session is dropped, the fetch served sessionless.
            event("emptied session")
            assert resp.session_id == 0
            self.model.pop(req.session_id)
        else:
            assert resp.session_id == req.session_id
            self.use(req.session_id, len(wanted))
            truth = {tp: self.truth(tp, offsets[tp]) for tp in wanted}
            # Changed since last heard, or failing (errors are sent every time).
            changed = {tp for tp in wanted if view.get(tp) != truth[tp] or truth[tp][2]}
            changed |= {(p.topic, p.partition) for p in req.partitions} - in_session  # new
            with_data = {tp for tp in wanted if self.has_data(tp, offsets[tp])}
            sent = set(tps(resp))
            event("incremental: sent nothing" if not sent else "incremental: sent some")
            if sent - changed:
                event("incremental: records without metadata change")
            assert changed <= sent <= changed | with_data
            if client.max_bytes >= RECORD_SIZE * 1000:
                assert with_data <= sent
            elif with_data:
                assert any(p.records_size for p in resp.partitions)  # KIP-74 progress
        for data in resp.partitions:
            tp = (data.topic, data.partition)
            log = self.world.logs[tp]
            assert data.records_size <= RECORD_SIZE * max(0, log.high_watermark - offsets[tp])
        # After any successful response the client knows the truth of every partition.
        for tp in wanted:
            assert client.view[tp] == self.truth(tp, offsets[tp])

    @rule(c=st.integers(0, len(CLIENTS) - 1), skew=st.integers(2, 1000))
    def stale_epoch(self, c: int, skew: int) -> None:
        client = self.clients[c]
        if not client.session_id or client.epoch <= 0:
            return
        epoch = (client.epoch + skew - 1) % MAX_EPOCH + 1  # neither this epoch nor the last
        if epoch in (client.epoch, client.epoch - 1):
            return
        before = self.cache.get(client.session_id)
        _, resp = self.world.serve(self.cache, request(client.session_id, epoch), self.now)
        expected = (
            ErrorCode.fetch_session_id_not_found
            if before is None
            else ErrorCode.invalid_fetch_session_epoch
        )
        assert (resp.error_code, resp.session_id, resp.partitions) == (expected, 0, [])
        if before is not None:
            assert before.epoch == client.epoch  # untouched: the client carries on

    @rule(session_id=st.integers(1, MAX_EPOCH), epoch=st.integers(1, MAX_EPOCH))
    def unknown_session(self, session_id: int, epoch: int) -> None:
        if session_id in self.model:
            return
        _, resp = self.world.serve(self.cache, request(session_id, epoch), self.now)
        assert (resp.error_code, resp.session_id) == (ErrorCode.fetch_session_id_not_found, 0)

    @rule(c=st.integers(0, len(CLIENTS) - 1))
    def close_session(self, c: int) -> None:
        client = self.clients[c]
        client.epoch = -1  # next request: (id, -1), a sessionless full fetch
        self.poll(c, lose_first=False)
        assert client.session_id == 0 and client.epoch == 0

    @rule(c=st.integers(0, len(CLIENTS) - 1), tp=st.sampled_from(PARTITIONS))
    def toggle_interest(self, c: int, tp: TP) -> None:
        client = self.clients[c]
        if tp in client.offsets:
            client.drop(tp)
        else:
            client.want(tp)

    # -- the world --------------------------------------------------------------

    @rule(tp=st.sampled_from(PARTITIONS), records=st.integers(1, 3))
    def append(self, tp: TP, records: int) -> None:
        self.world.append(tp, records)

    @rule(tp=st.sampled_from(PARTITIONS), step=st.integers(1, 3))
    def advance_log_start(self, tp: TP, step: int) -> None:
        log = self.world.logs[tp]
        self.world.set_log_start(tp, min(log.high_watermark, log.log_start_offset + step))

    @rule(tp=st.sampled_from(PARTITIONS))
    def toggle_error(self, tp: TP) -> None:
        failing = self.world.logs[tp].error_code
        self.world.set_error(tp, 0 if failing else NOT_LEADER_OR_FOLLOWER)

    @rule(ms=st.integers(1, 2 * EVICTION_MS))
    def advance_time(self, ms: int) -> None:
        self.now += ms

    # -- invariants -----------------------------------------------------------

    @invariant()
    def cache_matches_the_model(self) -> None:
        sessions = self.cache.sessions()
        assert {s.id for s in sessions} == set(self.model)
        assert self.cache.num_incremental_fetch_sessions == len(sessions) <= SLOTS
        assert self.cache.num_incremental_fetch_partitions_cached == sum(s.size for s in sessions)
        assert self.cache.evictions_total == self.evictions
        for s in sessions:
            assert s.size == self.model[s.id].size

    @invariant()
    def sessions_hold_and_watch_what_their_clients_want(self) -> None:
        live = {s.id: s for s in self.cache.sessions()}
        for client in self.clients:
            session = live.get(client.session_id)
            if session is None or client.epoch <= 0:
                continue
            assert session.epoch == client.epoch
            keys = {(c.key.topic, c.key.partition) for c in session.partitions()}
            assert keys == set(client.in_session)
        for tp, watching in self.world.watchers.items():
            for session in watching:
                assert not session.closed and session.id in live
                assert session.get(fetch(*tp).key) is not None
        for session in live.values():
            assert session.pending_count <= session.size


FetchSessionMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_fetch_sessions_against_the_client_model = FetchSessionMachine.TestCase
