"""Handing fetched records to the application: positions, control batches, partial tails."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.client.completed_fetch import CompletedFetch, next_fetch_offset
from headwater.client.errors import KafkaError
from headwater.client.types import LOG_APPEND_TIME, TopicPartition
from headwater.protocol.fetch_types import AbortedTransaction
from headwater.records.batch import iter_batch_headers
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


def test_read_committed_filter_runs_once_when_columns_are_decoded_again() -> None:
    data = (
        batch(0, 2, producer_id=1, transactional=True)  # aborted
        + marker(2, 1, commit=False)
        + batch(3, 2)
    )
    aborted = [AbortedTransaction(producer_id=1, first_offset=0)]
    fetch = CompletedFetch(TP, data, 0, isolation_level=1, aborted_transactions=aborted)
    assert fetch.take_columns(0).column("offset").to_pylist() == [3, 4]
    # take() needs headers: the second decode must keep the first decision.
    assert offsets(fetch, 0) == [3, 4]


def test_aborted_transaction_that_began_before_the_fetch_is_still_skipped() -> None:
    # The broker lists aborted transactions overlapping the fetch, also older ones.
    data = batch(10, 2, producer_id=4, transactional=True) + marker(12, 4, commit=False)
    aborted = [AbortedTransaction(producer_id=4, first_offset=3)]
    fetch = CompletedFetch(TP, data, 10, isolation_level=1, aborted_transactions=aborted)
    assert offsets(fetch, 10) == []
    assert fetch.next_fetch_offset == 13, "the position moves past skipped batches"


def test_abort_marker_of_a_producer_not_listed_changes_nothing() -> None:
    data = marker(0, 8, commit=False) + batch(1, 2, producer_id=8, transactional=True)
    fetch = CompletedFetch(TP, data, 0, isolation_level=1, aborted_transactions=[])
    assert offsets(fetch, 0) == [1, 2]


def test_idempotent_batches_are_never_filtered() -> None:
    # An idempotent (not transactional) batch of a producer id that also aborted.
    data = (
        batch(0, 1, producer_id=5, transactional=True)
        + batch(1, 2, producer_id=5)
        + marker(3, 5, commit=False)
    )
    aborted = [AbortedTransaction(producer_id=5, first_offset=0)]
    fetch = CompletedFetch(TP, data, 0, isolation_level=1, aborted_transactions=aborted)
    assert offsets(fetch, 0) == [1, 2]


@st.composite
def transactional_logs(
    draw: st.DrawFn,
) -> tuple[bytes, list[tuple[AbortedTransaction, int]], list[int], list[int], int]:
    """A partition log as a broker writes it: plain batches, transactions of 3
    producers interleaved, COMMIT/ABORT markers. Returns (bytes, every aborted
    transaction with its ABORT marker's offset, committed-visible offsets, all
    data offsets, log end)."""
    data = b""
    offset = 0
    open_txn: dict[int, int] = {}  # producer -> first offset of its open transaction
    txn_records: dict[int, list[int]] = {}
    aborted: list[tuple[AbortedTransaction, int]] = []
    visible: list[int] = []
    every: list[int] = []
    steps = draw(st.lists(st.tuples(st.sampled_from("ptcA"), st.integers(1, 3)), max_size=25))
    for kind, pid in steps:
        if kind == "p":  # a plain, non-transactional batch
            n = draw(st.integers(1, 3))
            data += batch(offset, n)
            visible.extend(range(offset, offset + n))
            every.extend(range(offset, offset + n))
            offset += n
        elif kind == "t":
            n = draw(st.integers(1, 3))
            data += batch(offset, n, producer_id=pid, transactional=True)
            open_txn.setdefault(pid, offset)
            txn_records.setdefault(pid, []).extend(range(offset, offset + n))
            every.extend(range(offset, offset + n))
            offset += n
        elif pid in open_txn:  # end the producer's transaction
            commit = kind == "c"
            data += marker(offset, pid, commit=commit)
            if commit:
                visible.extend(txn_records[pid])
            else:
                aborted.append((AbortedTransaction(pid, open_txn[pid]), offset))
            del open_txn[pid]
            txn_records[pid] = []
            offset += 1
    for pid in sorted(open_txn):  # close what is open: read_committed stops at the LSO
        data += marker(offset, pid, commit=True)
        visible.extend(txn_records[pid])
        offset += 1
    return data, aborted, sorted(visible), every, offset


@settings(max_examples=150, deadline=None)
@given(transactional_logs(), st.data())
def test_read_committed_sees_exactly_the_committed_records(
    log: tuple[bytes, list[tuple[AbortedTransaction, int]], list[int], list[int], int],
    draw: st.DataObject,
) -> None:
    data, aborted_at, visible, every, end = log
    aborted = [txn for txn, _ in aborted_at]
    committed = CompletedFetch(TP, data, 0, isolation_level=1, aborted_transactions=aborted)
    assert offsets(committed, 0) == visible
    assert committed.take_columns(0).column("offset").to_pylist() == visible
    uncommitted = CompletedFetch(TP, data, 0, isolation_level=0, aborted_transactions=aborted)
    assert offsets(uncommitted, 0) == every, "read_uncommitted: all data, no markers"
    if end:
        assert committed.next_fetch_offset == end
    # A fetch from the middle of the log, with the aborted transactions the broker
    # lists for it: those not ended before the fetch starts (TransactionIndex).
    start = draw.draw(st.integers(0, max(0, end - 1)))
    overlapping = [txn for txn, ended in aborted_at if ended >= start]
    tail = b"".join(
        data[h.position : h.position + h.size]
        for h in iter_batch_headers(data)
        if h.next_offset > start
    )
    fetch = CompletedFetch(TP, tail, start, isolation_level=1, aborted_transactions=overlapping)
    assert offsets(fetch, start) == [o for o in visible if o >= start]


def test_control_type_is_read_from_the_record_also_when_compressed() -> None:
    from headwater.client.completed_fetch import control_is_abort
    from headwater.records.batch import parse_batch_header

    for commit in (True, False):
        plain = marker(0, 1, commit=commit)
        assert control_is_abort(plain, parse_batch_header(plain)) is not commit
        b = RecordBatchBuilder(
            Compression.GZIP,
            producer_id=1,
            producer_epoch=0,
            is_transactional=True,
            is_control=True,
        )
        b.append(0, struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, 0))
        packed = b.build()
        assert control_is_abort(packed, parse_batch_header(packed)) is not commit


def test_corrupt_control_batch_is_corrupt_message_under_read_committed() -> None:
    data = bytearray(marker(2, 1, commit=False))
    data[-3] ^= 0xFF
    fetch = CompletedFetch(
        TP,
        batch(0, 2, producer_id=1, transactional=True) + bytes(data),
        0,
        isolation_level=1,
        aborted_transactions=[AbortedTransaction(1, 0)],
    )
    with pytest.raises(KafkaError) as info:
        fetch.take(0)
    assert info.value.name == "CORRUPT_MESSAGE"
