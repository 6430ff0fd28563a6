"""A single broker's partition layer without sockets: the cluster of one a unit
test drives (controller, view and replica manager on the in-process metadata)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from headwater.cluster.node import ClusterNode, ControllerConfig
from headwater.cluster.replica_manager import ReplicationConfig
from headwater.log.log_directory import LogDirectory


@asynccontextmanager
async def cluster_of_one(
    logs: LogDirectory,
    data_dir: Path,
    *,
    broker_id: int = 0,
    replication: ReplicationConfig | None = None,
) -> AsyncIterator[ClusterNode]:
    """Join ``logs`` (already open; its topics are adopted) as a cluster of one,
    with every role taken, and leave at the end."""
    node = ClusterNode(
        broker_id,
        "",
        logs,
        data_dir,
        session_timeout_ms=6_000,
        connect_timeout_ms=6_000,
        replication=replication or ReplicationConfig(),
        controller=ControllerConfig(),
    )
    await node.start("127.0.0.1", 9092)
    try:
        await node.replicas.start()
        await node.leading_everything(10.0)
        yield node
    finally:
        await node.stop()
