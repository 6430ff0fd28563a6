"""KIP-392 on the client, without sockets: leases, errors, positions, sessions.

The consumer's fetch-response step (``AsyncConsumer._process``) is fed
decoded responses as a broker would send them, the way the session handler's
tests feed it responses: no connection is opened.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from headwater.client.config import ConsumerConfig
from headwater.client.consumer import AsyncConsumer, _Sent
from headwater.client.read_replica import (
    FIRST_AVOID_S,
    KAFKA_STORAGE_ERROR,
    LAGGING_ERRORS,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_NOT_AVAILABLE,
    OFFSET_OUT_OF_RANGE,
    REPLICA_ERRORS,
    REPLICA_NOT_AVAILABLE,
    Action,
    ReadReplicas,
    decide,
)
from headwater.client.session_handler import FetchSessionHandler
from headwater.client.types import (
    BrokerMetadata,
    PartitionMetadata,
    TopicMetadata,
    TopicPartition,
)
from headwater.protocol.fetch_types import FetchResponseData, PartitionData, PartitionFetch
from headwater.records.record import RecordBatchBuilder

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)
LEADER, FOLLOWER, THIRD = 0, 1, 2
LEASE_S = 300.0


# -- the lease table ---------------------------------------------------------------------


def test_lease_lasts_metadata_max_age_then_the_leader_is_asked_again() -> None:
    r = ReadReplicas(LEASE_S)
    assert r.preferred(TP, 0.0) is None
    r.prefer(TP, FOLLOWER, 10.0)
    assert r.preferred(TP, 10.0 + LEASE_S - 0.001) == FOLLOWER
    assert r.preferred(TP, 10.0 + LEASE_S) is None
    assert r.leased_to(FOLLOWER) == []  # an expired lease is dropped when looked at


def test_a_new_redirect_renews_the_lease() -> None:
    r = ReadReplicas(LEASE_S)
    r.prefer(TP, FOLLOWER, 0.0)
    r.prefer(TP, THIRD, 100.0)
    assert r.preferred(TP, LEASE_S + 1) == THIRD
    assert r.leased_to(FOLLOWER) == [] and r.leased_to(THIRD) == [TP]


def test_clear_returns_the_replica_the_lease_was_on() -> None:
    r = ReadReplicas(LEASE_S)
    assert r.clear(TP) is None
    r.prefer(TP, FOLLOWER, 0.0)
    assert r.clear(TP) == FOLLOWER
    assert r.preferred(TP, 1.0) is None


def test_a_failed_replica_is_avoided_for_doubling_spans_up_to_the_lease() -> None:
    r = ReadReplicas(10.0)
    now = 0.0
    spans = []
    for _ in range(6):
        r.prefer(TP, FOLLOWER, now)
        spans.append(r.failed(TP, FOLLOWER, now))
        assert r.preferred(TP, now) is None  # the failure ends the lease at once
        assert r.avoiding(TP, now) == FOLLOWER
        assert r.avoiding(TP, now + spans[-1]) is None
        now += spans[-1]
    assert spans == [FIRST_AVOID_S, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_data_from_the_replica_forgives_its_failures() -> None:
    r = ReadReplicas(LEASE_S)
    r.failed(TP, FOLLOWER, 0.0)
    r.failed(TP, FOLLOWER, 1.0)
    r.served(TP, THIRD)  # another replica's data says nothing about this one
    assert r.avoiding(TP, 2.0) == FOLLOWER
    r.served(TP, FOLLOWER)
    assert r.avoiding(TP, 2.0) is None
    assert r.failed(TP, FOLLOWER, 10.0) == FIRST_AVOID_S


def test_a_failure_of_another_replica_starts_counting_again() -> None:
    r = ReadReplicas(LEASE_S)
    r.failed(TP, FOLLOWER, 0.0)
    r.failed(TP, FOLLOWER, 0.0)
    assert r.failed(TP, THIRD, 0.0) == FIRST_AVOID_S
    assert r.avoiding(TP, 0.5) == THIRD


def test_a_failure_leaves_a_lease_on_another_replica_alone() -> None:
    r = ReadReplicas(LEASE_S)
    r.prefer(TP, THIRD, 0.0)
    r.failed(TP, FOLLOWER, 0.0)
    assert r.preferred(TP, 1.0) == THIRD


# -- what each answer means ----------------------------------------------------------------


def test_records_are_used_unless_another_replica_is_named() -> None:
    assert decide(0, -1, served_by=LEADER, from_replica=False) is Action.USE
    assert decide(0, FOLLOWER, served_by=LEADER, from_replica=False) is Action.MOVE
    assert decide(0, FOLLOWER, served_by=FOLLOWER, from_replica=True) is Action.USE
    assert decide(0, LEADER, served_by=FOLLOWER, from_replica=True) is Action.MOVE


@pytest.mark.parametrize("code", sorted(REPLICA_ERRORS))
def test_every_replica_error_sends_the_partition_back_to_the_leader(code: int) -> None:
    assert decide(code, -1, served_by=FOLLOWER, from_replica=True) is Action.TO_LEADER


def test_only_the_leaders_out_of_range_resets_the_position() -> None:
    assert decide(OFFSET_OUT_OF_RANGE, -1, served_by=LEADER, from_replica=False) is Action.RESET
    assert (
        decide(OFFSET_OUT_OF_RANGE, -1, served_by=FOLLOWER, from_replica=True) is Action.TO_LEADER
    )


def test_the_leaders_errors_keep_their_old_meaning() -> None:
    assert decide(NOT_LEADER_OR_FOLLOWER, -1, served_by=LEADER, from_replica=False) is (
        Action.RETRY
    )
    assert decide(OFFSET_NOT_AVAILABLE, -1, served_by=LEADER, from_replica=False) is Action.RETRY
    assert decide(29, -1, served_by=LEADER, from_replica=False) is Action.FAIL  # not authorized
    assert decide(29, -1, served_by=FOLLOWER, from_replica=True) is Action.FAIL


# -- the consumer's side, fed responses ----------------------------------------------------


def run(make: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(make())


def records(base: int, count: int) -> bytes:
    b = RecordBatchBuilder(base_offset=base)
    for i in range(count):
        b.append(1000 + i, None, b"v%d" % (base + i), [])
    return b.build()


class Harness:
    """An ``AsyncConsumer`` whose metadata is set by hand; it never opens a socket."""

    def __init__(self, **config: Any) -> None:
        self.consumer = AsyncConsumer(
            {"client.rack": "b", "metadata.max.age.ms": int(LEASE_S * 1000), **config}
        )
        cluster = self.consumer._cluster
        cluster.brokers = {
            i: BrokerMetadata(i, "127.0.0.1", 1, rack) for i, rack in enumerate("abc")
        }
        parts = {
            p: PartitionMetadata(p, LEADER, 0, (LEADER, FOLLOWER, THIRD), (0, 1, 2)) for p in (0, 1)
        }
        cluster.topics = {"t": TopicMetadata("t", uuid.uuid4(), parts)}
        c = self.consumer
        # No fetch is ever sent: the test plays the broker's answers itself.
        c._kick = lambda: None  # type: ignore[method-assign]
        c._maybe_send = lambda node_id: None  # type: ignore[method-assign]
        c.assign([TP, OTHER])
        for tp in (TP, OTHER):
            c.seek(tp, 0)

    def fetch_node(self, tp: TopicPartition = TP) -> int | None:
        return self.consumer._fetch_node(tp, asyncio.get_running_loop().time())

    def sent(self, node_id: int, tp: TopicPartition = TP) -> dict[TopicPartition, _Sent]:
        """What a fetch to ``node_id`` would record for ``tp`` now."""
        state = self.consumer._states[tp]
        assert state.fetch_offset is not None
        return {tp: _Sent(state.generation, state.fetch_offset, node_id != LEADER)}

    def answer(
        self,
        node_id: int,
        sent: dict[TopicPartition, _Sent],
        *,
        error: int = 0,
        data: bytes | None = None,
        preferred: int = -1,
        high_watermark: int = 100,
        tp: TopicPartition = TP,
    ) -> None:
        part = PartitionData(
            uuid.UUID(int=0),
            tp.topic,
            tp.partition,
            error,
            high_watermark,
            records=data,
            preferred_read_replica=preferred,
        )
        node = self.consumer._node(node_id)
        self.consumer._process(node, FetchResponseData(partitions=[part]), sent)

    def offsets(self) -> list[int]:
        return [r.offset for r in self.consumer._drain()]

    @property
    def fetch_offset(self) -> int | None:
        return self.consumer._states[TP].fetch_offset

    @property
    def position(self) -> int | None:
        return self.consumer._states[TP].position


def test_a_redirect_drops_its_records_and_keeps_the_position() -> None:
    async def scenario() -> None:
        h = Harness()
        assert h.fetch_node() == LEADER
        h.answer(LEADER, h.sent(LEADER), data=records(0, 5), preferred=FOLLOWER)
        assert h.offsets() == []
        assert (h.fetch_offset, h.position) == (0, 0)
        assert h.fetch_node() == FOLLOWER
        assert h.fetch_node(OTHER) == LEADER  # per partition
        h.answer(FOLLOWER, h.sent(FOLLOWER), data=records(0, 5))
        assert h.offsets() == [0, 1, 2, 3, 4]
        assert h.fetch_node() == FOLLOWER

    run(scenario)


def test_the_lease_ends_after_metadata_max_age() -> None:
    async def scenario() -> None:
        h = Harness(**{"metadata.max.age.ms": 50_000})
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        now = asyncio.get_running_loop().time()
        assert h.consumer._fetch_node(TP, now + 49.9) == FOLLOWER
        assert h.consumer._fetch_node(TP, now + 50.1) == LEADER

    run(scenario)


@pytest.mark.parametrize("code", sorted(REPLICA_ERRORS))
def test_a_replica_error_goes_back_to_the_leader_at_the_same_position(code: int) -> None:
    async def scenario() -> None:
        h = Harness()
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        h.answer(FOLLOWER, h.sent(FOLLOWER), data=records(0, 3))
        assert h.offsets() == [0, 1, 2]
        h.answer(FOLLOWER, h.sent(FOLLOWER), error=code, high_watermark=2)
        state = h.consumer._states[TP]
        assert state.reset is None and state.error is None  # no offset reset, nothing raised
        assert (h.fetch_offset, h.position) == (3, 3)
        assert h.fetch_node() == LEADER
        now = asyncio.get_running_loop().time()
        avoided = h.consumer._replicas.avoiding(TP, now)
        assert avoided == (None if code in LAGGING_ERRORS else FOLLOWER)
        rack = h.consumer._request_rack(h.sent(LEADER), now)
        assert rack == ("b" if code in LAGGING_ERRORS else "")

    run(scenario)


def test_the_leaders_out_of_range_still_resets() -> None:
    async def scenario() -> None:
        h = Harness(**{"auto.offset.reset": "earliest"})
        h.answer(LEADER, h.sent(LEADER), error=OFFSET_OUT_OF_RANGE)
        assert h.consumer._states[TP].reset == "earliest"

    run(scenario)


def test_a_failed_replica_is_not_taken_back_from_a_late_redirect() -> None:
    async def scenario() -> None:
        h = Harness()
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        leader_fetch = h.sent(LEADER)  # sent to the leader while the follower still served
        h.answer(FOLLOWER, h.sent(FOLLOWER), error=NOT_LEADER_OR_FOLLOWER)
        h.answer(LEADER, leader_fetch, preferred=FOLLOWER)
        assert h.fetch_node() == LEADER
        assert h.consumer._request_rack(h.sent(LEADER), asyncio.get_running_loop().time()) == ""
        # ... while another replica of the rack is still welcome.
        h.answer(LEADER, h.sent(LEADER), preferred=THIRD)
        assert h.fetch_node() == THIRD

    run(scenario)


def test_a_connection_failure_ends_the_leases_on_that_broker() -> None:
    async def scenario() -> None:
        h = Harness()
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        h.answer(LEADER, h.sent(LEADER, OTHER), preferred=FOLLOWER, tp=OTHER)
        c = h.consumer
        c._replica_failed(FOLLOWER, c._replicas.leased_to(FOLLOWER), ConnectionError("gone"))
        assert h.fetch_node(TP) == h.fetch_node(OTHER) == LEADER
        assert c._metadata_stale

    run(scenario)


def test_an_answer_to_an_older_fetch_offset_is_never_used() -> None:
    """A lease ends while the replica's fetch is out: both brokers answer the same offset."""

    async def scenario() -> None:
        h = Harness()
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        at_follower = h.sent(FOLLOWER)
        h.consumer._replicas.clear(TP)  # as an expiry would
        at_leader = h.sent(LEADER)
        h.answer(LEADER, at_leader, data=records(0, 4))
        h.answer(FOLLOWER, at_follower, data=records(0, 6))  # same start: stale now
        assert h.offsets() == [0, 1, 2, 3]
        assert h.fetch_offset == 4
        h.answer(LEADER, h.sent(LEADER), data=records(4, 2))
        assert h.offsets() == [4, 5]

    run(scenario)


