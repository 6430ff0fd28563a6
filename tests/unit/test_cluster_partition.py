"""A partition replica's leader logic: high watermark, ISR shrink and expand, roles."""

from __future__ import annotations

import asyncio
from pathlib import Path

from headwater.cluster.partition import PartitionReplica, ReplicaAssignment
from headwater.cluster.produce_purgatory import ProducePurgatory, await_acks
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.log import Log
from headwater.protocol.error_codes import ErrorCode
from headwater.records.batch import patch_base_offset
from headwater.records.record import RecordBatchBuilder

LAG_MS = 10_000


def batch(n: int = 1) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(1000 + i, b"k", b"v" * 10)
    return builder.build()


def make_log(tmp_path: Path, name: str = "t-0") -> Log:
    plog = Log(tmp_path / name, LogConfig(), FileHandleCache(64))
    plog.enable_replication(0)
    return plog


def leader(tmp_path: Path, isr: tuple[int, ...] = (0, 1, 2), epoch: int = 3) -> PartitionReplica:
    replica = PartitionReplica("t", 0, make_log(tmp_path), local_id=0)
    role = replica.apply_state(ReplicaAssignment((0, 1, 2), 0, epoch, isr, 5), now_ms=0)
    assert role == "leader"
    return replica


def append(replica: PartitionReplica, now_ms: int, records: int = 1) -> int:
    previous = replica.log.log_end_offset
    replica.log.append(batch(records), now_ms)
    replica.on_append(previous, now_ms)
    return replica.log.log_end_offset


def test_becoming_leader_stamps_the_epoch_and_starts_its_history(tmp_path: Path) -> None:
    replica = leader(tmp_path, epoch=3)
    assert replica.log.partition_leader_epoch == 3
    assert replica.log.latest_epoch == 3
    assert set(replica.followers) == {1, 2}


def test_high_watermark_is_the_smallest_log_end_of_the_isr(tmp_path: Path) -> None:
    replica = leader(tmp_path)
    end = append(replica, 1, records=3)
    assert end == 3
    assert not replica.maybe_increment_high_watermark()  # followers not heard from
    replica.update_follower(1, 3, now_ms=2)
    assert not replica.maybe_increment_high_watermark()
    replica.update_follower(2, 1, now_ms=2)
    assert replica.maybe_increment_high_watermark()
    assert replica.log.high_watermark == 1
    replica.update_follower(2, 3, now_ms=3)
    assert replica.maybe_increment_high_watermark()
    assert replica.log.high_watermark == 3


def test_a_leader_alone_in_the_isr_commits_at_once(tmp_path: Path) -> None:
    replica = leader(tmp_path, isr=(0,))
    append(replica, 1, records=2)
    assert replica.maybe_increment_high_watermark()
    assert replica.log.high_watermark == 2


def test_follower_fetch_offset_past_the_log_end_counts_as_the_log_end(tmp_path: Path) -> None:
    replica = leader(tmp_path, isr=(0, 1))
    append(replica, 1)
    replica.update_follower(1, 99, now_ms=2)
    assert replica.followers[1].log_end_offset == 1


def test_caught_up_followers_stay_in_the_isr_while_idle(tmp_path: Path) -> None:
    replica = leader(tmp_path)
    append(replica, 1)
    replica.update_follower(1, 1, now_ms=2)
    replica.update_follower(2, 1, now_ms=2)
    # No writes for far longer than the lag limit: nobody lags.
    assert replica.isr_to_shrink(now_ms=10 * LAG_MS, lag_max_ms=LAG_MS) is None


def test_a_follower_that_stops_fetching_after_a_write_leaves_the_isr(tmp_path: Path) -> None:
    replica = leader(tmp_path)
    append(replica, 1)
    replica.update_follower(1, 1, now_ms=2)
    replica.update_follower(2, 1, now_ms=2)
    append(replica, 1000)  # follower 2 never fetches this one
    replica.update_follower(1, 2, now_ms=1500)
    assert replica.isr_to_shrink(now_ms=1000 + LAG_MS, lag_max_ms=LAG_MS) is None
    assert replica.isr_to_shrink(now_ms=1001 + LAG_MS, lag_max_ms=LAG_MS) == (0, 1)


def test_a_shrink_already_on_its_way_is_not_proposed_twice(tmp_path: Path) -> None:
    replica = leader(tmp_path)
    append(replica, 1)
    replica.pending_isr = (0, 1)
    assert replica.isr_to_shrink(now_ms=10 * LAG_MS, lag_max_ms=LAG_MS) is None


