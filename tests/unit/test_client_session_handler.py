"""The client side of KIP-227, rule by rule, without sockets."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.client.session_handler import FetchSessionHandler
from headwater.protocol.fetch_metadata import MAX_EPOCH, next_epoch
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchRequestData,
    FetchResponseData,
    PartitionData,
    PartitionFetch,
)

V = 12  # a name-keyed version with sessions


def pf(topic: str, partition: int, offset: int, max_bytes: int = 1 << 20) -> PartitionFetch:
    return PartitionFetch(ZERO_UUID, topic, partition, offset, -1, max_bytes)


def data(topic: str, partition: int, topic_id: uuid.UUID = ZERO_UUID) -> PartitionData:
    return PartitionData(topic_id, topic, partition, high_watermark=10)


def full_response(req: FetchRequestData, session_id: int) -> FetchResponseData:
    return FetchResponseData(
        session_id=session_id,
        partitions=[data(p.topic, p.partition, p.topic_id) for p in req.partitions],
    )


def keys(req: FetchRequestData) -> list[tuple[str, int]]:
    return [(p.topic, p.partition) for p in req.partitions]


def established(session_id: int = 77) -> tuple[FetchSessionHandler, list[PartitionFetch]]:
    """A handler whose session ``session_id`` holds a-0, a-1, b-0 at offset 0."""
    handler = FetchSessionHandler()
    wanted = [pf("a", 0, 0), pf("a", 1, 0), pf("b", 0, 0)]
    req = handler.build(wanted, version=V)
    assert handler.handle_response(full_response(req, session_id))
    return handler, wanted


def test_first_request_is_full_with_session_zero_epoch_zero_in_given_order() -> None:
    handler = FetchSessionHandler()
    wanted = [pf("b", 0, 5), pf("a", 1, 3), pf("a", 0, 9)]
    req = handler.build(wanted, version=V, max_wait_ms=250, min_bytes=7, max_bytes=99)
    assert (req.session_id, req.session_epoch) == (0, 0)
    assert keys(req) == [("b", 0), ("a", 1), ("a", 0)]
    assert req.forgotten == []
    assert (req.max_wait_ms, req.min_bytes, req.max_bytes) == (250, 7, 99)


def test_full_response_with_session_id_makes_next_request_incremental_epoch_one() -> None:
    handler, wanted = established(77)
    req = handler.build(wanted, version=V)
    assert (req.session_id, req.session_epoch) == (77, 1)


def test_incremental_fetch_omits_unchanged_partitions() -> None:
    handler, _ = established()
    req = handler.build([pf("a", 0, 0), pf("a", 1, 0), pf("b", 0, 0)], version=V)
    assert req.partitions == [] and req.forgotten == []


def test_incremental_fetch_sends_partitions_whose_offset_or_max_bytes_changed() -> None:
    handler, _ = established()
    req = handler.build([pf("a", 0, 12), pf("a", 1, 0, max_bytes=5), pf("b", 0, 0)], version=V)
    assert keys(req) == [("a", 0), ("a", 1)]
    assert [p.fetch_offset for p in req.partitions] == [12, 0]
    assert req.partitions[1].partition_max_bytes == 5


def test_incremental_fetch_adds_new_partitions_and_forgets_removed_ones() -> None:
    handler, _ = established()
    req = handler.build([pf("a", 0, 0), pf("b", 0, 0), pf("c", 4, 8)], version=V)
    assert keys(req) == [("c", 4)]
    assert [(f.topic, f.partition) for f in req.forgotten] == [("a", 1)]
    assert handler.session_partitions == [("a", 0), ("b", 0), ("c", 4)]


def test_epoch_increments_with_each_incremental_response() -> None:
    handler, wanted = established(5)
    for expected in (1, 2, 3):
        req = handler.build(wanted, version=V)
        assert req.session_epoch == expected
        assert handler.handle_response(FetchResponseData(session_id=5))


def test_epoch_wraps_from_int_max_to_one() -> None:
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(1) == 2
    handler, wanted = established(5)
    handler.epoch = MAX_EPOCH
    req = handler.build(wanted, version=V)
    assert req.session_epoch == MAX_EPOCH
    assert handler.handle_response(FetchResponseData(session_id=5))
    assert handler.build(wanted, version=V).session_epoch == 1


def test_session_id_not_found_resets_to_a_new_session() -> None:
    handler, wanted = established(5)
    handler.build(wanted, version=V)
    assert not handler.handle_response(FetchResponseData(error_code=70))
    req = handler.build(wanted, version=V)
    assert (req.session_id, req.session_epoch) == (0, 0)
    assert keys(req) == [("a", 0), ("a", 1), ("b", 0)]


def test_invalid_epoch_closes_and_recreates_the_session() -> None:
    handler, wanted = established(5)
    handler.build(wanted, version=V)
    assert not handler.handle_response(FetchResponseData(error_code=71))
    req = handler.build(wanted, version=V)
    assert (req.session_id, req.session_epoch) == (5, 0)
    assert len(req.partitions) == 3


def test_any_other_top_level_error_closes_and_recreates_the_session() -> None:
    for code in (106, 7, -1):
        handler, wanted = established(5)
        handler.build(wanted, version=V)
        assert not handler.handle_response(FetchResponseData(error_code=code))
        assert (handler.session_id, handler.epoch) == (5, 0)


def test_network_error_makes_next_request_full_with_the_same_session_id() -> None:
    handler, wanted = established(5)
    handler.build(wanted, version=V)
    handler.handle_error(ConnectionResetError("gone"))
    req = handler.build(wanted, version=V)
    assert (req.session_id, req.session_epoch) == (5, 0)
    assert keys(req) == [("a", 0), ("a", 1), ("b", 0)]
    # The full response that re-creates the session continues it incrementally.
    assert handler.handle_response(full_response(req, 6))
    assert (handler.session_id, handler.epoch) == (6, 1)


def test_network_error_before_any_session_stays_at_zero_zero() -> None:
    handler = FetchSessionHandler()
    handler.build([pf("a", 0, 0)], version=V)
    handler.handle_error()
    assert (handler.session_id, handler.epoch) == (0, 0)


def test_full_response_without_session_means_next_request_is_full_again() -> None:
    handler = FetchSessionHandler()
    wanted = [pf("a", 0, 0)]
    req = handler.build(wanted, version=V)
    assert handler.handle_response(full_response(req, 0))
    assert (handler.session_id, handler.epoch) == (0, 0)
    assert keys(handler.build(wanted, version=V)) == [("a", 0)]


def test_incremental_response_with_session_zero_closes_the_session() -> None:
    handler, wanted = established(5)
    handler.build(wanted, version=V)
    assert handler.handle_response(FetchResponseData(session_id=0, partitions=[data("a", 0)]))
    req = handler.build(wanted, version=V)
    assert (req.session_id, req.session_epoch) == (0, 0)


def test_full_response_must_hold_every_requested_partition() -> None:
    handler = FetchSessionHandler()
    req = handler.build([pf("a", 0, 0), pf("a", 1, 0)], version=V)
    partial = FetchResponseData(session_id=9, partitions=[data("a", 0)])
    assert not handler.handle_response(partial)
    # The session that response created is closed by the next (full) request.
    assert (handler.session_id, handler.epoch) == (9, 0)
    assert len(handler.build([pf("a", 0, 0), pf("a", 1, 0)], version=V).partitions) == 2
    assert req.session_epoch == 0


def test_full_response_must_not_hold_unrequested_partitions() -> None:
    handler = FetchSessionHandler()
    req = handler.build([pf("a", 0, 0)], version=V)
    extra = full_response(req, 0)
    extra.partitions.append(data("zzz", 3))
    assert not handler.handle_response(extra)
    assert (handler.session_id, handler.epoch) == (0, 0)


def test_response_naming_a_partition_twice_is_rejected() -> None:
    handler = FetchSessionHandler()
    handler.build([pf("a", 0, 0), pf("a", 1, 0)], version=V)
    twice = FetchResponseData(session_id=3, partitions=[data("a", 0), data("a", 0)])
    assert not handler.handle_response(twice)


def test_incremental_response_with_unknown_partition_resets_to_full() -> None:
    handler, wanted = established(5)
    handler.build(wanted, version=V)
    assert not handler.handle_response(FetchResponseData(session_id=5, partitions=[data("x", 0)]))
    assert (handler.session_id, handler.epoch) == (5, 0)


def test_incremental_response_may_name_any_subset_of_the_session() -> None:
    handler, wanted = established(5)
    handler.build(wanted, version=V)
    assert handler.handle_response(FetchResponseData(session_id=5, partitions=[data("b", 0)]))
    assert (handler.session_id, handler.epoch) == (5, 2)


def test_incremental_response_from_another_session_resets_to_full() -> None:
    handler, wanted = established(5)
    handler.build(wanted, version=V)
    assert not handler.handle_response(FetchResponseData(session_id=6))
    assert (handler.session_id, handler.epoch) == (5, 0)


def test_disabled_sessions_always_send_sessionless_full_requests() -> None:
    handler = FetchSessionHandler(enabled=False)
    wanted = [pf("a", 0, 0), pf("a", 1, 0)]
    for _ in range(3):
        req = handler.build(wanted, version=V)
        assert (req.session_id, req.session_epoch) == (0, -1)
        assert len(req.partitions) == 2
        assert handler.handle_response(full_response(req, 0))


def test_fetch_versions_before_seven_are_sessionless() -> None:
    handler = FetchSessionHandler()
    req = handler.build([pf("a", 0, 0)], version=6)
    assert (req.session_id, req.session_epoch) == (0, -1)


def test_topic_id_responses_get_names_from_the_session() -> None:
    topic_id = uuid.uuid4()
    handler = FetchSessionHandler()
    wanted = [PartitionFetch(topic_id, "a", 0, 0), PartitionFetch(topic_id, "a", 1, 0)]
    req = handler.build(wanted, version=13)
    response = FetchResponseData(
        session_id=4, partitions=[data("", 0, topic_id), data("", 1, topic_id)]
    )
    assert handler.handle_response(response)
    assert [p.topic for p in response.partitions] == ["a", "a"]
    assert req.session_epoch == 0


def test_recreated_topic_is_forgotten_under_its_old_id_and_sent_under_the_new() -> None:
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    handler = FetchSessionHandler()
    req = handler.build([PartitionFetch(old_id, "a", 0, 7)], version=13)
    assert handler.handle_response(
        FetchResponseData(session_id=4, partitions=[data("", 0, old_id)])
    )
    req = handler.build([PartitionFetch(new_id, "a", 0, 0)], version=13)
    assert [(f.topic_id, f.partition) for f in req.forgotten] == [(old_id, 0)]
    assert [(p.topic_id, p.fetch_offset) for p in req.partitions] == [(new_id, 0)]


# -- property: the broker's view always equals what the client wants -------------------

_KEYS = [("t", i) for i in range(6)]
_step = st.dictionaries(st.sampled_from(_KEYS), st.integers(0, 3), max_size=len(_KEYS))
_outcome = st.sampled_from(["ok", "ok", "ok", "network", "70", "71", "closed"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_step, _outcome), min_size=1, max_size=25))
def test_broker_session_mirrors_the_wanted_partitions(steps: list[tuple[dict, str]]) -> None:
    """Apply each request to a model broker session: after every successful
    response the broker's partitions and offsets are exactly the client's."""
    handler = FetchSessionHandler()
    broker: dict[tuple[str, int], int] | None = None  # None: no session on the broker
    broker_id, next_id = 0, 100
    for wanted_map, outcome in steps:
        wanted = [pf(t, p, off) for (t, p), off in wanted_map.items()]
        req = handler.build(wanted, version=V)
        if req.session_epoch == 0:  # full: the broker replaces its session
            assert keys(req) == list(wanted_map)
            broker = {(p.topic, p.partition): p.fetch_offset for p in req.partitions}
            next_id += 1
            broker_id = next_id
        else:
            assert broker is not None and req.session_id == broker_id
            for f in req.forgotten:
                broker.pop((f.topic, f.partition), None)
            for p in req.partitions:
                broker[(p.topic, p.partition)] = p.fetch_offset
        if outcome == "network":
            handler.handle_error()
            continue
        if outcome in ("70", "71") and req.session_epoch != 0:
            handler.handle_response(FetchResponseData(error_code=int(outcome)))
            continue
        session_id = 0 if outcome == "closed" else broker_id
        parts = [data(t, p) for (t, p) in broker] if req.session_epoch == 0 else []
        assert handler.handle_response(FetchResponseData(session_id=session_id, partitions=parts))
        assert broker == wanted_map
