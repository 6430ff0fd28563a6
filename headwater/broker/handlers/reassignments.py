"""AlterPartitionReassignments and ListPartitionReassignments (APIs 45, 46; KIP-455).

As in Kafka's ZooKeeper mode the controller runs moves, and a reassignment in
flight lives in the topic's znode (``adding_replicas``/``removing_replicas``).
The broker that receives an Alter request leaves it for the controller in
``/admin/reassign_requests`` and answers with the controller's per-partition
results; List answers from this broker's view of the topic znodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.cluster.cluster_view import ClusterView
from headwater.cluster.store import ClusterStore, ClusterStoreError
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType

POLL_S = 0.02
CONTROLLER_WAIT_S = 30.0

Key = tuple[str, int]


class ReassignmentApis:
    def __init__(self, store: ClusterStore, view: ClusterView) -> None:
        self.store = store
        self.view = view

    async def alter_partition_reassignments(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        targets: dict[Key, list[int] | None] = {
            (t.name, int(p.partition_index)): (
                None if p.replicas is None else [int(b) for b in p.replicas]
            )
            for t in req.topics
            for p in t.partitions
        }
        if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            code = int(E.cluster_authorization_failed)
            return _alter_response(code, "ALTER on the cluster is required", {})
        loop = asyncio.get_running_loop()
        try:
            name = await loop.run_in_executor(None, self.store.request_reassignments, targets)
        except ClusterStoreError as exc:
            return _alter_response(int(E.request_timed_out), str(exc), {})
        deadline = time.monotonic() + CONTROLLER_WAIT_S
        results: dict[Key, tuple[int, str | None]] | None = None
        try:
            while results is None and time.monotonic() < deadline:
                request = await loop.run_in_executor(None, self.store.reassignment_request, name)
                results = request[1] if request is not None else None
                if results is None:
                    await asyncio.sleep(POLL_S)
        finally:
            with contextlib.suppress(ClusterStoreError):
                await loop.run_in_executor(None, self.store.forget_reassignment_request, name)
        if results is None:
            return _alter_response(int(E.request_timed_out), "the controller did not answer", {})
        return _alter_response(0, None, results)

    def list_partition_reassignments(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            code = int(E.cluster_authorization_failed)
            message = "DESCRIBE on the cluster is required"
            return {"throttle_time": 0, "error_code": code, "error_message": message, "topics": []}
        wanted: dict[str, set[int] | None]
        if req.topics is None:
            wanted = dict.fromkeys(self.view.topics)
        else:
            wanted = {t.name: {int(p) for p in t.partition_indexes} for t in req.topics}
        topics = []
        for name, partitions in sorted(wanted.items()):
            topic = self.view.topics.get(name)
            if topic is None:
                continue
            moving = sorted(
                p
                for p in {*topic.adding, *topic.removing}
                if (topic.adding.get(p) or topic.removing.get(p))
                and (partitions is None or p in partitions)
            )
            if moving:
                topics.append({"name": name, "partitions": [
                    {"partition_index": p, "replicas": topic.replicas.get(p, []),
                     "adding_replicas": topic.adding.get(p, []),
                     "removing_replicas": topic.removing.get(p, [])}
                    for p in moving
                ]})  # fmt: skip
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": topics}


def _alter_response(
    error_code: int, message: str | None, results: dict[Key, tuple[int, str | None]]
) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (code, text) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "error_code": code, "error_message": text}
        )
    return {
        "throttle_time": 0,
        "error_code": error_code,
        "error_message": message,
        "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
