"""Cluster mode (``zookeeper.connect``): ZooKeeper state, controller, replication.

Nothing here is imported by the single-broker path: without ``zookeeper.connect``
Headwater runs exactly as before.

Wiring in a broker (blocking calls go through ``loop.run_in_executor``)::

    store = ZkClusterStore(zookeeper_connect, session_timeout_ms=...)   # store.py
    store.start(timeout)                       # ClusterStoreUnavailableError: retry/exit
    store.register_broker(BrokerRegistration(broker_id, host, port, rack), wait_s=...)
    cluster_id = store.cluster_id(proposed)
    controller = Controller(store, broker_id, unclean_leader_election_enable=...)
    controller.start()                          # controller.py, runs on its own thread
    view = ClusterView(store); await view.start()  # cluster_view.py, on the loop
    view.on_change(listener); view.on_session(listener)
    ...
    view.stop(); controller.stop(); store.close()   # at shutdown, in this order

Topic administration from any broker: ``controller.create_topic``,
``controller.add_partitions``, ``store.delete_topic``, ``store.set_topic_configs``.
Leaders change their ISR with ``store.update_partition_state`` (compare-and-set).
Unit tests use ``headwater.testing.InMemoryClusterStore`` (the same store on an in-memory
ZooKeeper).
"""
