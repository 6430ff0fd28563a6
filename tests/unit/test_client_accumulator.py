"""The producer's batching rules, driven with a fake clock (seconds)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.client.accumulator import RecordAccumulator
from headwater.client.types import TopicPartition
from headwater.records.compression import Compression
from headwater.records.record import decode_batches

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)


def add(acc: RecordAccumulator, tp: TopicPartition, value: bytes, now: float = 0.0, **kw: object):
    return acc.append(tp, 1000, None, value, [], object(), now, **kw)  # type: ignore[arg-type]


def test_records_of_a_partition_share_one_batch_until_it_is_full() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=5)
    first = add(acc, A0, b"x" * 100)
    second = add(acc, A0, b"y" * 100)
    assert first.new_batch and not second.new_batch
    assert first.batch is second.batch
    assert acc.pending_batches() == 1


def test_a_record_that_does_not_fit_opens_a_new_batch_and_readies_the_old_one() -> None:
    acc = RecordAccumulator(batch_size=300, linger_ms=1000)
    add(acc, A0, b"x" * 200)
    result = add(acc, A0, b"y" * 200)
    assert result.new_batch and result.batch_full
    ready, _ = acc.ready(now=0.0)
    assert ready == [A0]
    assert acc.pending_batches() == 2


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own() -> None:
    acc = RecordAccumulator(batch_size=100, linger_ms=1000)
    big = add(acc, A0, b"z" * 5000)
    assert big.new_batch and big.batch_full
    assert big.batch is not None and big.batch.record_count == 1


def test_batch_is_not_ready_before_linger_and_ready_after() -> None:
    acc = RecordAccumulator(batch_size=16384, linger_ms=5)
    add(acc, A0, b"v", now=10.0)
    ready, wait = acc.ready(now=10.002)
    assert ready == [] and wait is not None and abs(wait - 0.003) < 1e-9
    ready, wait = acc.ready(now=10.005)
    assert ready == [A0] and wait is None


def test_flush_makes_every_batch_ready_at_once() -> None:
    acc = RecordAccumulator(batch_size=16384, linger_ms=10_000)
    add(acc, A0, b"v")
    add(acc, A1, b"w")
    acc.begin_flush()
    ready, _ = acc.ready(now=0.0)
    assert sorted(ready) == [A0, A1]
    acc.end_flush()
    assert acc.ready(now=0.0)[0] == []


def test_drain_takes_one_batch_per_partition_within_max_request_size() -> None:
    acc = RecordAccumulator(batch_size=200, linger_ms=0)
    for _ in range(3):
        add(acc, A0, b"x" * 150)
    add(acc, A1, b"y" * 150)
    drained = acc.drain([A0, A1], max_request_size=10_000)
    assert [b.tp for b in drained] == [A0, A1]
    assert acc.pending_batches() == 2
    # A tight request size still sends the first batch, never an empty request.
    one = acc.drain([A0, A1], max_request_size=1)
    assert [b.tp for b in one] == [A0]


def test_retried_batch_goes_back_ahead_of_younger_batches() -> None:
    acc = RecordAccumulator(batch_size=200, linger_ms=0)
    add(acc, A0, b"a" * 150)
    add(acc, A0, b"b" * 150)
    (first,) = acc.drain([A0], 10_000)
    add(acc, A0, b"c" * 150)
    acc.reenqueue(first)
    order = []
    while batch := acc.drain([A0], 10_000):
        order.append(batch[0])
    assert order[0] is first and first.attempts == 1
    assert len(order) == 3


def test_retried_batch_keeps_its_bytes_and_sequence() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=0)
    add(acc, A0, b"a")
    (batch,) = acc.drain([A0], 10_000)
    batch.base_sequence = 42
    payload = batch.build(producer_id=7, producer_epoch=1)
    acc.reenqueue(batch)
    (again,) = acc.drain([A0], 10_000)
    assert again.build(producer_id=8, producer_epoch=2) is payload
    header = next(decode_batches(payload)).header
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 42)


def test_abort_on_new_batch_refuses_records_that_would_open_a_batch() -> None:
    acc = RecordAccumulator(batch_size=300, linger_ms=1000)
    assert add(acc, A0, b"x", abort_on_new_batch=True).batch is None
    add(acc, A0, b"x" * 200)
    assert add(acc, A0, b"y", abort_on_new_batch=True).batch is not None
    assert add(acc, A0, b"z" * 200, abort_on_new_batch=True).batch is None


def test_expire_removes_batches_waiting_past_the_delivery_timeout() -> None:
    acc = RecordAccumulator(linger_ms=0)
    add(acc, A0, b"old", now=0.0)
    add(acc, A1, b"new", now=100.0)
    expired = acc.expire(now=120.0, timeout_s=120.0)
    assert [b.tp for b in expired] == [A0]
    assert acc.pending_batches() == 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(max_size=400), min_size=1, max_size=60),
    st.sampled_from(list(Compression)),
    st.integers(64, 4096),
)
def test_batches_hold_every_record_in_order(
    values: list[bytes], codec: Compression, batch_size: int
) -> None:
    acc = RecordAccumulator(batch_size=batch_size, linger_ms=0, compression=codec)
    for v in values:
        add(acc, A0, v)
    decoded: list[bytes | None] = []
    while drained := acc.drain([A0], 1 << 30):
        for batch in drained:
            assert batch.estimated_size <= batch_size or batch.record_count == 1
            for b in decode_batches(batch.build()):
                decoded.extend(r.value for r in b.records)
    assert decoded == values


def test_a_prebuilt_batch_queues_behind_the_open_one_and_closes_it() -> None:
    import pyarrow as pa

    from headwater.records.columnar_encode import encode_batches

    acc = RecordAccumulator(batch_size=10_000, linger_ms=1000)
    opened = add(acc, A0, b"first")
    (builder,) = encode_batches(pa.array([b"a", b"b"]), timestamp_ms=7)
    built = acc.append_built(A0, builder, 7, object(), 0.0, builder.estimated_size)
    later = add(acc, A0, b"last")
    assert later.batch is not opened.batch and later.batch is not built
    assert built.full and built.record_count == 2
    ready, _ = acc.ready(now=0.0)
    assert ready == [A0]
    order = []
    while acc.has_pending():
        (batch,) = acc.drain([A0], 1 << 20)
        order.extend(r.value for d in decode_batches(batch.build()) for r in d.records)
    assert order == [b"first", b"a", b"b", b"last"]
