"""The gauges a scrape reads from the partition layer: partition health, the
controller, and consumer lag (committed offsets against high watermarks)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial

from headwater.broker.metrics import BrokerMetrics, PartitionHealth
from headwater.cluster.node import ClusterNode
from headwater.group.service import GroupService
from headwater.log.log_directory import LogDirectory


def bind_broker_gauges(
    metrics: BrokerMetrics, logs: LogDirectory, cluster: ClusterNode, groups: GroupService
) -> None:
    """The gauges read at scrape time: partition states, controller, consumer lag;
    and the broker's id and rack."""
    m = metrics
    m.bind_broker_info(cluster.broker_id, cluster.rack)
    m.topics.existing = lambda: tuple(logs.topics())
    replicas, view = cluster.replicas, cluster.view

    def health() -> Iterator[PartitionHealth]:
        for p in tuple(replicas.replicas.values()):
            if p.is_leader:
                min_isr = replicas.min_insync_replicas(p.topic)
                yield PartitionHealth(len(p.isr), len(p.replicas), min_isr)

    def offline() -> int:
        live = view.brokers
        states = tuple(view.partition_states.values())
        return sum(1 for s in states if s.leader < 0 or s.leader not in live)

    def replica_end_offset(topic: str, partition: int) -> int | None:
        replica = replicas.replicas.get((topic, partition))
        return None if replica is None else replica.log.high_watermark

    m.bind_partition_states(health)
    m.bind_log_dirs(logs.dir_statuses)
    m.bind_controller(lambda: cluster.controller.is_active, offline)
    end_offset = replica_end_offset
    m.bind_consumer_lag(asyncio.get_running_loop(), partial(_committed_offsets, groups), end_offset)


def _committed_offsets(groups: GroupService) -> Iterator[tuple[str, str, int, int]]:
    """(group, topic, partition, offset) of every group coordinated here."""
    for coordinator in groups.shards.coordinators():
        store = coordinator.offsets
        for group in store.group_ids():
            for topic, partition, committed in store.fetch(group, None):
                if committed is not None:
                    yield group, topic, partition, committed.offset