def test_a_follower_rejoins_once_it_reaches_the_high_watermark(tmp_path: Path) -> None:
    replica = leader(tmp_path, isr=(0, 1))
    append(replica, 1, records=4)
    replica.update_follower(1, 4, now_ms=2)
    replica.maybe_increment_high_watermark()
    assert replica.log.high_watermark == 4
    replica.update_follower(2, 2, now_ms=3)
    assert replica.isr_to_expand(2) is None
    replica.update_follower(2, 4, now_ms=4)
    assert replica.isr_to_expand(2) == (0, 1, 2)  # in assignment order


def test_a_caught_up_follower_that_is_stopping_or_gone_does_not_rejoin(tmp_path: Path) -> None:
    """KIP-841: a broker in controlled shutdown (or unregistered) is never taken
    into the ISR, however caught up its last fetch left it."""
    replica = leader(tmp_path, isr=(0, 1))
    append(replica, 1, records=4)
    replica.update_follower(1, 4, now_ms=2)
    replica.update_follower(2, 4, now_ms=2)
    replica.maybe_increment_high_watermark()
    assert replica.isr_to_expand(2, ineligible={2}) is None
    assert replica.isr_to_expand(2, ineligible={7}) == (0, 1, 2)


def test_zookeeper_state_with_the_same_epoch_only_moves_the_isr(tmp_path: Path) -> None:
    replica = leader(tmp_path)
    role = replica.apply_state(ReplicaAssignment((0, 1, 2), 0, 3, (0, 1), 6), now_ms=5)
    assert role == ""
    assert replica.isr == (0, 1)
    assert replica.zk_version == 6


def test_a_new_leader_elsewhere_makes_this_replica_a_follower(tmp_path: Path) -> None:
    replica = leader(tmp_path)
    role = replica.apply_state(ReplicaAssignment((0, 1, 2), 1, 4, (1, 2), 7), now_ms=5)
    assert role == "follower"
    assert not replica.is_leader
    assert replica.followers == {}
    assert replica.log.partition_leader_epoch == 4


def test_a_follower_append_trims_a_trailing_partial_batch_once(tmp_path: Path) -> None:
    """The leader cuts a fetch response at its byte limit; the follower's log keeps the
    whole batches (the one place a follower trims) and the rest comes next fetch."""
    plog = Log(tmp_path / "f", LogConfig(), FileHandleCache(8))
    one, two = batch(2), batch(3)
    assert plog.append_as_follower(one + two[:-1], 0).last_offset == 1
    assert plog.log_end_offset == 2
    assert plog.append_as_follower(two[:10], 0).last_offset == 1  # not one whole batch
    assert plog.log_end_offset == 2
    at_two = bytearray(two)
    patch_base_offset(at_two, 0, 2)  # where the leader has it
    assert plog.append_as_follower(at_two, 0).last_offset == 4
    assert plog.log_end_offset == 5


def test_produce_purgatory_acknowledges_when_the_high_watermark_passes() -> None:
    async def scenario() -> dict[tuple[str, int], int]:
        purgatory = ProducePurgatory()
        a = purgatory.wait(("t", 0), 5)
        b = purgatory.wait(("t", 1), 3)
        c = purgatory.wait(("t", 2), 9)
        purgatory.check(("t", 0), 4, lambda: True)
        assert not a.done()
        purgatory.check(("t", 0), 5, lambda: True)
        purgatory.check(("t", 1), 3, lambda: False)
        purgatory.fail(("t", 2))
        out = await await_acks(purgatory, {("t", 0): a, ("t", 1): b, ("t", 2): c}, 1.0)
        assert len(purgatory) == 0
        return out

    assert asyncio.run(scenario()) == {
        ("t", 0): 0,
        ("t", 1): ErrorCode.not_enough_replicas_after_append,
        ("t", 2): ErrorCode.not_leader_or_follower,
    }


def test_produce_purgatory_times_out_and_forgets_the_waiter() -> None:
    async def scenario() -> tuple[dict[tuple[str, int], int], int]:
        purgatory = ProducePurgatory()
        waiting = purgatory.wait(("t", 0), 10)
        out = await await_acks(purgatory, {("t", 0): waiting}, 0.01)
        return out, len(purgatory)

    out, left = asyncio.run(scenario())
    assert out == {("t", 0): ErrorCode.request_timed_out}
    assert left == 0


def test_the_high_watermark_never_moves_back_on_the_leader(tmp_path: Path) -> None:
    replica = leader(tmp_path, isr=(0, 1))
    append(replica, 1, records=5)
    replica.update_follower(1, 5, now_ms=2)
    assert replica.maybe_increment_high_watermark()
    replica.update_follower(1, 2, now_ms=3)  # a stale, reordered report
    assert not replica.maybe_increment_high_watermark()
    assert replica.log.high_watermark == 5
