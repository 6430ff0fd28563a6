"""``meta.properties``: a data directory of another cluster or broker is refused at start
(Kafka's InconsistentClusterIdException / InconsistentBrokerIdException), before stray
replica detection could take every local copy for a stray."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from headwater.cluster.node import ClusterNode, ClusterStartError, ControllerConfig
from headwater.cluster.replica_manager import ReplicationConfig
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory
from headwater.log.meta_properties import (
    META_PROPERTIES_FILE,
    MetaProperties,
    MetaPropertiesError,
    format_meta_properties,
    inconsistency,
    parse_meta_properties,
    read_meta_properties,
    write_meta_properties,
)
from headwater.testing.cluster_of_one import cluster_of_one
from headwater.testing.fake_zookeeper import FakeZooKeeper
from headwater.testing.in_memory_store import InMemoryClusterStore


def test_kafkas_file_reads_and_ours_round_trips(tmp_path: Path) -> None:
    kafkas = "#\n#Thu Nov 26 01:00:00 UTC 2026\ncluster.id=AbC-123_x\nversion=0\nbroker.id=3\n"
    assert parse_meta_properties(kafkas) == MetaProperties(3, "AbC-123_x")
    meta = MetaProperties(7, "q1w2e3")
    assert parse_meta_properties(format_meta_properties(meta)) == meta
    assert read_meta_properties(tmp_path) is None
    write_meta_properties(tmp_path, meta)
    assert read_meta_properties(tmp_path) == meta


@pytest.mark.parametrize(
    "text", ["version=1\nbroker.id=1\ncluster.id=c\n", "version=0\ncluster.id=c\n",
             "version=0\nbroker.id=x\ncluster.id=c\n", "no equals sign\n"],
)  # fmt: skip
def test_a_malformed_file_is_a_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text(text)
    with pytest.raises(MetaPropertiesError, match=META_PROPERTIES_FILE):
        read_meta_properties(tmp_path)


def test_inconsistency_names_what_differs() -> None:
    stored = MetaProperties(1, "A")
    assert inconsistency(stored, 1, "A") is None
    assert inconsistency(stored, 1, None) is None
    wrong_cluster = inconsistency(stored, 1, "B")
    assert wrong_cluster is not None and "wrong cluster" in wrong_cluster
    wrong_broker = inconsistency(stored, 2, "A")
    assert wrong_broker is not None and "broker.id 2" in wrong_broker and "1" in wrong_broker


def _logs(path: Path) -> LogDirectory:
    logs = LogDirectory(path, LogConfig())
    logs.open()
    return logs


def _member(logs: LogDirectory, data_dir: Path, store: InMemoryClusterStore) -> ClusterNode:
    node = ClusterNode(
        1, "127.0.0.1:2181", logs, data_dir, session_timeout_ms=6_000, connect_timeout_ms=6_000,
        replication=ReplicationConfig(), controller=ControllerConfig(),
    )  # fmt: skip
    node.store = store
    return node


def test_a_cluster_member_refuses_another_clusters_data_directory(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    first = InMemoryClusterStore(FakeZooKeeper())
    first.start()
    _member(logs, tmp_path, first)._check_data_dir_identity()  # writes the file
    stored = read_meta_properties(tmp_path)
    assert stored is not None and stored.broker_id == 1
    _member(logs, tmp_path, first)._check_data_dir_identity()  # the same cluster: fine
    other = InMemoryClusterStore(FakeZooKeeper())  # e.g. another chroot: a new cluster id
    other.start()
    with pytest.raises(ClusterStartError, match="wrong cluster"):
        _member(logs, tmp_path, other)._check_data_dir_identity()
    first.close()
    other.close()
    logs.close()


def test_a_single_broker_restarted_with_another_broker_id_refuses_and_keeps_its_data(
    tmp_path: Path,
) -> None:
    logs = _logs(tmp_path)
    logs.create_topic("t", 1)

    async def run(broker_id: int) -> None:
        async with cluster_of_one(logs, tmp_path, broker_id=broker_id):
            pass

    asyncio.run(run(0))
    with pytest.raises(ClusterStartError, match=r"broker\.id 1 does not match 0"):
        asyncio.run(run(1))
    assert "t" in logs.topics()
    asyncio.run(run(0))  # and the right id still starts
    logs.close()
