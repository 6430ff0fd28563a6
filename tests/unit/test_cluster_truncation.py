"""A follower whose log diverged from the new leader's truncates and then matches it.

Pure logic, no sockets: the leader's fetch planner answers a follower fetch
from real ``Log`` objects, and the replica fetcher's handling of that answer
is applied to the follower's real ``Log``, exactly as over the wire.
"""

from __future__ import annotations

from pathlib import Path

from headwater.cluster.inter_broker import InterBrokerConnector
from headwater.cluster.partition import PartitionReplica, ReplicaAssignment
from headwater.cluster.replica_fetcher import FetcherConfig, ReplicaFetcher
from headwater.fetch.planner import read_partitions
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.protocol.fetch_types import ZERO_UUID, PartitionData, PartitionFetch
from headwater.records.record import RecordBatchBuilder, decode_batches


def batch(tag: str, n: int) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(1000 + i, None, f"{tag}-{i}".encode())
    return builder.build()


def write_at_epoch(plog: Log, epoch: int, tag: str, batches: int, per_batch: int = 1) -> None:
    plog.partition_leader_epoch = epoch
    for b in range(batches):
        plog.append(batch(f"{tag}{b}", per_batch), 1)


def values(plog: Log) -> list[bytes]:
    out: list[bytes] = []
    slice_ = plog.read(plog.log_start_offset, 1 << 20, Isolation.LOG_END, True).records
    if slice_ is None:
        return out
    for decoded in decode_batches(slice_.read()):
        out.extend(r.value or b"" for r in decoded.records)
    return out


def follower_fetch(leader: Log, follower: Log) -> PartitionData:
    fetch = PartitionFetch(
        ZERO_UUID,
        "t",
        0,
        fetch_offset=follower.log_end_offset,
        current_leader_epoch=leader.partition_leader_epoch,
        last_fetched_epoch=follower.latest_epoch,
    )
    result = read_partitions(
        [fetch], lambda _t, _p: leader, max_bytes=1 << 20, isolation=Isolation.LOG_END
    )
    data = result.partitions[0]
    if data.records is not None and not isinstance(data.records, bytes):
        data.records = data.records.read()
    return data


def test_diverged_follower_truncates_to_the_leaders_epoch_end_then_copies_it(
    tmp_path: Path,
) -> None:
    handles = FileHandleCache(32)
    leader = Log(tmp_path / "leader", LogConfig(), handles)
    follower = Log(tmp_path / "follower", LogConfig(), handles)
    for plog in (leader, follower):
        plog.enable_replication(0)
        write_at_epoch(plog, 0, "shared", 5)
    # The follower once led at epoch 1 and wrote records nobody else got;
    # the leader was elected at epoch 2 without them and wrote its own.
    write_at_epoch(follower, 1, "lost", 4)
    write_at_epoch(leader, 2, "new", 3)
    assert follower.log_end_offset == 9 and leader.log_end_offset == 8

    replica = PartitionReplica("t", 0, follower, local_id=1)
    replica.apply_state(ReplicaAssignment((0, 1), 0, 2, (0, 1), 0), now_ms=0)
    fetcher = ReplicaFetcher(1, 0, InterBrokerConnector(1, lambda _b: None), FetcherConfig())
    fetcher.add(replica)

    answer = follower_fetch(leader, follower)
    assert (answer.diverging_epoch, answer.diverging_end_offset) == (0, 5)
    assert answer.records is None
    fetcher._apply(replica, answer)
    assert follower.log_end_offset == 5
    assert follower.latest_epoch == 0

    answer = follower_fetch(leader, follower)
    assert answer.diverging_epoch == -1
    fetcher._apply(replica, answer)
    assert follower.log_end_offset == leader.log_end_offset == 8
    assert values(follower) == values(leader)
    assert not any(v.startswith(b"lost") for v in values(follower))
    assert follower.end_offset_for_epoch(2) == leader.end_offset_for_epoch(2)
    assert follower.high_watermark == leader.high_watermark


