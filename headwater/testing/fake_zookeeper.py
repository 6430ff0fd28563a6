"""The in-memory ZooKeeper the unit tests drive: the production in-process tree
(``headwater.cluster.local_zookeeper``) without a snapshot file, with watches
fired synchronously in the thread that made the change.

Why: ``InMemoryClusterStore`` is ``ZkClusterStore`` running on this tree, so the
unit tests exercise the same store code (paths, JSON, compare-and-set,
transactions, ephemerals, watches) as production, and a single broker (a
cluster of one) runs on the same tree; the stores cannot drift apart.
Synchronous watches keep the unit tests deterministic.
"""

from __future__ import annotations

from headwater.cluster.local_zookeeper import CompletedResult as FakeAsyncResult
from headwater.cluster.local_zookeeper import LocalKazooClient as FakeKazooClient
from headwater.cluster.local_zookeeper import LocalZooKeeper as FakeZooKeeper

__all__ = ["FakeAsyncResult", "FakeKazooClient", "FakeZooKeeper"]
