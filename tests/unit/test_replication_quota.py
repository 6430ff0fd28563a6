"""KIP-73 throttled-replica lists and budgets."""

from __future__ import annotations

import pytest

from headwater.cluster.replication_quota import (
    ReplicationQuota,
    ReplicationQuotaConfig,
    ReplicationThrottles,
    throttled_partitions,
    validate_throttled_replicas,
)


def test_lists_name_partitions_per_broker() -> None:
    assert throttled_partitions("0:1,1:2, 2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions(" * ", 3) is None
    for bad in ("0", "a:1", "0:b", "0:1;1:2"):
        with pytest.raises(ValueError, match="partition:broker"):
            validate_throttled_replicas(bad)


def test_only_listed_replicas_of_a_side_with_a_rate_are_throttled() -> None:
    configs = {
        "t": {
            "leader.replication.throttled.replicas": "0:7",
            "follower.replication.throttled.replicas": "*",
        },
        "bad": {"leader.replication.throttled.replicas": "nonsense"},
    }
    t = ReplicationThrottles(
        7, lambda name: configs.get(name, {}), ReplicationQuotaConfig(leader_rate=100)
    )
    assert t.leader_throttled("t", 0) and not t.leader_throttled("t", 1)
    assert not t.leader_throttled("bad", 0) and not t.leader_throttled("other", 0)
    # No follower rate: nothing is throttled on that side whatever the topic says.
    assert not t.follower_throttled("t", 0)


def test_budget_is_a_windowed_rate() -> None:
    q = ReplicationQuota(1000, window_ms=1000, samples=2)
    q.record(500, 0)
    assert not q.exceeded(10)
    q.record(1000, 20)
    assert q.exceeded(30)  # 1500 B over the 1 s minimum window
    assert not q.exceeded(5000)  # the samples expired
    assert not ReplicationQuota(None, 1000, 2).exceeded(0)