def test_moving_back_and_forth_delivers_every_offset_once_in_order() -> None:
    async def scenario() -> None:
        h = Harness()
        seen: list[int] = []
        offset = 0
        for step in range(12):
            h.answer(LEADER, h.sent(LEADER), data=records(offset, 2), preferred=FOLLOWER)
            assert h.fetch_node() == FOLLOWER
            h.answer(FOLLOWER, h.sent(FOLLOWER), data=records(offset, 3))
            offset += 3
            error = (OFFSET_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, REPLICA_NOT_AVAILABLE)[step % 3]
            h.answer(FOLLOWER, h.sent(FOLLOWER), error=error)
            h.consumer._replicas.served(TP, FOLLOWER)  # forget the avoidance for the next round
            assert h.fetch_node() == LEADER
            h.answer(LEADER, h.sent(LEADER), data=records(offset, 2))
            offset += 2
            seen.extend(h.offsets())
        assert seen == list(range(offset))

    run(scenario)


def test_a_replica_moved_away_in_the_metadata_loses_its_lease() -> None:
    async def scenario() -> None:
        h = Harness()
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        topics = h.consumer._cluster.topics
        meta = topics["t"]
        parts = dict(meta.partitions)
        parts[0] = parts[0]._replace(replicas=(LEADER, THIRD), isr=(LEADER, THIRD))
        topics["t"] = meta._replace(partitions=parts)
        assert h.fetch_node() == LEADER
        now = asyncio.get_running_loop().time()
        assert h.consumer._replicas.preferred(TP, now) is None
        assert h.consumer._replicas.avoiding(TP, now) == FOLLOWER  # the leader may not know yet

    run(scenario)


