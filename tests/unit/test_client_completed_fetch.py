"""Handing fetched records to the application: positions, control batches, partial tails."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.client.completed_fetch import CompletedFetch, next_fetch_offset
from headwater.client.errors import KafkaError
from headwater.client.types import LOG_APPEND_TIME, TopicPartition
from headwater.fetch.types import AbortedTransaction
from headwater.records.compression import Compression
from headwater.records.record import RecordBatchBuilder

TP = TopicPartition("t", 3)


def batch(
    base: int,
    count: int,
    *,
    codec: Compression = Compression.NONE,
    producer_id: int = -1,
    transactional: bool = False,
    control: bool = False,
    key: bytes | None = None,
    timestamp_type: int = 0,
) -> bytes:
    b = RecordBatchBuilder(
        codec,
        base_offset=base,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=transactional,
        timestamp_type=timestamp_type,
        is_control=control,
    )
    for i in range(count):
        b.append(1000 + base + i, key, b"v%d" % (base + i), [("h", b"%d" % i)])
    return b.build()


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    b = RecordBatchBuilder(
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
    )
    b.append(0, struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0))
    return b.build()


def offsets(fetch: CompletedFetch, position: int, limit: int | None = None) -> list[int]:
    return [r.offset for r in fetch.take(position, limit)]


def test_next_fetch_offset_follows_the_last_complete_batch() -> None:
    data = batch(10, 5) + batch(15, 3)
    assert next_fetch_offset(data, 10) == 18
    assert CompletedFetch(TP, data, 10).next_fetch_offset == 18


def test_records_below_the_position_are_dropped() -> None:
    fetch = CompletedFetch(TP, batch(10, 5) + batch(15, 3), 13)
    assert offsets(fetch, 13) == [13, 14, 15, 16, 17]


def test_partial_trailing_batch_is_left_for_the_next_fetch() -> None:
    whole, cut = batch(0, 4), batch(4, 4)
    fetch = CompletedFetch(TP, whole + cut[: len(cut) - 7], 0)
    assert fetch.next_fetch_offset == 4
    assert offsets(fetch, 0) == [0, 1, 2, 3]


def test_only_a_partial_batch_makes_no_progress() -> None:
    cut = batch(0, 4)
    fetch = CompletedFetch(TP, cut[:30], 0)
    assert not fetch.has_records
    assert fetch.take(0) == []


def test_control_batches_are_skipped_but_advance_the_fetch_offset() -> None:
    data = batch(0, 2, producer_id=9, transactional=True) + marker(2, 9, commit=True)
    fetch = CompletedFetch(TP, data, 0)
    assert fetch.next_fetch_offset == 3
    assert offsets(fetch, 0) == [0, 1]


def test_read_committed_skips_aborted_transactions() -> None:
    data = (
        batch(0, 2, producer_id=1, transactional=True)  # aborted below
        + batch(2, 2, producer_id=2, transactional=True)  # committed
        + marker(4, 1, commit=False)
        + marker(5, 2, commit=True)
        + batch(6, 1, producer_id=1, transactional=True)  # a later, committed transaction
        + marker(7, 1, commit=True)
    )
    aborted = [AbortedTransaction(producer_id=1, first_offset=0)]
    committed = CompletedFetch(TP, data, 0, isolation_level=1, aborted_transactions=aborted)
    assert offsets(committed, 0) == [2, 3, 6]
    uncommitted = CompletedFetch(TP, data, 0, isolation_level=0, aborted_transactions=aborted)
    assert offsets(uncommitted, 0) == [0, 1, 2, 3, 6]


def test_take_respects_max_records_and_continues_where_it_stopped() -> None:
    fetch = CompletedFetch(TP, batch(0, 5) + batch(5, 5), 0)
    assert offsets(fetch, 0, 3) == [0, 1, 2]
    assert offsets(fetch, 3, 4) == [3, 4, 5, 6]
    assert offsets(fetch, 7, 100) == [7, 8, 9]
    assert fetch.take(10, 100) == []


def test_records_carry_keys_values_headers_and_timestamps() -> None:
    fetch = CompletedFetch(TP, batch(0, 2, key=b"k", codec=Compression.ZSTD), 0)
    first, second = fetch.take(0)
    assert (first.topic, first.partition, first.offset) == ("t", 3, 0)
    assert (first.key, first.value, first.headers) == (b"k", b"v0", [("h", b"0")])
    assert (second.timestamp, second.timestamp_type) == (1001, 0)


def test_log_append_time_batches_report_the_batch_timestamp() -> None:
    fetch = CompletedFetch(TP, batch(0, 3, timestamp_type=1), 0)
    records = fetch.take(0)
    assert {r.timestamp_type for r in records} == {LOG_APPEND_TIME}
    assert {r.timestamp for r in records} == {1002}


def test_corrupt_batch_raises_corrupt_message() -> None:
    data = bytearray(batch(0, 3))
    data[-1] ^= 0xFF
    fetch = CompletedFetch(TP, bytes(data), 0)
    with pytest.raises(KafkaError) as info:
        fetch.take(0)
    assert info.value.name == "CORRUPT_MESSAGE"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 20), min_size=1, max_size=8),
    st.sampled_from(list(Compression)),
    st.data(),
)
def test_every_record_at_or_after_the_position_is_returned_once(
    sizes: list[int], codec: Compression, draw: st.DataObject
) -> None:
    data = b""
    base = 0
    for n in sizes:
        data += batch(base, n, codec=codec)
        base += n
    position = draw.draw(st.integers(0, base - 1))
    limit = draw.draw(st.integers(1, 25))
    fetch = CompletedFetch(TP, data, position)
    got: list[int] = []
    while chunk := offsets(fetch, got[-1] + 1 if got else position, limit):
        got.extend(chunk)
    assert got == list(range(position, base))


def test_columns_hold_the_same_records_as_take() -> None:
    data = (
        batch(0, 3, producer_id=1, transactional=True, codec=Compression.LZ4)  # aborted
        + batch(3, 4, producer_id=2, transactional=True, codec=Compression.ZSTD)
        + marker(7, 1, commit=False)
        + batch(8, 2, key=b"k", timestamp_type=LOG_APPEND_TIME)
    )
    aborted = [AbortedTransaction(producer_id=1, first_offset=0)]
    rows = CompletedFetch(TP, data, 0, isolation_level=1, aborted_transactions=aborted)
    cols = CompletedFetch(TP, data, 0, isolation_level=1, aborted_transactions=aborted)
    records = rows.take(4)
    first = cols.take_columns(4, 3)
    rest = cols.take_columns(7, include_headers=True)
    assert first.num_rows == 3
    assert "headers" not in first.schema.names
    as_rows = [
        (o, t, y, k, v)
        for part in (first, rest)
        for o, t, y, k, v in zip(
            *(part.column(n).to_pylist() for n in ("offset", "timestamp", "timestampType")),
            part.column("key").to_pylist(),
            part.column("value").to_pylist(),
            strict=True,
        )
    ]
    assert as_rows == [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in records]
    assert [[(h["key"], h["value"]) for h in hs] for hs in rest.column("headers").to_pylist()] == [
        r.headers for r in records[3:]
    ]
    assert cols.take_columns(10).num_rows == 0
