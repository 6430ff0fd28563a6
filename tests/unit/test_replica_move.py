"""AlterReplicaLogDirs (API 34, KIP-113) without sockets: the answers before a move
(Kafka's codes and order), the incremental copy, the swap (offsets, leader epochs,
producer state, high watermark, files), a move that keeps taking appends between
copy rounds, and what a start does with a move a kill -9 interrupted."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from headwater.broker.handlers.log_dirs import LogDirsApi, alter_error, run_move
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory
from headwater.log.replica_move import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    DirSync,
    MoveError,
    recover_moves,
    side_dir_name,
)
from tests.unit.test_log import NOW, batch, offsets_in


def every_offset(log: object) -> list[int]:
    """Every readable offset, segment after segment (one read stops at a segment end)."""
    out: list[int] = []
    while True:
        got = offsets_in(log, out[-1] + 1 if out else 0)  # type: ignore[arg-type]
        if not got:
            return out
        out += got


def open_jbod(tmp_path: Path, **config: int) -> LogDirectory:
    logs = LogDirectory(
        tmp_path / "a", LogConfig(free_space_min_bytes=0, **config), [tmp_path / "b"]
    )
    logs.open()
    logs.create_topic("t", 2)
    return logs


def other_dir(logs: LogDirectory, topic: str, partition: int) -> str:
    here = logs.dir_of(topic, partition)
    return next(str(d) for d in logs.dirs if str(d) != here)


# -- the answers before a move ----------------------------------------------------------


def test_answers_follow_kafkas_codes(tmp_path: Path) -> None:
    logs = open_jbod(tmp_path)
    a, b = (str(d) for d in logs.dirs)
    assert alter_error(logs, "t", 0, str(tmp_path / "nowhere")) == MoveError.LOG_DIR_NOT_FOUND
    assert alter_error(logs, "missing", 0, b) == MoveError.UNKNOWN_TOPIC_OR_PARTITION
    assert alter_error(logs, "t", 7, b) == MoveError.UNKNOWN_TOPIC_OR_PARTITION
    assert alter_error(logs, "x" * 250, 0, b) == MoveError.INVALID_TOPIC_EXCEPTION
    # t-1 was never written: no replica here yet (Kafka: NotLeaderOrFollower, answered
    # as REPLICA_NOT_AVAILABLE), and it is created in the directory asked for.
    assert alter_error(logs, "t", 1, b) == MoveError.REPLICA_NOT_AVAILABLE
    logs.log("t", 1).append(batch(1), NOW)
    assert logs.dir_of("t", 1) == b
    assert (Path(b) / "t-1").is_dir()
    assert alter_error(logs, "t", 1, a) == MoveError.NONE
    logs.fail("disk gone", b)
    assert alter_error(logs, "t", 0, b) == MoveError.KAFKA_STORAGE_ERROR
    assert alter_error(logs, "t", 1, a) == MoveError.KAFKA_STORAGE_ERROR  # replica offline
    logs.close()


def test_a_replica_already_there_needs_no_move(tmp_path: Path) -> None:
    logs = open_jbod(tmp_path)
    logs.log("t", 0).append(batch(1), NOW)
    assert logs.begin_move("t", 0, logs.dir_of("t", 0)) is None
    assert logs.moves == {}
    logs.close()


# -- the copy ---------------------------------------------------------------------------


def test_dir_sync_copies_only_what_was_appended(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "00000000000000000000.log").write_bytes(b"a" * 1000)
    (src / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    sync = DirSync(src, dst)
    assert sync.sync() == 1000 + len("0\n1\n0 0\n")
    with open(src / "00000000000000000000.log", "ab") as f:
        f.write(b"b" * 10)
    assert sync.sync() == 10
    assert (dst / "00000000000000000000.log").read_bytes() == b"a" * 1000 + b"b" * 10
    assert sync.sync() == 0
    # The cleaner replaces a file (a new inode): copied whole; a deleted one goes.
    (src / "x.log.new").write_bytes(b"c" * 5)
    os.replace(src / "x.log.new", src / "00000000000000000000.log")
    (src / "leader-epoch-checkpoint").unlink()
    assert sync.sync() == 5
    assert sorted(os.listdir(dst)) == ["00000000000000000000.log"]
    assert (dst / "00000000000000000000.log").read_bytes() == b"c" * 5
    # A truncation: forget() makes the next round copy everything again.
    sync.forget()
    assert sync.sync() == 5


# -- the swap ---------------------------------------------------------------------------


def test_a_move_keeps_offsets_epochs_producers_and_high_watermark(tmp_path: Path) -> None:
    logs = open_jbod(tmp_path, segment_bytes=4096)
    log = logs.log("t", 0)
    log.enable_replication(0)
    log.assign_leader_epoch(3)
    for seq in range(0, 40, 4):
        log.append(batch(4, producer_id=7, epoch=0, seq=seq), NOW)
    log.update_high_watermark(30)
    source, destination = logs.dir_of("t", 0), other_dir(logs, "t", 0)
    before = (log.log_start_offset, log.log_end_offset, log.high_watermark)
    assert len(log.segments) >= 2

    move = logs.begin_move("t", 0, destination)
    assert move is not None and logs.moves
    move.generation = log.generation
    assert asyncio.run(run_move(logs, move))

    assert logs.log("t", 0) is log and logs.dir_of("t", 0) == destination
    assert not (Path(source) / "t-0").exists()
    assert (Path(destination) / "t-0").is_dir()
    assert not [n for d in logs.dirs for n in os.listdir(d) if n.endswith(FUTURE_DIR_SUFFIX)]
    assert not [n for d in logs.dirs for n in os.listdir(d) if n.endswith(DELETE_DIR_SUFFIX)]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == before
    assert log.latest_epoch == 3
    assert log.producers()[7].last_seq == 39
    assert every_offset(log) == list(range(28))  # no batch reaching past the HW (30)
    # The producer continues (sequence 40 follows) and a retry stays a duplicate.
    assert not log.append(batch(4, producer_id=7, epoch=0, seq=40), NOW).duplicate
    assert log.append(batch(4, producer_id=7, epoch=0, seq=40), NOW).duplicate
    assert logs.moves == {}
    logs.close()

    reopened = open_again(tmp_path, logs)
    assert reopened.dir_of("t", 0) == destination
    assert reopened.log("t", 0).log_end_offset == 44
    reopened.close()


def open_again(tmp_path: Path, logs: LogDirectory) -> LogDirectory:
    again = LogDirectory(tmp_path / "a", logs.config, [tmp_path / "b"])
    again.open()
    return again


def test_appends_between_copy_rounds_are_all_moved_once(tmp_path: Path) -> None:
    logs = open_jbod(tmp_path, segment_bytes=2048)
    log = logs.log("t", 0)
    for _ in range(20):
        log.append(batch(2), NOW)
    move = logs.begin_move("t", 0, other_dir(logs, "t", 0))
    assert move is not None
    move.generation = log.generation
    for _ in range(3):  # rounds as run_move does them, each followed by appends
        move.sync.sync()
        for _ in range(5):
            log.append(batch(2), NOW)
    assert log.generation == move.generation
    aside = logs.complete_move(move)
    assert every_offset(log) == list(range(70))
    log.append(batch(2), NOW)
    assert every_offset(log)[-4:] == [68, 69, 70, 71]
    assert aside.name.endswith(DELETE_DIR_SUFFIX)
    logs.close()


def test_a_deleted_partition_drops_its_move(tmp_path: Path) -> None:
    logs = open_jbod(tmp_path)
    logs.log("t", 0).append(batch(2), NOW)
    move = logs.begin_move("t", 0, other_dir(logs, "t", 0))
    assert move is not None
    logs.delete_partition("t", 0)
    assert not asyncio.run(run_move(logs, move))
    assert not move.future.exists() and logs.moves == {}
    logs.close()


# -- a kill -9 in the middle ------------------------------------------------------------


@pytest.mark.parametrize("stage", ["copying", "source-renamed"])
def test_a_start_settles_an_interrupted_move(tmp_path: Path, stage: str) -> None:
    logs = open_jbod(tmp_path)
    log = logs.log("t", 0)
    log.append(batch(5), NOW)
    source = Path(logs.dir_of("t", 0)) / "t-0"
    target = Path(other_dir(logs, "t", 0))
    log.close()
    future = target / side_dir_name("t", 0, FUTURE_DIR_SUFFIX)
    DirSync(source, future).sync(final=True)
    if stage == "source-renamed":
        os.rename(source, source.parent / side_dir_name("t", 0, DELETE_DIR_SUFFIX))
    logs.lock.release()
    for extra in logs.extra:
        extra.lock.release()

    again = open_again(tmp_path, logs)
    expected = source.parent if stage == "copying" else target
    assert again.dir_of("t", 0) == str(expected)
    assert [d for d in again.dirs if (d / "t-0").is_dir()] == [expected]
    leftovers = [n for d in again.dirs for n in os.listdir(d) if "." in n and n.startswith("t-")]
    assert leftovers == []
    assert offsets_in(again.log("t", 0), 0) == [0, 1, 2, 3, 4]
    again.close()


def test_recover_moves_drops_a_future_copy_without_its_source_renamed(tmp_path: Path) -> None:
    (tmp_path / "a" / "t-0").mkdir(parents=True)
    orphan = tmp_path / "b" / side_dir_name("t", 0, FUTURE_DIR_SUFFIX)
    orphan.mkdir(parents=True)
    assert recover_moves([tmp_path / "a", tmp_path / "b"]) == [orphan]
    assert not orphan.exists() and (tmp_path / "a" / "t-0").is_dir()


def test_describe_log_dirs_lists_a_move_under_way_as_a_future_replica(tmp_path: Path) -> None:
    logs = open_jbod(tmp_path)
    log = logs.log("t", 0)
    log.append(batch(3), NOW)
    destination = other_dir(logs, "t", 0)
    move = logs.begin_move("t", 0, destination)
    assert move is not None
    move.sync.sync()  # one round copied, the swap not done

    async def describe() -> dict[str, object]:
        return await LogDirsApi(logs).describe_log_dirs(None, SimpleNamespace(topics=None))  # type: ignore[arg-type]

    results = {r["log_dir"]: r for r in asyncio.run(describe())["results"]}  # type: ignore[attr-defined]
    [future] = [
        (t["name"], p["partition_index"], p["is_future_key"], p["partition_size"], p["offset_lag"])
        for t in results[destination]["topics"]
        for p in t["partitions"]
    ]
    assert future[:3] == ("t", 0, True)
    assert future[3] == sum(f.stat().st_size for f in move.future.iterdir()) > 0
    assert future[4] == 3  # no finished round recorded how far it got: the whole log
    source = results[logs.dir_of("t", 0)]
    assert ("t", 0, False) in {
        (t["name"], p["partition_index"], p["is_future_key"])
        for t in source["topics"]
        for p in t["partitions"]
    }
    logs.close()