def test_a_replica_out_of_the_isr_in_the_metadata_loses_its_lease() -> None:
    async def scenario() -> None:
        h = Harness()
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        topics = h.consumer._cluster.topics
        parts = dict(topics["t"].partitions)
        parts[0] = parts[0]._replace(isr=(LEADER, THIRD))
        topics["t"] = topics["t"]._replace(partitions=parts)
        assert h.fetch_node() == LEADER
        assert h.fetch_node(OTHER) == LEADER

    run(scenario)


def test_a_replica_gone_from_the_brokers_list_is_avoided() -> None:
    async def scenario() -> None:
        h = Harness()
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        del h.consumer._cluster.brokers[FOLLOWER]
        assert h.fetch_node() == LEADER
        assert h.consumer._request_rack(h.sent(LEADER), asyncio.get_running_loop().time()) == ""

    run(scenario)


def test_a_lease_outlives_reassigning_the_partition() -> None:
    """A Spark worker reads the same partition task after task, assigning in between."""

    async def scenario() -> None:
        h = Harness()
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        h.consumer.assign([])
        h.consumer.assign([TP])
        h.consumer.seek(TP, 0)
        assert h.fetch_node() == FOLLOWER

    run(scenario)


def test_client_rack_and_metadata_max_age_are_consumer_settings() -> None:
    default = ConsumerConfig.from_mapping({})
    assert (default.client_rack, default.metadata_max_age_ms) == ("", 300_000)
    c = ConsumerConfig.from_mapping({"client.rack": "use1-az2", "metadata.max.age.ms": "60000"})
    assert (c.client_rack, c.metadata_max_age_ms) == ("use1-az2", 60_000)


