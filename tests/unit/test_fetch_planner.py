"""The fetch planner: KIP-74 limits, per-partition errors and isolation, on real logs."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from headwater.broker.handlers.fetch import bound_open_files
from headwater.fetch.planner import isolation_for, read_partitions
from headwater.log.config import LogConfig
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.log.log_directory import LogDirectory
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchResponseData,
    PartitionData,
    PartitionFetch,
)
from headwater.protocol.file_slice import FileSlice
from headwater.records.record import RecordBatchBuilder

HW = Isolation.HIGH_WATERMARK


def _batch(size: int) -> bytes:
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, b"x" * size)
    return b.build()


@pytest.fixture
def logs(tmp_path: Path) -> LogDirectory:
    d = LogDirectory(tmp_path, LogConfig())
    d.open()
    d.create_topic("t", 3)
    for p, sizes in enumerate([[1000, 1000], [5000], [200, 200, 200]]):
        for size in sizes:
            d.log("t", p).append(_batch(size), 0)
    return d


def _lookup(logs: LogDirectory):  # type: ignore[no-untyped-def]
    def lookup(topic: str, partition: int) -> Log | None:
        info = logs.topics().get(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            return None
        return logs.log(topic, partition)

    return lookup


def _req(p: int, offset: int = 0, pmax: int = 1 << 20, topic: str = "t") -> PartitionFetch:
    return PartitionFetch(ZERO_UUID, topic, p, offset, partition_max_bytes=pmax)


def _size(d: PartitionData) -> int:
    return d.records_size


def test_partitions_are_served_in_request_order_within_max_bytes(logs: LogDirectory) -> None:
    res = read_partitions(
        [_req(2), _req(0), _req(1)],
        _lookup(logs),
        max_bytes=1500,
        isolation=HW,
    )
    assert [d.partition for d in res.partitions] == [2, 0, 1]
    first, second, third = res.partitions
    assert _size(first) > 0 and _size(first) <= 1500
    # What is left of max_bytes bounds the next partition; nothing is left for the third.
    assert _size(first) + _size(second) <= 1500
    assert third.records is None and third.high_watermark == 1
    assert res.bytes_read == _size(first) + _size(second)


def test_first_partition_with_data_returns_a_whole_batch_despite_tiny_limits(
    logs: LogDirectory,
) -> None:
    res = read_partitions([_req(1, pmax=10), _req(0)], _lookup(logs), max_bytes=1, isolation=HW)
    one, zero = res.partitions
    assert _size(one) > 5000, "one whole 5000-byte batch: the fetch makes progress"
    assert zero.records is None, "only the first partition with data may exceed the limit"


def test_partition_max_bytes_cuts_later_partitions(logs: LogDirectory) -> None:
    res = read_partitions(
        [_req(2), _req(0, pmax=100)],
        _lookup(logs),
        max_bytes=1 << 20,
        isolation=HW,
    )
    assert _size(res.partitions[1]) == 100, "a cut slice may end inside a batch, as in Kafka"


def test_errors_per_partition(logs: LogDirectory) -> None:
    unknown_id = PartitionFetch(uuid.uuid4(), "", 0, 0)
    res = read_partitions(
        [_req(0, offset=99), _req(7), _req(0, topic="nope"), unknown_id],
        _lookup(logs),
        max_bytes=1 << 20,
        isolation=HW,
    )
    codes = [d.error_code for d in res.partitions]
    assert codes == [1, 3, 3, 100]
    assert res.partitions[0].high_watermark == 2 and res.has_error


def test_fenced_and_unknown_leader_epochs(logs: LogDirectory) -> None:
    ahead = PartitionFetch(ZERO_UUID, "t", 0, 0, current_leader_epoch=3)
    res = read_partitions([ahead], _lookup(logs), max_bytes=100, isolation=Isolation.LOG_END)
    assert res.partitions[0].error_code == 75


def test_read_committed_carries_an_empty_aborted_list(logs: LogDirectory) -> None:
    res = read_partitions(
        [_req(0)],
        _lookup(logs),
        max_bytes=1 << 20,
        isolation=Isolation.TXN_COMMITTED,
        aborted_list=True,
    )
    assert res.partitions[0].aborted_transactions == []
    assert res.partitions[0].last_stable_offset == 2


def test_isolation_follows_replica_id_and_level() -> None:
    assert isolation_for(1, 0) is Isolation.LOG_END
    assert isolation_for(-1, 0) is Isolation.HIGH_WATERMARK
    assert isolation_for(-1, 1) is Isolation.TXN_COMMITTED


def test_open_segment_files_per_response_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    path.write_bytes(bytes(range(256)) * 4)
    parts = []
    for i in range(5):
        fh = open(path, "rb", buffering=0)  # noqa: SIM115 - the slice owns it
        parts.append(PartitionData(ZERO_UUID, "t", i, records=FileSlice(fh, i * 10, 10)))
    response = FetchResponseData(partitions=parts)
    assert bound_open_files(response, 2) == 3
    kinds = [type(p.records) for p in response.partitions]
    assert kinds == [FileSlice, FileSlice, bytes, bytes, bytes]
    assert response.partitions[4].records == bytes(range(40, 50))
