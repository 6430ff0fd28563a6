"""Transactions in the partition log: producer state, LSO, .txnindex, snapshots, recovery."""

from __future__ import annotations

import asyncio
import os
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest

from headwater.broker.handlers.txn_markers import WriteTxnMarkersApi
from headwater.coordinator.partition_state_log import PartitionStateLog
from headwater.coordinator.state_log import TxnEnd
from headwater.fetch.contexts import new_fetch_context
from headwater.fetch.planner import read_partitions
from headwater.fetch.purgatory import SessionPartitionWatcher
from headwater.fetch.session_cache import FetchSessionCache
from headwater.log import log as log_module
from headwater.log.config import LogConfig
from headwater.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.log.log_directory import LogDirectory
from headwater.log.producer_snapshot import (
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
)
from headwater.log.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_types import (
    AbortedTransaction,
    FetchRequestData,
    FetchResponseData,
    PartitionFetch,
)
from headwater.protocol.messages import build_request
from headwater.records import RecordBatchBuilder, decode_batches
from headwater.records.batch import parse_batch_header
from headwater.records.control import build_control_batch, parse_control_batch
from headwater.security.acl import AclOperation
from headwater.testing.cluster_of_one import cluster_of_one
from headwater.txn.markers import TxnMarker, TxnMarkerWriter

NOW = 1_700_000_000_000
RC = Isolation.TXN_COMMITTED
RU = Isolation.HIGH_WATERMARK


class Producer:
    """Builds one producer's batches with running sequence numbers."""

    def __init__(self, producer_id: int, epoch: int = 0) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.seq = 0

    def batch(self, count: int = 1, *, transactional: bool = True, size: int = 50) -> bytes:
        builder = RecordBatchBuilder(
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=transactional,
        )
        for i in range(count):
            builder.append(NOW, b"k%d" % i, bytes([65 + i % 26]) * size)
        self.seq += count
        return builder.build()


def make_log(path: Path, *, recover: bool = False, **config: int) -> Log:
    return Log(path / "t-0", LogConfig(**config), FileHandleCache(64), recover=recover)


def plain(count: int = 1, size: int = 50) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(NOW, None, bytes([i % 256]) * size)
    return builder.build()


def read_offsets(log: Log, offset: int, isolation: Isolation) -> list[int]:
    result = log.read(offset, 1 << 20, isolation, True)
    if result.records is None:
        return []
    return [
        r.offset
        for b in decode_batches(result.records.read())
        if not b.header.is_control
        for r in b.records
    ]


def commit(log: Log, producer: Producer, coordinator_epoch: int = 0) -> int:
    return log.append_control_marker(
        producer.producer_id, producer.epoch, True, coordinator_epoch, NOW
    ).base_offset


def abort(log: Log, producer: Producer, coordinator_epoch: int = 0) -> int:
    return log.append_control_marker(
        producer.producer_id, producer.epoch, False, coordinator_epoch, NOW
    ).base_offset


# -- control batches ---------------------------------------------------------------------


def test_a_control_batch_is_kafkas_layout_and_parses_back() -> None:
    data = build_control_batch(7, 3, False, 11, NOW)
    header = parse_batch_header(data)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    record = next(iter(decode_batches(data))).records[0]
    assert record.key == struct.pack(">hh", 0, 0)  # version 0, ABORT
    assert record.value == struct.pack(">hi", 0, 11)  # version 0, coordinator epoch
    marker = parse_control_batch(data, header)
    assert marker is not None and (marker.commit, marker.coordinator_epoch) == (False, 11)


# -- open transactions and the last stable offset ----------------------------------------


