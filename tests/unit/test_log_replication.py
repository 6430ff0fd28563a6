"""The log's replication side: leader epochs, follower appends, truncation, producer state."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.log.config import LogConfig
from headwater.log.divergence import diverging_epoch
from headwater.log.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    UnexpectedAppendOffsetError,
)
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.leader_epoch import EpochEntry, LeaderEpochCache
from headwater.log.log import Log
from headwater.records import RecordBatchBuilder, decode_batches, iter_batch_headers

NOW = 1_700_000_000_000
CHECKPOINT = "leader-epoch-checkpoint"


def batch(count: int = 1, *, producer_id: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)
    for i in range(count):
        builder.append(NOW + i, b"k%d" % i, bytes([i % 256]) * 100)
    return builder.build()


def make_log(path: Path, name: str = "topic-0", **config: int) -> Log:
    return Log(path / name, LogConfig(**config), FileHandleCache(64))


def leader_bytes(log: Log, offset: int = 0) -> bytes:
    """Everything from ``offset`` as a follower's fetch would get it (LOG_END isolation)."""
    out = b""
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20, Isolation.LOG_END, True)
        assert result.records is not None
        chunk = result.records.read()
        headers = list(iter_batch_headers(chunk))
        end = headers[-1].position + headers[-1].size
        out += chunk[:end]
        offset = headers[-1].next_offset
    return out


def epochs_of(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries]


def write_with_epochs(log: Log, plan: list[tuple[int, int]]) -> None:
    """Append ``count`` one-record batches under each (epoch, count) in turn."""
    for epoch, count in plan:
        log.partition_leader_epoch = epoch
        for _ in range(count):
            log.append(batch(), NOW)


# -- leader epochs on the leader ------------------------------------------------------------


