"""Test doubles: kept out of the production import graph (nothing in ``headwater`` imports them).

``FakeZooKeeper`` is an in-memory ZooKeeper that kazoo's client API runs on;
``InMemoryClusterStore`` is the production ``ZkClusterStore`` on top of it.
"""

from headwater.testing.fake_zookeeper import FakeKazooClient, FakeZooKeeper
from headwater.testing.in_memory_store import InMemoryClusterStore

__all__ = ["FakeKazooClient", "FakeZooKeeper", "InMemoryClusterStore"]
