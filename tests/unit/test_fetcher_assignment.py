"""Which replica fetcher follows a partition, the resize plan and the resize itself."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from headwater.cluster.cluster_view import ClusterView
from headwater.cluster.fetcher_assignment import (
    check_thread_count_change,
    fetcher_index,
    java_string_hash,
    resize_plan,
)
from headwater.cluster.replica_manager import ReplicaManager, ReplicationConfig
from headwater.cluster.store import PartitionState, PartitionStateWrite
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory
from headwater.testing import FakeZooKeeper
from tests.unit.test_replica_manager_faults import eventually, started


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("é") == 233  # one UTF-16 code unit
    assert java_string_hash("polygenelubricants") == -(2**31)  # wraps to Integer.MIN_VALUE


def test_fetcher_index_is_kafkas_formula() -> None:
    # abs(31 * hashCode + partition) % n, with Kafka's Utils.abs(MIN_VALUE) == 0
    # 31 * 99162322 + 5 wraps to -1220935309 in a Java int
    assert fetcher_index("hello", 5, 7) == 1220935309 % 7
    assert fetcher_index("polygenelubricants", 0, 3) == 0
    assert fetcher_index("anything", 3, 1) == 0
    # consecutive partitions of a topic go to consecutive fetchers
    assert {fetcher_index("t", p, 3) for p in range(3)} == {0, 1, 2}


def test_resize_plan_moves_only_partitions_whose_fetcher_changes() -> None:
    keys = [(t, p) for t in ("a", "orders") for p in range(8)]
    at_one = {key: (7, 0) for key in keys}  # all on leader 7's only fetcher
    plan = resize_plan(at_one, 3)
    assert plan == {k: (7, fetcher_index(*k, 3)) for k in keys if fetcher_index(*k, 3) != 0}
    at_three = {**at_one, **plan}
    assert resize_plan(at_three, 3) == {}
    assert resize_plan(at_three, 1) == {k: (7, 0) for k in plan}


@pytest.mark.parametrize(
    ("current", "new", "error"),
    [
        (1, 1, None),
        (1, 2, None),
        (2, 3, None),
        (3, 1, None),  # Kafka's integer half: 3 / 2 == 1
        (1, 3, "should not be greater than double the current value 1"),
        (4, 1, "should be at least half the current value 4"),
        (1, 0, "should be at least 1"),
        (2, -1, "should be at least 1"),
    ],
)
def test_thread_count_change_is_kafkas_rule(current: int, new: int, error: str | None) -> None:
    if error is None:
        check_thread_count_change("num.replica.fetchers", current, new)
    else:
        with pytest.raises(ValueError, match=error):
            check_thread_count_change("num.replica.fetchers", current, new)


def test_resize_rehomes_followed_partitions_and_stops_empty_fetchers(tmp_path: Path) -> None:
    """Broker 1 follows 9 partitions led by broker 2 (nothing listens there: the
    fetchers only retry); each resize puts every partition on Kafka's fetcher."""

    async def run() -> None:
        zk = FakeZooKeeper()
        admin = started(zk)
        fence = admin.try_become_controller(9)
        assert fence is not None
        admin.create_topic("t", uuid.uuid4(), {p: [2, 1] for p in range(9)}, {})
        admin.write_partition_states(
            fence,
            [PartitionStateWrite("t", p, PartitionState(2, 0, (2, 1), 1), None) for p in range(9)],
        )
        store = started(zk, 1)
        started(zk, 2)
        view = ClusterView(store)
        await view.start()
        logs = LogDirectory(tmp_path / "data", LogConfig())
        logs.open()
        replicas = ReplicaManager(1, logs, view, store, ReplicationConfig(), data_dir=tmp_path)
        await replicas.start()
        try:

            def placed() -> dict[tuple[str, int], tuple[int, int]]:
                return {k: fk for fk, f in replicas.fetchers.items() for k in f.partitions}

            assert await eventually(lambda: len(placed()) == 9)
            assert set(replicas.fetchers) == {(2, 0)}
            followed = {k: replicas.replicas[k] for k in placed()}
            for count in (2, 3, 1):
                replicas.resize_fetchers(count)
                assert placed() == {("t", p): (2, fetcher_index("t", p, count)) for p in range(9)}
                assert set(replicas.fetchers) == {(2, i) for i in range(count)}
                for fk, fetcher in replicas.fetchers.items():  # the same replicas, fetching
                    assert all(fetcher.partitions[k] is followed[k] for k in fetcher.partitions)
                    assert fetcher._task is not None and not fetcher._task.done(), fk
            await asyncio.sleep(0)
        finally:
            await replicas.stop()
            view.stop()
            logs.close()

    asyncio.run(run())