def test_a_transaction_holds_the_lso_at_its_first_offset_until_its_commit(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.append(plain(2), NOW)  # 0-1
    p = Producer(5)
    log.append(p.batch(3), NOW)  # 2-4
    log.append(plain(1), NOW)  # 5
    assert log.last_stable_offset == 2 and log.high_watermark == 6
    assert log.ongoing_transactions() == {2: 5}
    assert read_offsets(log, 0, RC) == [0, 1]
    assert read_offsets(log, 0, RU) == [0, 1, 2, 3, 4, 5]
    assert read_offsets(log, 2, RC) == []
    assert log.read(0, 1 << 20, RC, True).last_stable_offset == 2
    marker = commit(log, p)
    assert marker == 6
    assert log.last_stable_offset == log.log_end_offset == 7
    assert log.ongoing_transactions() == {}
    assert read_offsets(log, 0, RC) == [0, 1, 2, 3, 4, 5]
    assert log.aborted_transactions(0, 7) == []


def test_the_oldest_of_interleaved_transactions_bounds_the_lso(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    a, b = Producer(1), Producer(2)
    log.append(a.batch(), NOW)  # 0
    log.append(b.batch(), NOW)  # 1
    log.append(a.batch(), NOW)  # 2 (same transaction as 0)
    assert log.last_stable_offset == 0
    abort(log, b)  # 3: the younger one ends first
    assert log.last_stable_offset == 0
    commit(log, a)  # 4
    assert log.last_stable_offset == 5
    # b's abort was written while a (first offset 0) was still open: that is its LSO.
    assert log.segments[0].txn_index.entries == [AbortedTxn(2, 1, 3, 0)]
    assert log.aborted_transactions(0, 5) == [AbortedTransaction(2, 1)]


def test_an_abort_is_indexed_in_kafkas_34_byte_format(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    p = Producer(9, epoch=2)
    log.append(p.batch(2), NOW)  # 0-1
    abort(log, p)  # 2
    path = tmp_path / "t-0" / "00000000000000000000.txnindex"
    data = path.read_bytes()
    assert len(data) == ENTRY_SIZE == 34
    assert struct.unpack(">hqqqq", data) == (0, 9, 0, 2, 3)
    assert log.aborted_transactions(0, 3) == [AbortedTransaction(9, 0)]
    assert log.aborted_transactions(3, 10) == []  # the transaction ends before 3
    assert log.aborted_transactions(0, 0) == []  # and starts at or after the bound


def test_read_committed_lists_the_aborted_transactions_of_the_data_it_returns(
    tmp_path: Path,
) -> None:
    log = make_log(tmp_path)
    p, q = Producer(1), Producer(2)
    log.append(p.batch(2), NOW)  # 0-1
    abort(log, p)  # 2
    log.append(q.batch(1), NOW)  # 3
    commit(log, q)  # 4
    log.append(p.batch(1), NOW)  # 5: p's next transaction, still open
    result = log.read(0, 1 << 20, RC, True)
    assert result.last_stable_offset == 5
    assert result.aborted_transactions == [AbortedTransaction(1, 0)]
    assert read_offsets(log, 0, RC) == [0, 1, 3]  # the consumer filters 0-1 itself
    # read_uncommitted and follower reads carry no list
    assert log.read(0, 1 << 20, RU, True).aborted_transactions is None
    # nothing returned: an empty list
    assert log.read(5, 1 << 20, RC, True).aborted_transactions == []


def test_a_marker_from_an_old_producer_epoch_is_refused(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    p = Producer(3, epoch=4)
    log.append(p.batch(), NOW)
    with pytest.raises(InvalidProducerEpochError):
        log.append_control_marker(3, 3, True, 0, NOW)
    assert log.log_end_offset == 1 and log.last_stable_offset == 0
    # A newer epoch (the coordinator bumped it to abort on timeout) is fine.
    log.append_control_marker(3, 5, False, 0, NOW)
    assert log.last_stable_offset == 2
    assert log.aborted_transactions(0, 2) == [AbortedTransaction(3, 0)]


def test_a_marker_from_an_old_coordinator_epoch_is_fenced(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    p = Producer(3)
    log.append(p.batch(), NOW)
    commit(log, p, coordinator_epoch=7)
    log.append(p.batch(), NOW)
    with pytest.raises(TransactionCoordinatorFencedError) as err:
        commit(log, p, coordinator_epoch=6)
    assert err.value.kafka_error_code == 52
    assert log.ongoing_transactions() == {2: 3}
    commit(log, p, coordinator_epoch=7)
    assert log.ongoing_transactions() == {}


def test_a_marker_for_an_unknown_producer_is_written_and_closes_nothing(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    q = Producer(1)
    log.append(q.batch(), NOW)
    log.append_control_marker(99, 0, False, 0, NOW)
    assert log.log_end_offset == 2
    assert log.ongoing_transactions() == {0: 1}
    assert log.aborted_transactions(0, 2) == []


def test_a_plain_batch_from_a_producer_with_an_open_transaction_is_invalid(
    tmp_path: Path,
) -> None:
    log = make_log(tmp_path)
    p = Producer(4)
    log.append(p.batch(), NOW)
    with pytest.raises(InvalidTxnStateError) as err:
        log.append(p.batch(transactional=False), NOW)
    assert err.value.kafka_error_code == 48
    assert log.log_end_offset == 1


def test_sequences_continue_across_transactions_of_one_epoch(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    p = Producer(4)
    first = p.batch(2)
    log.append(first, NOW)
    commit(log, p)
    assert log.append(first, NOW).duplicate  # a retry is still recognised after the marker
    log.append(p.batch(1), NOW)  # sequence 2 follows 1 across the marker
    assert log.ongoing_transactions() == {3: 4}


def test_a_replicated_log_keeps_a_decided_transaction_unstable_until_the_hw_passes_its_marker(
    tmp_path: Path,
) -> None:
    log = make_log(tmp_path)
    log.enable_replication(0)
    p = Producer(1)
    log.append(p.batch(2), NOW)  # 0-1
    commit(log, p)  # 2
    assert log.ongoing_transactions() == {}
    log.update_high_watermark(2)
    assert log.last_stable_offset == 0  # the marker is not on the ISR yet
    log.update_high_watermark(3)
    assert log.last_stable_offset == 3
    assert read_offsets(log, 0, RC) == [0, 1]


def test_a_follower_learns_open_transactions_and_aborts_from_replicated_batches(
    tmp_path: Path,
) -> None:
    leader = make_log(tmp_path / "leader")
    follower = make_log(tmp_path / "follower")
    p, q = Producer(1), Producer(2)
    leader.append(p.batch(2), NOW)  # 0-1
    leader.append(q.batch(1), NOW)  # 2
    abort(leader, p)  # 3
    leader.append(plain(), NOW)  # 4
    data = leader.read(0, 1 << 20, Isolation.LOG_END, True).records
    assert data is not None
    follower.append_as_follower(data.read(), NOW)
    assert follower.ongoing_transactions() == {2: 2}
    assert follower.last_stable_offset == 2
    assert follower.aborted_transactions(0, 5) == [AbortedTransaction(1, 0)]
    assert follower.segments[0].txn_index.entries == leader.segments[0].txn_index.entries


# -- snapshots and recovery ----------------------------------------------------------------


def test_snapshot_is_kafkas_producer_snapshot_v1_layout() -> None:
    rows = [SnapshotEntry(7, 2, 9, 100, 4, NOW, 3, 90), SnapshotEntry(8, 0, -1, -1, 0, NOW, -1, -1)]
    data = encode_snapshot(rows)
    version, _crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 2, 10 + 2 * 46)
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (7, 2, 9, 100, 4, NOW, 3, 90)
    assert list(decode_snapshot(data)) == rows
    with pytest.raises(ValueError, match="CRC"):
        list(decode_snapshot(data[:-1] + bytes([data[-1] ^ 1])))


def test_an_open_transaction_survives_a_clean_close_through_the_snapshot(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    p = Producer(6)
    log.append(plain(), NOW)
    log.append(p.batch(2), NOW)  # 1-2
    log.close()
    assert (tmp_path / "t-0" / snapshot_file_name(3)).exists()
    again = make_log(tmp_path)
    assert again.last_stable_offset == 1
    assert again.ongoing_transactions() == {1: 6}
    commit(again, p)
    assert again.last_stable_offset == 4


def test_a_transaction_older_than_the_replay_window_survives_through_roll_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without snapshots only the last bytes are replayed: make that window tiny.
    monkeypatch.setattr(log_module, "PRODUCER_STATE_SCAN_BYTES", 200)
    log = make_log(tmp_path, segment_bytes=400)
    p = Producer(6)
    log.append(p.batch(1), NOW)  # 0: opens the transaction
    for _ in range(12):
        log.append(plain(1, size=100), NOW)
    assert len(log.segments) > 3
    names = sorted(os.listdir(tmp_path / "t-0"))
    snapshots = [n for n in names if n.endswith(".snapshot")]
    assert 1 <= len(snapshots) <= 2  # only the newest ones are kept
    # A kill -9: no clean close, no close snapshot; recovery replays the active segment.
    crashed = make_log(tmp_path, recover=True, segment_bytes=400)
    assert crashed.ongoing_transactions() == {0: 6}
    assert crashed.last_stable_offset == 0
    assert crashed.apply_retention(NOW + 10**12) == 0  # the open transaction pins its segment


def test_a_crash_that_loses_the_abort_marker_reopens_the_transaction(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    p = Producer(2)
    log.append(p.batch(2), NOW)  # 0-1
    abort(log, p)  # 2
    assert log.aborted_transactions(0, 3) == [AbortedTransaction(2, 0)]
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    size = segment.stat().st_size
    # a torn write: the marker's last bytes never reached the disk
    os.truncate(segment, size - 5)
    recovered = make_log(tmp_path, recover=True)
    assert recovered.log_end_offset == 2
    assert recovered.ongoing_transactions() == {0: 2}
    assert recovered.aborted_transactions(0, 3) == []
    assert not (tmp_path / "t-0" / "00000000000000000000.txnindex").exists()
    abort(recovered, p)
    assert recovered.aborted_transactions(0, 3) == [AbortedTransaction(2, 0)]


def test_a_crash_that_loses_the_txnindex_write_rebuilds_it_from_the_marker(
    tmp_path: Path,
) -> None:
    log = make_log(tmp_path)
    p = Producer(2)
    log.append(plain(), NOW)  # 0
    log.append(p.batch(2), NOW)  # 1-2
    abort(log, p)  # 3
    (tmp_path / "t-0" / "00000000000000000000.txnindex").unlink()
    recovered = make_log(tmp_path, recover=True)
    assert recovered.aborted_transactions(0, 4) == [AbortedTransaction(2, 1)]
    assert recovered.last_stable_offset == 4


def test_a_corrupt_snapshot_is_skipped_and_the_log_replayed(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    p = Producer(6)
    log.append(p.batch(2), NOW)
    log.close()
    path = tmp_path / "t-0" / snapshot_file_name(2)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    again = make_log(tmp_path)
    assert again.ongoing_transactions() == {0: 6}
    assert not path.exists()


def test_snapshots_past_the_log_end_are_dropped_on_truncation(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=300)
    p = Producer(1)
    for _ in range(6):
        log.append(plain(1, size=100), NOW)
    log.append(p.batch(1), NOW)  # 6
    abort(log, p)  # 7
    log.append(plain(1, size=100), NOW)  # 8
    log.close()
    directory = tmp_path / "t-0"
    assert (directory / snapshot_file_name(9)).exists()
    log = make_log(tmp_path, segment_bytes=300)
    log.truncate_to(7)  # the marker goes
    assert not (directory / snapshot_file_name(9)).exists()
    assert log.ongoing_transactions() == {6: 1}
    assert log.aborted_transactions(0, 10) == []
    log.truncate_fully_and_start_at(20)
    assert not any(n.endswith((".snapshot", ".txnindex")) for n in os.listdir(directory))
    assert log.ongoing_transactions() == {} and log.last_stable_offset == 20


# -- retention and deletion ----------------------------------------------------------------


def test_retention_and_delete_records_keep_segments_of_an_open_transaction(
    tmp_path: Path,
) -> None:
    log = make_log(tmp_path, segment_bytes=300, retention_ms=1)
    log.append(plain(1, size=100), NOW)  # 0
    p = Producer(1)
    log.append(p.batch(1, size=100), NOW)  # 1: opens in the first or second segment
    for _ in range(8):
        log.append(plain(1, size=100), NOW)
    open_segment = max(s.base_offset for s in log.segments if s.base_offset <= 1)
    before = len(log.segments)
    log.apply_retention(NOW + 10**9)
    assert min(s.base_offset for s in log.segments) == open_segment
    assert log.log_start_offset <= 1
    log.delete_records(log.high_watermark)
    assert min(s.base_offset for s in log.segments) == open_segment
    commit(log, p)
    log.apply_retention(NOW + 10**9)
    assert len(log.segments) < before
    assert min(s.base_offset for s in log.segments) > 1


def test_retention_drops_the_txnindex_with_its_segment(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=300, retention_ms=1)
    p = Producer(1)
    log.append(p.batch(1, size=100), NOW)  # 0
    abort(log, p)  # 1
    for _ in range(8):
        log.append(plain(1, size=100), NOW)
    directory = tmp_path / "t-0"
    assert (directory / "00000000000000000000.txnindex").exists()
    log.apply_retention(NOW + 10**9)
    assert not (directory / "00000000000000000000.txnindex").exists()
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == []
    snapshots = [int(n[:20]) for n in os.listdir(directory) if n.endswith(".snapshot")]
    assert all(offset >= log.segments[0].base_offset for offset in snapshots)


# -- the transaction index file ------------------------------------------------------------


def test_a_torn_txnindex_entry_is_cut_off(tmp_path: Path) -> None:
    handles = FileHandleCache(4)
    path = str(tmp_path / "0.txnindex")
    index = TransactionIndex(path, handles)
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 3, 9, 10))
    os.truncate(path, ENTRY_SIZE + 10)
    again = TransactionIndex(path, handles)
    assert again.entries == [AbortedTxn(1, 0, 5, 6)]
    assert os.path.getsize(path) == ENTRY_SIZE


def test_collect_stops_once_an_entry_shows_everything_before_the_bound_is_decided(
    tmp_path: Path,
) -> None:
    index = TransactionIndex(str(tmp_path / "0.txnindex"), FileHandleCache(4))
    index.append(AbortedTxn(1, 0, 5, 2))
    index.append(AbortedTxn(2, 2, 8, 20))
    index.append(AbortedTxn(3, 15, 30, 31))
    found = index.collect(4, 10)
    assert found.complete and [t.producer_id for t in found.aborted] == [1, 2]
    found = index.collect(4, 40)
    assert not found.complete and [t.producer_id for t in found.aborted] == [1, 2, 3]


# -- the marker writer ---------------------------------------------------------------------


def test_marker_writer_answers_per_partition_and_tells_listeners_of_success(
    tmp_path: Path,
) -> None:
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    logs.create_topic("t", 2)
    p = Producer(5, epoch=1)
    logs.log("t", 0).append(p.batch(), NOW)
    logs.log("t", 1).append(Producer(5, epoch=2).batch(), NOW)
    seen: list[tuple[int, str, int, bool]] = []

    async def write() -> dict[tuple[str, int], int]:
        async with cluster_of_one(logs, tmp_path) as node:
            writer = TxnMarkerWriter(node.replicas)
            writer.listeners.append(lambda *args: seen.append(args))
            marker = TxnMarker(5, 1, False, 0, (("t", 0), ("t", 1), ("t", 2), ("nope", 0)))
            return await writer.write(marker)

    codes = asyncio.run(write())
    assert codes == {("t", 0): 0, ("t", 1): 47, ("t", 2): 3, ("nope", 0): 3}
    assert seen == [(5, "t", 0, False)]
    assert logs.log("t", 0).aborted_transactions(0, 2) == [AbortedTransaction(5, 0)]
    assert logs.log("t", 1).log_end_offset == 1


def test_a_follower_append_spanning_rolls_snapshots_each_roll_with_the_batches_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_module, "PRODUCER_STATE_SCAN_BYTES", 200)
    leader = make_log(tmp_path / "leader")
    p = Producer(3)
    leader.append(plain(1, size=100), NOW)  # 0
    leader.append(p.batch(1, size=100), NOW)  # 1: opens the transaction
    for _ in range(10):
        leader.append(plain(1, size=100), NOW)
    data = leader.read(0, 1 << 20, Isolation.LOG_END, True).records
    assert data is not None
    follower = Log(tmp_path / "follower" / "t-0", LogConfig(segment_bytes=400), FileHandleCache(8))
    follower.append_as_follower(data.read(), NOW)  # one call, several rolls
    assert len(follower.segments) > 3
    crashed = Log(
        tmp_path / "follower" / "t-0",
        LogConfig(segment_bytes=400),
        FileHandleCache(8),
        recover=True,
    )
    assert crashed.ongoing_transactions() == {1: 3}


def test_a_failing_listener_turns_the_partition_into_an_unknown_server_error(
    tmp_path: Path,
) -> None:
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    logs.create_topic("t", 1)

    def broken(producer_id: int, topic: str, partition: int, committed: bool) -> None:
        raise RuntimeError("offsets cache")

    async def write() -> dict[tuple[str, int], int]:
        async with cluster_of_one(logs, tmp_path) as node:
            writer = TxnMarkerWriter(node.replicas)
            writer.listeners.append(broken)
            return await writer.write(TxnMarker(5, 0, True, 0, (("t", 0),)))

    codes = asyncio.run(write())
    assert codes == {("t", 0): -1}
    assert logs.log("t", 0).log_end_offset == 1  # the marker itself is written


class _Ctx:
    """The slice of RequestContext the WriteTxnMarkers handler uses."""

    def __init__(self, allowed: set[int]) -> None:
        self.allowed = allowed
        self.asked: list[int] = []

    def authorize(self, operation: int, resource_type: int, name: str) -> bool:
        self.asked.append(int(operation))
        return int(operation) in self.allowed


@pytest.mark.parametrize(
    ("allowed", "code"),
    [(set(), 31), ({int(AclOperation.CLUSTER_ACTION)}, 0), ({int(AclOperation.ALTER)}, 0)],
)
def test_write_txn_markers_needs_cluster_action_or_alter(
    tmp_path: Path, allowed: set[int], code: int
) -> None:
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    logs.create_topic("t", 1)
    req = build_request(
        ApiKey.WRITE_TXN_MARKERS,
        1,
        {
            "markers": [
                {
                    "producer_id": 8,
                    "producer_epoch": 0,
                    "transaction_result": False,
                    "topics": [{"name": "t", "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
    )

    async def write() -> dict[str, Any]:
        async with cluster_of_one(logs, tmp_path) as node:
            api = WriteTxnMarkersApi(TxnMarkerWriter(node.replicas))
            return await api.write_txn_markers(_Ctx(allowed), req)  # type: ignore[arg-type]

    out = asyncio.run(write())
    (marker,) = out["markers"]
    assert marker["producer_id"] == 8
    assert marker["topics"] == [
        {"name": "t", "partitions": [{"partition_index": 0, "error_code": code}]}
    ]
    assert logs.log("t", 0).log_end_offset == (0 if code else 1)


def test_offsets_log_replay_steps_over_transaction_markers(tmp_path: Path) -> None:
    """A marker is no group record: the replay hands it over as a `TxnEnd`, which
    settles the producer's pending TxnOffsetCommits (group/txn_offsets.py)."""
    log = make_log(tmp_path)
    offsets_log = PartitionStateLog(log)
    offsets_log.append([(b"k1", b"v1")])
    log.append_control_marker(7, 0, True, 0, NOW)
    offsets_log.append([(b"k2", None)])
    assert list(offsets_log.replay()) == [(b"k1", b"v1"), TxnEnd(7, True), (b"k2", None)]


def test_an_incremental_fetch_session_reports_an_lso_move_as_news(tmp_path: Path) -> None:
    """KIP-227 with real logs: a commit marker moves only the LSO, and the session says so."""
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    logs.create_topic("t", 1)
    log = logs.log("t", 0)
    log.append(plain(), NOW)  # 0
    p = Producer(3)
    log.append(p.batch(), NOW)  # 1: open
    cache = FetchSessionCache()
    watcher = SessionPartitionWatcher(logs.existing_log)

    def fetch(session_id: int, epoch: int, parts: list[PartitionFetch]) -> FetchResponseData:
        req = FetchRequestData(
            version=12,
            isolation_level=1,
            max_wait_ms=0,
            session_id=session_id,
            session_epoch=epoch,
            partitions=parts,
        )
        ctx = new_fetch_context(cache, req, 0, watcher)
        result = read_partitions(
            ctx.partitions_to_read(),
            logs.existing_log,
            max_bytes=1 << 20,
            isolation=RC,
            aborted_list=True,
        )
        return ctx.update_and_generate_response(result.partitions, 0)

    zero = uuid.UUID(int=0)
    first = fetch(0, 0, [PartitionFetch(zero, "t", 0, 0)])
    assert first.session_id > 0
    (part,) = first.partitions
    assert (part.high_watermark, part.last_stable_offset) == (2, 1)
    # The client moved to the LSO; no records, HW or LSO change: nothing to send.
    assert fetch(first.session_id, 1, [PartitionFetch(zero, "t", 0, 1)]).partitions == []
    assert fetch(first.session_id, 2, []).partitions == []
    commit(log, p)  # 2
    news = fetch(first.session_id, 3, [])
    assert [(p.high_watermark, p.last_stable_offset) for p in news.partitions] == [(3, 3)]
    assert news.partitions[0].records_size > 0  # the committed record, readable now
