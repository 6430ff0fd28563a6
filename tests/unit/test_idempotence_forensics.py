"""The partition campaign's duplicate forensics (tests/integration/idempotence_forensics.py):
reading a duplicate's copies back from segment bytes and telling a librdkafka epoch
bump from a duplicate the broker should have refused. Pure: no broker, no sockets."""

from __future__ import annotations

from pathlib import Path

from headwater.records.record import RecordBatchBuilder
from tests.integration.idempotence_forensics import (
    StoredCopy,
    TimedLines,
    is_epoch_bump_duplicate,
    logged_epoch_bumps,
    stored_copies,
)

PID = 1000


def batch(base_offset: int, epoch: int, base_seq: int, values: list[int], leader: int = 1) -> bytes:
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=PID,
        producer_epoch=epoch,
        base_sequence=base_seq,
        partition_leader_epoch=leader,
    )
    for v in values:
        builder.append(1_700_000_000_000, None, str(v).encode())
    return builder.build()


def copy(offset: int, epoch: int, seq: int, pid: int = PID) -> StoredCopy:
    return StoredCopy(7, offset, pid, epoch, seq, seq, (offset, offset), 1, 0)


BUMP_LINE = (
    "GETPID [rdkafka#producer-1] [thrd:main]: Acquired PID{Id:1000,Epoch:1} "
    "(previous PID{Id:1000,Epoch:0})"
)


def test_copies_are_read_with_their_producer_epoch_and_sequence(tmp_path: Path) -> None:
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(
        batch(0, 0, 0, [0, 3, 6]) + batch(3, 0, 3, [9, 12]) + batch(5, 1, 0, [6, 9], leader=2)
    )
    found = stored_copies(tmp_path, [6, 9, 12])
    assert [(c.offset, c.producer_epoch, c.sequence) for c in found[6]] == [(2, 0, 2), (5, 1, 0)]
    assert [(c.offset, c.producer_epoch, c.sequence) for c in found[9]] == [(3, 0, 3), (6, 1, 1)]
    assert found[9][1].partition_leader_epoch == 2
    assert found[9][1].batch_offsets == (5, 6)
    assert len(found[12]) == 1


def test_a_logged_bump_between_the_copies_epochs_explains_the_duplicate() -> None:
    bumps = logged_epoch_bumps(["IDEMPSTATE ... Idempotent producer state change", BUMP_LINE])
    assert bumps == [(PID, 0, PID, 1)]
    assert is_epoch_bump_duplicate([copy(10, 0, 40), copy(90, 1, 0)], bumps)


def test_the_idempotent_producers_own_bump_after_a_drain_explains_the_duplicate() -> None:
    """librdkafka bumps an idempotent producer's epoch locally, without InitProducerId."""
    line = (
        "DRAIN [rdkafka#producer-6] [thrd:main]: All partitions drained, "
        "bumped epoch to PID{Id:1000,Epoch:1}"
    )
    bumps = logged_epoch_bumps([line])
    assert bumps == [(PID, 0, PID, 1)]
    assert is_epoch_bump_duplicate([copy(10, 0, 40), copy(90, 1, 0)], bumps)
    assert not is_epoch_bump_duplicate([copy(10, 1, 40), copy(90, 1, 0)], bumps)


def test_copies_in_one_epoch_are_never_explained() -> None:
    bumps = [(PID, 0, PID, 1)]
    assert not is_epoch_bump_duplicate([copy(10, 0, 40), copy(90, 0, 40)], bumps)
    assert not is_epoch_bump_duplicate([copy(10, 1, 0), copy(90, 1, 5)], bumps)


def test_epochs_without_a_logged_bump_or_of_another_producer_are_not_explained() -> None:
    assert not is_epoch_bump_duplicate([copy(10, 0, 40), copy(90, 1, 0)], [])
    bump = [(PID, 0, PID, 1)]
    assert not is_epoch_bump_duplicate([copy(10, 0, 40), copy(90, 1, 0, pid=2000)], bump)
    # A bump the client logged for other epochs than the copies' does not explain them.
    assert not is_epoch_bump_duplicate([copy(10, 2, 4), copy(90, 3, 0)], bump)
    assert not is_epoch_bump_duplicate([copy(10, 0, 4)], bump)


def test_a_new_producer_id_logged_in_place_of_the_old_one_explains_the_duplicate() -> None:
    """Kafka's broker answers an idempotent producer's bump with a new id at epoch 0."""
    line = "GETPID ... Acquired PID{Id:2000,Epoch:0} (previous PID{Id:1000,Epoch:3})"
    bumps = logged_epoch_bumps([line])
    assert bumps == [(PID, 3, 2000, 0)]
    assert is_epoch_bump_duplicate([copy(10, 3, 40), copy(90, 0, 0, pid=2000)], bumps)
    assert not is_epoch_bump_duplicate([copy(10, 3, 40), copy(90, 0, 0, pid=3000)], bumps)


def test_timed_lines_select_a_window_and_a_filter() -> None:
    lines = TimedLines()
    lines.add("broker 0", "leader of src-1 at epoch 3", at=100.0)
    lines.add("broker 1", "follower of src-2", at=101.0)
    lines.add("broker 0", "stepping down as leader of src-1", at=200.0)
    chosen = lines.between(99, 150, keep=lambda line: "src-1" in line)
    assert len(chosen) == 1 and chosen[0].endswith("broker 0: leader of src-1 at epoch 3")