def test_leader_append_assigns_each_new_epoch_at_its_first_offset(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    assert log.latest_epoch == -1
    write_with_epochs(log, [(0, 3), (2, 2), (5, 1)])
    assert epochs_of(log) == [(0, 0), (2, 3), (5, 5)]
    assert log.latest_epoch == 5
    assert (tmp_path / "topic-0" / CHECKPOINT).read_text() == "0\n3\n0 0\n2 3\n5 5\n"


def test_end_offset_for_epoch_answers_offsets_for_leader_epoch(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write_with_epochs(log, [(0, 3), (2, 2), (5, 1)])
    assert log.end_offset_for_epoch(0) == (0, 3)
    assert log.end_offset_for_epoch(1) == (0, 3)
    assert log.end_offset_for_epoch(2) == (2, 5)
    assert log.end_offset_for_epoch(5) == (5, 6)
    assert log.end_offset_for_epoch(6) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)


def test_epoch_cache_survives_reopen(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write_with_epochs(log, [(0, 2), (3, 2)])
    log.close()
    assert epochs_of(make_log(tmp_path)) == [(0, 0), (3, 2)]


@pytest.mark.parametrize("segment_bytes", [200, 450, 1 << 20])
def test_missing_checkpoint_is_rebuilt_from_batch_headers(
    tmp_path: Path, segment_bytes: int
) -> None:
    log = make_log(tmp_path, segment_bytes=segment_bytes)
    write_with_epochs(log, [(0, 5), (1, 1), (4, 7), (6, 3), (9, 6)])
    expected = epochs_of(log)
    assert expected == [(0, 0), (1, 5), (4, 6), (6, 13), (9, 16)]
    log.close()
    (tmp_path / "topic-0" / CHECKPOINT).unlink()
    assert epochs_of(make_log(tmp_path, segment_bytes=segment_bytes)) == expected


def test_a_single_broker_log_from_before_epochs_is_all_epoch_zero(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=300)
    write_with_epochs(log, [(0, 10)])
    log.close()
    (tmp_path / "topic-0" / CHECKPOINT).unlink()
    again = make_log(tmp_path, segment_bytes=300)
    assert len(again.segments) > 3
    assert epochs_of(again) == [(0, 0)]
    assert again.end_offset_for_epoch(0) == (0, 10)


def test_a_checkpoint_missing_the_last_epoch_is_rebuilt(tmp_path: Path) -> None:
    """A crash after a segment write but before the checkpoint write."""
    log = make_log(tmp_path)
    write_with_epochs(log, [(0, 2), (3, 2)])
    log.close()
    (tmp_path / "topic-0" / CHECKPOINT).write_text("0\n1\n0 0\n")
    assert epochs_of(make_log(tmp_path)) == [(0, 0), (3, 2)]


def test_a_corrupt_checkpoint_is_rebuilt(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write_with_epochs(log, [(1, 2), (2, 2)])
    log.close()
    (tmp_path / "topic-0" / CHECKPOINT).write_text("garbage")
    assert epochs_of(make_log(tmp_path)) == [(1, 0), (2, 2)]


def test_checkpoint_entries_past_the_log_end_are_dropped_on_load(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write_with_epochs(log, [(0, 2)])
    log.close()
    (tmp_path / "topic-0" / CHECKPOINT).write_text("0\n2\n0 0\n4 9\n")
    assert epochs_of(make_log(tmp_path)) == [(0, 0)]
    log = make_log(tmp_path)
    log.truncate_to(0)
    log.close()
    (tmp_path / "topic-0" / CHECKPOINT).write_text("0\n2\n0 0\n4 9\n")
    assert epochs_of(make_log(tmp_path)) == []


# -- follower appends -------------------------------------------------------------------------


def test_follower_append_keeps_the_leaders_offsets_and_epochs(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(0, 2), (3, 3)])
    follower = make_log(tmp_path, "follower")
    result = follower.append_as_follower(leader_bytes(leader), NOW)
    assert (result.base_offset, result.last_offset, result.duplicate) == (0, 4, False)
    assert follower.log_end_offset == 5
    assert epochs_of(follower) == [(0, 0), (3, 2)]
    assert leader_bytes(follower) == leader_bytes(leader)
    assert (tmp_path / "follower" / CHECKPOINT).read_text() == "0\n2\n0 0\n3 2\n"


def test_follower_append_continues_at_its_log_end_and_notifies(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(1, 4)])
    follower = make_log(tmp_path, "follower")
    woken: list[int] = []
    follower.add_listener(lambda log, _event: woken.append(log.log_end_offset))
    data = leader_bytes(leader)
    headers = list(iter_batch_headers(data))
    follower.append_as_follower(data[: headers[2].position], NOW)
    follower.append_as_follower(data[headers[2].position :], NOW)
    assert woken == [2, 4]
    assert leader_bytes(follower) == data


def test_follower_append_not_at_the_log_end_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(0, 3)])
    data = leader_bytes(leader)
    follower = make_log(tmp_path, "follower")
    follower.append_as_follower(data, NOW)
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(data, NOW)  # a repeat: offsets go back
    # A gap ahead is a compacted leader log whose first records were cleaned away:
    # accepted, as Kafka's followers do (only going back is refused).
    second = list(iter_batch_headers(data))[1]
    other = make_log(tmp_path, "other")
    other.append_as_follower(data[second.position :], NOW)
    assert other.log_end_offset == 3
    assert follower.log_end_offset == 3
    assert leader_bytes(follower) == data


def test_follower_append_refuses_offsets_going_back_inside_one_payload(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(0, 2)])
    data = leader_bytes(leader)
    follower = make_log(tmp_path, "follower")
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(data + data, NOW)
    assert follower.log_end_offset == 0


def test_follower_append_ignores_max_message_bytes(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    leader.append(batch(20), NOW)
    follower = make_log(tmp_path, "follower", max_message_bytes=100)
    follower.append_as_follower(leader_bytes(leader), NOW)
    assert follower.log_end_offset == 20


def test_follower_append_leaves_out_a_partial_last_batch(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(0, 3)])
    data = leader_bytes(leader)
    follower = make_log(tmp_path, "follower")
    result = follower.append_as_follower(data[:-10], NOW)  # a fetch cut inside batch 2
    assert (result.base_offset, result.last_offset) == (0, 1)
    assert follower.log_end_offset == 2
    # No whole batch at all: nothing to append yet (Kafka appends no batch and
    # raises nothing); the fetcher asks again from the same log end.
    assert follower.append_as_follower(data[-30:], NOW).last_offset == 1
    assert follower.log_end_offset == 2
    follower.append_as_follower(data[list(iter_batch_headers(data))[2].position :], NOW)
    assert leader_bytes(follower) == data