def test_a_redirect_to_the_leader_itself_ends_the_lease() -> None:
    async def scenario() -> None:
        h = Harness()
        h.answer(LEADER, h.sent(LEADER), preferred=FOLLOWER)
        h.answer(FOLLOWER, h.sent(FOLLOWER), preferred=LEADER)
        assert h.fetch_node() == LEADER

    run(scenario)


def test_a_partition_leaving_a_brokers_session_is_forgotten_there() -> None:
    """KIP-227 across brokers: the session it left stops serving it, and takes it back
    at its new offset when it returns."""
    x, y = FetchSessionHandler(LEADER), FetchSessionHandler(FOLLOWER)
    tid = uuid.uuid4()

    def fetch(tp: TopicPartition, offset: int) -> PartitionFetch:
        return PartitionFetch(tid, tp.topic, tp.partition, offset, -1, 1 << 20)

    def full_ok(h: FetchSessionHandler, session_id: int, tps: list[TopicPartition]) -> None:
        parts = [PartitionData(tid, tp.topic, tp.partition) for tp in tps]
        assert h.handle_response(FetchResponseData(session_id=session_id, partitions=parts))

    req = x.build([fetch(TP, 0), fetch(OTHER, 0)], version=12)
    full_ok(x, 7, [TP, OTHER])
    req = x.build([fetch(OTHER, 0)], version=12)  # TP moved to the follower
    assert [(f.topic, f.partition) for f in req.forgotten] == [TP]
    assert req.partitions == []
    assert x.handle_response(FetchResponseData(session_id=7))
    req = y.build([fetch(TP, 0)], version=12)
    assert [p.fetch_offset for p in req.partitions] == [0]
    full_ok(y, 9, [TP])
    req = x.build([fetch(OTHER, 0), fetch(TP, 40)], version=12)  # back, further on
    assert [(p.partition, p.fetch_offset) for p in req.partitions] == [(0, 40)]
    assert req.forgotten == []