def test_a_follower_in_agreement_is_not_told_to_truncate(tmp_path: Path) -> None:
    handles = FileHandleCache(32)
    leader = Log(tmp_path / "leader", LogConfig(), handles)
    follower = Log(tmp_path / "follower", LogConfig(), handles)
    for plog in (leader, follower):
        plog.enable_replication(0)
        write_at_epoch(plog, 0, "a", 3)
    write_at_epoch(leader, 3, "b", 2)
    answer = follower_fetch(leader, follower)
    assert answer.diverging_epoch == -1
    assert answer.records is not None and len(answer.records) > 0


def test_a_new_leader_still_applying_its_state_is_asked_again_soon(tmp_path: Path) -> None:
    """Failover (issue 20): the follower heard of the new leader before the leader did
    and got NOT_LEADER_OR_FOLLOWER / UNKNOWN_LEADER_EPOCH. It retries after 50 ms a
    few times, then falls back to replica.fetch.backoff.ms; other errors back off."""
    follower = Log(tmp_path / "f", LogConfig(), FileHandleCache(16))
    follower.enable_replication(0)
    replica = PartitionReplica("t", 0, follower, local_id=1)
    replica.apply_state(ReplicaAssignment((0, 1), 0, 2, (0, 1), 0), now_ms=0)
    fetcher = ReplicaFetcher(1, 0, InterBrokerConnector(1, lambda _b: None), FetcherConfig())
    fetcher.add(replica)

    def delay_after(error: int) -> float:
        fetcher._apply(replica, PartitionData(ZERO_UUID, "t", 0, error_code=error))
        return fetcher._until_next_retry()

    for error in [6, 75] * 5:  # NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH
        assert delay_after(error) <= 0.05
    assert delay_after(6) > 0.5  # ten quick retries spent: the configured backoff
    fetcher._apply(replica, PartitionData(ZERO_UUID, "t", 0, high_watermark=0))
    assert delay_after(75) <= 0.05  # an answer without error renews them
    assert delay_after(74) > 0.5  # FENCED_LEADER_EPOCH: the leader is ahead of us


def test_a_follower_that_led_an_epoch_without_writing_fetches_on_after_truncating(
    tmp_path: Path,
) -> None:
    """Fault campaign (issue 20): the follower led epoch 1 and wrote nothing in it;
    the new leader's epoch 2 starts where both logs end. The divergence answer cuts
    only the follower's epoch history (a truncation at its log end): its next request
    must name its real last epoch, or it gets the same answer forever and never
    fetches again (it stayed out of the ISR of __consumer_offsets-2 for good)."""
    handles = FileHandleCache(32)
    leader = Log(tmp_path / "leader", LogConfig(), handles)
    follower = Log(tmp_path / "follower", LogConfig(), handles)
    for plog in (leader, follower):
        plog.enable_replication(0)
        write_at_epoch(plog, 0, "shared", 5)
    follower.assign_leader_epoch(1)  # elected at epoch 1, wrote nothing
    write_at_epoch(leader, 2, "new", 3)
    assert follower.latest_epoch == 1

    replica = PartitionReplica("t", 0, follower, local_id=1)
    replica.apply_state(ReplicaAssignment((0, 1), 0, 2, (0, 1), 0), now_ms=0)
    fetcher = ReplicaFetcher(1, 0, InterBrokerConnector(1, lambda _b: None), FetcherConfig())
    fetcher.add(replica)

    def fetch_through_the_fetcher() -> PartitionData:
        (request,) = fetcher._wanted(0.0)
        result = read_partitions(
            [request], lambda _t, _p: leader, max_bytes=1 << 20, isolation=Isolation.LOG_END
        )
        data = result.partitions[0]
        if data.records is not None and not isinstance(data.records, bytes):
            data.records = data.records.read()
        return data

    answer = fetch_through_the_fetcher()
    assert (answer.diverging_epoch, answer.diverging_end_offset) == (0, 5)
    fetcher._apply(replica, answer)
    assert follower.log_end_offset == 5 and follower.latest_epoch == 0

    answer = fetch_through_the_fetcher()
    assert answer.diverging_epoch == -1
    fetcher._apply(replica, answer)
    assert follower.log_end_offset == leader.log_end_offset == 8
    assert values(follower) == values(leader)