def test_follower_append_checks_crcs(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(0, 1)])
    data = bytearray(leader_bytes(leader))
    data[-1] ^= 0xFF
    follower = make_log(tmp_path, "follower")
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(data, NOW)
    assert follower.log_end_offset == 0


def test_follower_append_larger_than_a_segment_spreads_over_segments(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(0, 4), (2, 6)])
    data = leader_bytes(leader)
    follower = make_log(tmp_path, "follower", segment_bytes=450)
    follower.append_as_follower(data, NOW)
    assert len(follower.segments) > 2
    assert all(s.size <= 450 for s in follower.segments)
    assert leader_bytes(follower) == data
    assert epochs_of(follower) == [(0, 0), (2, 4)]


# -- truncation and the log start -------------------------------------------------------------


def test_truncate_to_truncates_the_epoch_cache(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write_with_epochs(log, [(0, 2), (3, 2), (4, 2)])
    log.truncate_to(3)
    assert log.log_end_offset == 3
    assert epochs_of(log) == [(0, 0), (3, 2)]
    assert log.end_offset_for_epoch(3) == (3, 3)
    assert LeaderEpochCache.read_file(tmp_path / "topic-0" / CHECKPOINT) == [
        EpochEntry(0, 0),
        EpochEntry(3, 2),
    ]


def test_divergent_follower_truncates_and_takes_the_new_leaders_epoch(tmp_path: Path) -> None:
    """Kafka's KIP-101 scenario: the follower finds the divergence through the epochs."""
    follower = make_log(tmp_path, "follower")
    write_with_epochs(follower, [(0, 2), (1, 3)])  # epoch-1 records the new leader never got
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(0, 2), (2, 4)])
    epoch, end = leader.end_offset_for_epoch(follower.latest_epoch)
    assert (epoch, end) == (0, 2)
    follower.truncate_to(end)
    assert epochs_of(follower) == [(0, 0)]
    follower.append_as_follower(leader_bytes(leader, end), NOW)
    assert leader_bytes(follower) == leader_bytes(leader)
    assert epochs_of(follower) == [(0, 0), (2, 2)]


def test_diverging_epoch_tells_a_follower_where_to_truncate(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(0, 2), (2, 3)])
    # A prefix of the leader's log: fetch on.
    assert diverging_epoch(leader, 2, 0) is None
    assert diverging_epoch(leader, 4, 2) is None
    assert diverging_epoch(leader, 5, 2) is None
    assert diverging_epoch(leader, 3, -1) is None  # no epoch sent: not checked
    # Epoch 0 ended at 2 here, the follower has epoch-0 records up to 4.
    assert diverging_epoch(leader, 4, 0) == (0, 2)
    # The follower led epoch 1, which the leader never saw: back to epoch 0's end.
    assert diverging_epoch(leader, 3, 1) == (0, 2)
    with pytest.raises(OffsetOutOfRangeError):
        diverging_epoch(leader, 3, 7)  # an epoch from the future
    leader.delete_records(1)
    with pytest.raises(OffsetOutOfRangeError):
        diverging_epoch(leader, 0, 0)


