"""Stray replicas: local copies the cluster metadata no longer wants here are found at
start, moved aside as Kafka names them and deleted; nothing the metadata still lists
for this broker, and nothing of a topic whose metadata cannot be read, is touched."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import pytest

from headwater.cluster.local_zookeeper import LocalClusterStore
from headwater.cluster.node import ClusterNode, ControllerConfig
from headwater.cluster.replica_manager import ReplicationConfig
from headwater.cluster.store import TopicAssignment
from headwater.cluster.stray_replicas import (
    LocalReplica,
    MetadataSnapshot,
    find_stray_replicas,
    topics_to_forget,
)
from headwater.log.config import LogConfig
from headwater.log.hw_checkpoint import HIGH_WATERMARK_CHECKPOINT_FILE, HighWatermarkCheckpoint
from headwater.log.log_directory import STRAY_DIR_SUFFIX, LogDirectory
from headwater.records.record import RecordBatchBuilder
from headwater.testing.cluster_of_one import cluster_of_one
from headwater.testing.fake_zookeeper import FakeZooKeeper
from headwater.testing.in_memory_store import InMemoryClusterStore

ME = 1
OLD, NEW = uuid.uuid4(), uuid.uuid4()
NOW = 1_700_000_000_000


def _topic(
    name: str,
    topic_id: uuid.UUID,
    replicas: dict[int, list[int]],
    adding: dict[int, list[int]] | None = None,
) -> TopicAssignment:
    return TopicAssignment(name, topic_id, replicas, adding=adding or {})


def _strays(
    local: list[LocalReplica],
    topics: list[TopicAssignment],
    *,
    unreadable: frozenset[str] = frozenset(),
    adopts: bool = False,
) -> dict[tuple[str, int], str]:
    metadata = MetadataSnapshot({t.name: t for t in topics}, unreadable)
    found = find_stray_replicas(local, metadata, ME, adopts_unknown_topics=adopts)
    return {(s.topic, s.partition): s.reason for s in found}


# -- the decision ---------------------------------------------------------------------


def test_a_copy_the_metadata_lists_for_this_broker_is_never_a_stray() -> None:
    local = [LocalReplica("t", 0, OLD), LocalReplica("t", 1, OLD)]
    assert _strays(local, [_topic("t", OLD, {0: [ME, 2], 1: [2, ME]})]) == {}


def test_a_deleted_topic_is_a_stray_in_a_cluster_but_adopted_by_a_cluster_of_one() -> None:
    local = [LocalReplica("gone", 0, OLD)]
    strays = _strays(local, [])
    assert list(strays) == [("gone", 0)]
    assert "does not exist" in strays[("gone", 0)]
    # A cluster of one: a registered topic its metadata never recorded joins it instead.
    assert _strays(local, [], adopts=True) == {}


def test_a_re_created_topic_makes_the_old_incarnation_a_stray_even_where_assigned() -> None:
    local = [LocalReplica("t", 0, OLD)]
    for adopts in (False, True):
        strays = _strays(local, [_topic("t", NEW, {0: [ME, 2]})], adopts=adopts)
        assert list(strays) == [("t", 0)]
        assert str(NEW) in strays[("t", 0)] and str(OLD) in strays[("t", 0)]


def test_a_partition_reassigned_away_is_a_stray_and_the_topic_stays() -> None:
    metadata = MetadataSnapshot({"t": _topic("t", OLD, {0: [2, 3], 1: [ME, 2]})})
    found = find_stray_replicas(
        [LocalReplica("t", 0, OLD), LocalReplica("t", 1, OLD)],
        metadata,
        ME,
        adopts_unknown_topics=False,
    )
    assert [(s.topic, s.partition) for s in found] == [("t", 0)]
    assert "[2, 3]" in found[0].reason


def test_a_reassignment_adding_this_broker_keeps_its_copy() -> None:
    # KIP-455: the replicas being added are listed in "adding" (and in the replicas).
    local = [LocalReplica("t", 0, OLD)]
    assert _strays(local, [_topic("t", OLD, {0: [2, 3]}, adding={0: [ME]})]) == {}


def test_a_partition_the_metadata_does_not_have_is_a_stray() -> None:
    strays = _strays([LocalReplica("t", 5, OLD)], [_topic("t", OLD, {0: [ME]})])
    assert list(strays) == [("t", 5)]


def test_nothing_of_a_topic_whose_metadata_is_unreadable_is_a_stray() -> None:
    local = [LocalReplica("t", 0, OLD)]
    assert _strays(local, [], unreadable=frozenset({"t"})) == {}


def test_a_directory_the_registry_does_not_know_is_kept_only_where_assigned() -> None:
    # Left behind by a deletion that crashed: no id to compare.
    orphan = [LocalReplica("t", 0, None)]
    assert _strays(orphan, [_topic("t", NEW, {0: [ME]})]) == {}
    assert list(_strays(orphan, [_topic("t", NEW, {0: [2]})])) == [("t", 0)]
    assert list(_strays(orphan, [], adopts=True)) == [("t", 0)]  # cannot be adopted


def test_registered_topics_gone_or_re_created_leave_the_registry_even_without_copies() -> None:
    registry = {"kept": OLD, "gone": OLD, "reborn": OLD, "unreadable": OLD}
    metadata = MetadataSnapshot(
        {"kept": _topic("kept", OLD, {0: [2]}), "reborn": _topic("reborn", NEW, {0: [ME]})},
        unreadable=frozenset({"unreadable"}),
    )
    assert topics_to_forget(registry, metadata, adopts_unknown_topics=False) == ["gone", "reborn"]
    assert topics_to_forget(registry, metadata, adopts_unknown_topics=True) == ["reborn"]


# -- the data directory ---------------------------------------------------------------


def _logs(path: Path) -> LogDirectory:
    logs = LogDirectory(path, LogConfig())
    logs.open()
    return logs


def _write(logs: LogDirectory, topic: str, partition: int, n: int = 3) -> None:
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(NOW + i, b"k", b"v")
    logs.log(topic, partition).append(builder.build(), NOW)


def test_partition_dirs_lists_copies_with_their_registry_ids_and_nothing_foreign(
    tmp_path: Path,
) -> None:
    logs = _logs(tmp_path)
    info = logs.create_topic("my-topic", 2)
    _write(logs, "my-topic", 1)
    (tmp_path / "orphan-0").mkdir()  # a crashed deletion's leftover: partition files only
    (tmp_path / "orphan-0" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "backup-2024").mkdir()  # not ours: never taken for a partition
    (tmp_path / "backup-2024" / "notes.txt").write_text("keep me")
    (tmp_path / "my-topic-7.txt").write_text("a file, not a directory")
    (tmp_path / "my-topic-01").mkdir()  # not how a partition directory is named
    assert logs.partition_dirs() == [("my-topic", 1, info.topic_id), ("orphan", 0, None)]
    logs.close()


def test_a_stray_is_moved_aside_under_kafkas_name_then_deleted(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    logs.create_topic("t", 1)
    _write(logs, "t", 0)
    moved = logs.move_stray("t", 0)
    assert moved.parent == tmp_path
    assert moved.name.startswith("t-0.") and moved.name.endswith(STRAY_DIR_SUFFIX)
    assert len(moved.name.split(".")[1].removesuffix(STRAY_DIR_SUFFIX)) == 32  # a uuid
    assert not (tmp_path / "t-0").exists()
    assert logs.partition_dirs() == []  # never listed (nor served) again
    assert logs.stray_dirs() == [moved]
    assert logs.delete_stray_dirs() == 1
    assert not moved.exists()
    # The topic is still registered: a partition reassigned away, not a deleted topic.
    assert "t" in logs.topics()
    logs.close()


def test_a_long_topic_name_is_cut_so_the_stray_name_fits_in_255_characters(
    tmp_path: Path,
) -> None:
    logs = _logs(tmp_path)
    name = "x" * 249
    logs.create_topic(name, 1)
    _write(logs, name, 0)
    moved = logs.move_stray(name, 0)
    assert len(moved.name) <= 255 and moved.name.endswith(STRAY_DIR_SUFFIX)
    assert logs.stray_dirs() == [moved]
    logs.close()


def test_forget_topics_drops_registry_entries_and_survives_a_reopen(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    logs.create_topic("t", 2)
    logs.create_topic("u", 1)
    logs.create_topic("kept", 1)
    logs.forget_topics(["t", "never-there", "u"])
    assert set(logs.topics()) == {"kept"}
    logs.close()
    again = _logs(tmp_path)
    assert set(again.topics()) == {"kept"}
    again.close()


# -- at start ---------------------------------------------------------------------------


def _cluster_member(logs: LogDirectory, data_dir: Path, store: InMemoryClusterStore) -> ClusterNode:
    """A member of a multi-broker cluster (its ZooKeeper replaced by the in-memory one)."""
    node = ClusterNode(
        ME,
        "127.0.0.1:2181",
        logs,
        data_dir,
        session_timeout_ms=6_000,
        connect_timeout_ms=6_000,
        replication=ReplicationConfig(),
        controller=ControllerConfig(),
    )
    node.store = store
    return node


def test_a_cluster_member_moves_aside_what_the_metadata_does_not_list_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logs = _logs(tmp_path)
    for name in ("kept", "deleted", "recreated", "moved"):
        logs.create_topic(name, 1)
        _write(logs, name, 0)
    logs.create_topic("idle", 1)  # registered, never written: no directory
    kept_id = logs.topics()["kept"].topic_id
    moved_id = logs.topics()["moved"].topic_id
    checkpoint = HighWatermarkCheckpoint(tmp_path / HIGH_WATERMARK_CHECKPOINT_FILE)
    checkpoint.write({("kept", 0): 3, ("deleted", 0): 3, ("recreated", 0): 3, ("moved", 0): 3})
    store = InMemoryClusterStore(FakeZooKeeper())
    store.start(1.0)
    store.create_topic("kept", kept_id, {0: [ME, 2]}, {})
    store.create_topic("recreated", uuid.uuid4(), {0: [ME, 2]}, {})
    store.create_topic("moved", moved_id, {0: [2, 3]}, {})
    node = _cluster_member(logs, tmp_path, store)
    with caplog.at_level(logging.WARNING, logger="headwater.cluster.node"):
        strays = node._move_stray_replicas()
    assert sorted((s.topic, s.partition) for s in strays) == [
        ("deleted", 0), ("moved", 0), ("recreated", 0)
    ]  # fmt: skip
    lines = [r.getMessage() for r in caplog.records if "stray replica" in r.getMessage()]
    assert len(lines) == 3  # one line per stray, saying why
    assert (tmp_path / "kept-0").is_dir()
    assert not any((tmp_path / f"{t}-0").exists() for t in ("deleted", "recreated", "moved"))
    # A deleted or re-created topic leaves the registry (no adoption, no old id),
    # written or not; a partition moved away leaves its topic registered.
    assert set(logs.topics()) == {"kept", "moved"}
    # The strays' high watermarks are forgotten: a new incarnation starts afresh.
    assert HighWatermarkCheckpoint(checkpoint.path).read() == {("kept", 0): 3}
    assert len(logs.stray_dirs()) == 3
    worker = node._delete_strays_in_background()
    assert worker is not None
    worker.join(10.0)
    assert logs.stray_dirs() == []
    store.close()
    logs.close()


def test_nothing_is_touched_when_the_metadata_cannot_be_read(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    logs.create_topic("t", 1)
    _write(logs, "t", 0)
    tree = FakeZooKeeper()
    store = InMemoryClusterStore(tree)
    store.start(1.0)
    tree.available = False
    node = _cluster_member(logs, tmp_path, store)
    assert node._move_stray_replicas() == []
    assert (tmp_path / "t-0").is_dir() and "t" in logs.topics()
    tree.available = True
    store.close()
    logs.close()


def test_a_cluster_of_one_adopts_its_topics_and_replaces_a_re_created_ones_copy(
    tmp_path: Path,
) -> None:
    """An old data directory's topics join the metadata; a topic the metadata holds
    under another id gets a fresh copy, not the old data."""
    logs = _logs(tmp_path)
    logs.create_topic("old", 1)  # never recorded in the metadata: adopted
    _write(logs, "old", 0)
    stale = logs.create_topic("again", 1)
    _write(logs, "again", 0, n=5)
    (tmp_path / "ghost-0").mkdir()  # a deletion's leftover, in no registry
    store = LocalClusterStore.in_dir(tmp_path)
    store.start(1.0)
    fresh_id = uuid.uuid4()
    store.create_topic("again", fresh_id, {0: [0]}, {})  # deleted and re-created meanwhile
    store.close()

    async def run() -> None:
        async with cluster_of_one(logs, tmp_path) as node:
            if node.stray_deleter is not None:
                node.stray_deleter.join(10.0)
            assert node.view.topics["old"].topic_id == logs.topics()["old"].topic_id
            assert logs.topics()["again"].topic_id == fresh_id != stale.topic_id
            plog = node.replicas.leader_log("again", 0)
            assert not isinstance(plog, int)
            assert plog.log_end_offset == 0  # a fresh copy, not the old five records
            old = node.replicas.leader_log("old", 0)
            assert not isinstance(old, int) and old.log_end_offset == 3

    asyncio.run(run())
    assert not (tmp_path / "ghost-0").exists()
    assert logs.stray_dirs() == []
    logs.close()
