"""ElectLeaders (API 43, KIP-460): preferred or unclean leader elections on request.

Kafka's brokers forward the request to the controller; here the broker that
receives it leaves it in ZooKeeper (``/admin/elect_leaders``), where the
controller decides each partition and writes the results back, and answers
once the results are in and its own view shows the new leaders (or the
request's timeout passes: REQUEST_TIMED_OUT).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.cluster.cluster_view import ClusterView
from headwater.cluster.controller import PREFERRED
from headwater.cluster.store import ClusterStore, ClusterStoreError
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType

POLL_S = 0.02
CONTROLLER_WAIT_S = 10.0
_MESSAGES = {
    int(E.election_not_needed): "Leader election not needed for topic partition",
    int(E.preferred_leader_not_available): "The preferred leader is not available",
    int(E.eligible_leaders_not_available): "No replica is eligible to lead the partition",
    int(E.unknown_topic_or_partition): "This server does not host this topic-partition",
    int(E.request_timed_out): "The controller did not answer in time",
}


class ElectLeadersApi:
    def __init__(self, store: ClusterStore, view: ClusterView) -> None:
        self.store = store
        self.view = view

    async def elect_leaders(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        election_type = int(getattr(req, "election_type", PREFERRED))
        partitions = (
            None
            if req.topic_partitions is None
            else [(t.topic, int(p)) for t in req.topic_partitions for p in t.partitions]
        )
        if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            code = int(E.cluster_authorization_failed)
            return _response(code, dict.fromkeys(partitions or [], code))
        # The timeout bounds the wait for the new leaders to show (Kafka's
        # DelayedElectLeader; 0: answer as soon as the controller decided); the
        # controller's decision itself gets at least CONTROLLER_WAIT_S.
        timeout_s = max(_millis(req.timeout), 0) / 1000
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + max(timeout_s, CONTROLLER_WAIT_S)
        try:
            name = await loop.run_in_executor(
                None, self.store.request_leader_election, election_type, partitions
            )
        except ClusterStoreError:
            code = int(E.request_timed_out)
            return _response(0, dict.fromkeys(partitions or [], code))
        results: dict[tuple[str, int], int] | None = None
        try:
            while results is None and time.monotonic() < deadline:
                request = await loop.run_in_executor(None, self.store.leader_election_request, name)
                results = request[2] if request is not None else None
                if results is None:
                    await asyncio.sleep(POLL_S)
        finally:
            await loop.run_in_executor(None, self._forget, name)
        if results is None:
            code = int(E.request_timed_out)
            return _response(0, dict.fromkeys(partitions or [], code))
        # Answer once this broker's own metadata shows the new leaders (as Kafka's
        # DelayedElectLeader waits for its metadata cache).
        elected = [k for k, code in results.items() if code == 0]
        deadline = time.monotonic() + timeout_s
        while elected and time.monotonic() < deadline and not self._applied(elected):
            await asyncio.sleep(POLL_S)
        return _response(0, results)

    def _applied(self, keys: list[tuple[str, int]]) -> bool:
        states = self.view.partition_states
        return all(k in states and states[k].leader >= 0 for k in keys)

    def _forget(self, name: str) -> None:
        with contextlib.suppress(ClusterStoreError):
            self.store.forget_leader_election(name)


def _millis(value: Any) -> int:
    seconds = getattr(value, "total_seconds", None)
    return int(seconds() * 1000) if seconds is not None else int(value)


def _response(error_code: int, results: dict[tuple[str, int], int]) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": code, "error_message": _MESSAGES.get(code)}
        )
    return {
        "throttle_time": 0,
        "error_code": error_code,
        "replica_election_results": [
            {"topic": t, "partition_result": ps} for t, ps in by_topic.items()
        ],
    }