def test_truncating_to_the_log_end_drops_epochs_without_records(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write_with_epochs(log, [(0, 2)])
    log.assign_leader_epoch(1)  # led epoch 1 but wrote nothing
    assert epochs_of(log) == [(0, 0), (1, 2)]
    log.truncate_to(2)
    assert log.log_end_offset == 2
    assert epochs_of(log) == [(0, 0)]
    leader = make_log(tmp_path, "leader")
    write_with_epochs(leader, [(0, 4)])
    log.append_as_follower(leader_bytes(leader, 2), NOW)
    assert epochs_of(log) == [(0, 0)]


def test_truncate_fully_and_start_at_empties_the_log_and_the_cache(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write_with_epochs(log, [(0, 2), (3, 2)])
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert epochs_of(log) == []
    leader = make_log(tmp_path, "leader")
    leader.truncate_fully_and_start_at(100)
    write_with_epochs(leader, [(7, 2)])
    log.append_as_follower(leader_bytes(leader, 100), NOW)
    log.close()
    again = make_log(tmp_path)
    assert (again.log_start_offset, again.log_end_offset) == (100, 102)
    assert epochs_of(again) == [(7, 100)]


def test_delete_records_moves_the_first_epochs_start(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write_with_epochs(log, [(0, 2), (3, 2)])
    log.delete_records(1)
    assert epochs_of(log) == [(0, 1), (3, 2)]
    log.delete_records(3)
    assert epochs_of(log) == [(3, 3)]
    log.close()
    assert epochs_of(make_log(tmp_path)) == [(3, 3)]


def test_retention_moves_the_first_epochs_start(tmp_path: Path) -> None:
    log = make_log(tmp_path, segment_bytes=200, retention_bytes=300)
    write_with_epochs(log, [(0, 3), (1, 3)])
    epochs_of(log)  # loaded before retention runs
    assert log.apply_retention(NOW) > 0
    assert log.log_start_offset > 0
    assert epochs_of(log)[0][1] == log.log_start_offset


# -- producer state across a failover -----------------------------------------------------------


def test_a_follower_turned_leader_dedupes_a_producers_retry(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    first = batch(3, producer_id=42, epoch=0, seq=0)
    second = batch(2, producer_id=42, epoch=0, seq=3)
    leader.append(first, NOW)
    leader.append(second, NOW)
    follower = make_log(tmp_path, "follower")
    follower.append_as_follower(leader_bytes(leader), NOW)
    # The old leader died before answering; the producer retries on the new one.
    follower.partition_leader_epoch = 1
    retry = follower.append(second, NOW)
    assert retry.duplicate
    assert (retry.base_offset, retry.last_offset) == (3, 4)
    with pytest.raises(OutOfOrderSequenceError):
        follower.append(batch(1, producer_id=42, epoch=0, seq=9), NOW)
    nxt = follower.append(batch(1, producer_id=42, epoch=0, seq=5), NOW)
    assert nxt.base_offset == 5
    assert epochs_of(follower) == [(0, 0), (1, 5)]
    values = [r.offset for b in decode_batches(leader_bytes(follower)) for r in b.records]
    assert values == [0, 1, 2, 3, 4, 5]


def test_a_retry_of_a_batch_the_follower_truncated_is_appended_again(tmp_path: Path) -> None:
    """A truncated batch was never acknowledged: its retry is new data, not a duplicate."""
    leader = make_log(tmp_path, "leader")
    leader.append(batch(3, producer_id=7, epoch=0, seq=0), NOW)
    unacked = batch(2, producer_id=7, epoch=0, seq=3)
    leader.append(unacked, NOW)
    follower = make_log(tmp_path, "follower")
    follower.append_as_follower(leader_bytes(leader), NOW)
    follower.truncate_to(3)  # the new leader's log ends before the unacknowledged batch
    follower.partition_leader_epoch = 1
    retry = follower.append(unacked, NOW)
    assert not retry.duplicate
    assert (retry.base_offset, retry.last_offset) == (3, 4)
    assert follower.append(unacked, NOW).duplicate


def test_a_restarted_follower_turned_leader_rebuilds_producer_state(tmp_path: Path) -> None:
    leader = make_log(tmp_path, "leader")
    first = batch(2, producer_id=11, epoch=3, seq=0)
    leader.append(first, NOW)
    follower = make_log(tmp_path, "follower")
    follower.append_as_follower(leader_bytes(leader), NOW)
    follower.close()
    again = make_log(tmp_path, "follower")
    again.partition_leader_epoch = 1
    assert again.append(first, NOW).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        again.append(batch(1, producer_id=11, epoch=3, seq=5), NOW)
    assert again.append(batch(1, producer_id=11, epoch=3, seq=2), NOW).base_offset == 2


def test_a_new_leader_records_its_epoch_at_the_log_end_before_any_append(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    write_with_epochs(log, [(0, 3)])
    log.assign_leader_epoch(2)
    assert epochs_of(log) == [(0, 0), (2, 3)]
    assert log.end_offset_for_epoch(0) == (0, 3)  # a follower of epoch 0 keeps offsets 0..2
    log.append(batch(2), NOW)
    assert epochs_of(log) == [(0, 0), (2, 3)]
    data = leader_bytes(log, 3)
    assert [h.partition_leader_epoch for h in iter_batch_headers(data)] == [2]


# -- replicas converge through the epoch history --------------------------------------------------


def reconcile_by_fetch(follower: Log, leader: Log) -> None:
    """The same through Fetch v12+: the leader answers a diverging epoch, or nothing."""
    for _ in range(20):
        if follower.log_end_offset == 0:
            follower.truncate_to(0)
            return
        diverging = diverging_epoch(leader, follower.log_end_offset, follower.latest_epoch)
        if diverging is None:
            follower.truncate_to(follower.log_end_offset)  # epochs without records go
            if diverging_epoch(leader, follower.log_end_offset, follower.latest_epoch) is None:
                return
            continue
        epoch, end = diverging
        follower.truncate_to(min(end, follower.end_offset_for_epoch(epoch)[1]))
    raise AssertionError("no convergence")


def reconcile(follower: Log, leader: Log) -> None:
    """The follower side of KIP-279, as a replica fetcher would run it before fetching.

    Repeated until a round changes nothing: truncating at the log end can drop
    an epoch the follower led without writing, and its older epoch must then
    be checked against the leader too.
    """
    for _ in range(20):
        before = (follower.log_end_offset, follower.latest_epoch)
        if before == (0, -1):
            break
        if follower.log_end_offset == 0:
            follower.truncate_to(0)  # nothing to compare; drop epochs without records
            continue
        mine = follower.latest_epoch
        epoch, end = leader.end_offset_for_epoch(mine)
        if epoch == -1:  # the leader knows no epoch this old: start over
            follower.truncate_to(0)
            continue
        if epoch != mine:  # the leader never had our epoch: stop where its older one ended
            end = min(end, follower.end_offset_for_epoch(epoch)[1])
        follower.truncate_to(end)  # also at the log end: drops epochs without records
        if (follower.log_end_offset, follower.latest_epoch) == before:
            break
    else:
        raise AssertionError("no convergence")


steps = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.integers(1, 3)),
        st.tuples(st.just("replicate"), st.integers(0, 3)),
        st.tuples(st.just("failover"), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(plan=steps, by_fetch=st.booleans())
def test_two_replicas_converge_to_the_leaders_log_after_any_failovers(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[str, int]], by_fetch: bool
) -> None:
    """With OffsetsForLeaderEpoch or with Fetch's diverging epoch alike."""
    sync = reconcile_by_fetch if by_fetch else reconcile
    root = tmp_path_factory.mktemp("replicas")
    leader, follower = (
        make_log(root, "a", segment_bytes=700),
        make_log(root, "b", segment_bytes=700),
    )
    epoch = 0
    leader.assign_leader_epoch(epoch)
    for step, n in plan:
        if step == "produce":
            for _ in range(n):
                leader.append(batch(), NOW)
        elif step == "replicate":  # the follower fetches up to n batches, then stops
            sync(follower, leader)  # (as the fetcher would, before fetching on)
            data = leader_bytes(leader, follower.log_end_offset)
            headers = list(iter_batch_headers(data))[:n]
            if headers:
                follower.append_as_follower(data[: headers[-1].position + headers[-1].size], NOW)
        else:  # the follower becomes leader, possibly missing records (unclean)
            epoch += 1
            leader, follower = follower, leader
            leader.assign_leader_epoch(epoch)
    sync(follower, leader)
    if follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader_bytes(leader, follower.log_end_offset), NOW)
    assert leader_bytes(follower) == leader_bytes(leader)
    # The follower's epoch history is exactly what its batches say.
    entries = follower.leader_epoch_cache.entries
    assert entries == follower._epoch_entries_from_batches()
