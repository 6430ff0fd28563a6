"""Cluster mode (``zookeeper.connect``): ZooKeeper state, controller, replication.

Nothing here is imported by the single-broker path: without ``zookeeper.connect``
Headwater runs exactly as before.
"""
