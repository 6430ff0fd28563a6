"""ListOffsets and OffsetForLeaderEpoch: where a consumer may start reading.

Both answer only on the partition's leader and check the client's leader
epoch (KIP-320). OffsetForLeaderEpoch answers from the log's leader-epoch
history: after a leader change, kafka-python and librdkafka ask where the
epoch of their position ended on the new leader, and truncate their
position if the new leader's log is shorter. A single broker keeps epoch 0.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.cluster.replica_manager import ReplicaManager
from headwater.fetch.planner import leader_epoch_error
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # v7, KIP-734: the record with the largest timestamp
EARLIEST_LOCAL = -4  # v8, KIP-405: no tiered storage here, so the log start


class OffsetApis:
    def __init__(self, replication: ReplicaManager) -> None:
        self.replication = replication

    def _leader_log(self, topic: str, partition: int) -> Log | int:
        return self.replication.leader_log(topic, partition)

    def list_offsets(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        read_committed = getattr(req, "isolation_level", 0) == 1
        may_describe = ctx.topic_check(AclOperation.DESCRIBE)
        topics = []
        for t in req.topics:
            parts = []
            allowed = may_describe(t.name)
            for p in t.partitions:
                out: dict[str, Any] = {
                    "partition_index": p.partition_index,
                    "error_code": 0,
                    "timestamp": -1,
                    "offset": -1,
                    "leader_epoch": -1,
                }
                if not allowed:
                    out["error_code"] = int(E.topic_authorization_failed)
                    parts.append(out)
                    continue
                log = self._leader_log(t.name, p.partition_index)
                if isinstance(log, int):
                    out["error_code"] = log
                    parts.append(out)
                    continue
                out["leader_epoch"] = log.partition_leader_epoch
                error = leader_epoch_error(
                    getattr(p, "current_leader_epoch", -1), log.partition_leader_epoch
                )
                if error:
                    out["error_code"] = error
                    parts.append(out)
                    continue
                ts = p.timestamp
                if ts == LATEST:
                    out["offset"] = log.last_stable_offset if read_committed else log.high_watermark
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    out["offset"] = log.log_start_offset
                elif ts == MAX_TIMESTAMP:
                    newest = max((s.max_timestamp for s in log.segments), default=-1)
                    found = log.offset_for_timestamp(newest) if newest >= 0 else None
                    if found is not None:
                        out["offset"], out["timestamp"] = found
                elif ts >= 0:
                    found = log.offset_for_timestamp(
                        ts, Isolation.TXN_COMMITTED if read_committed else Isolation.HIGH_WATERMARK
                    )
                    if found is not None:
                        out["offset"], out["timestamp"] = found
                else:
                    out["error_code"] = int(E.invalid_request)
                parts.append(out)
            topics.append({"name": t.name, "partitions": parts})
        return {"topics": topics}

    def offset_for_leader_epoch(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        # Followers need CLUSTER_ACTION, consumers DESCRIBE on each topic.
        follower = getattr(req, "replica_id", -1) >= 0
        may_describe = ctx.topic_check(AclOperation.DESCRIBE)
        cluster_action = follower and ctx.authorize(
            AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
        )
        topics = []
        for t in req.topics:
            parts = []
            allowed = cluster_action if follower else may_describe(t.topic)
            for p in t.partitions:
                out: dict[str, Any] = {
                    "error_code": 0,
                    "partition": p.partition,
                    "leader_epoch": -1,
                    "end_offset": -1,
                }
                log = self._leader_log(t.topic, p.partition)
                if not allowed:
                    out["error_code"] = int(E.topic_authorization_failed)
                elif isinstance(log, int):
                    out["error_code"] = log
                elif error := leader_epoch_error(
                    getattr(p, "current_leader_epoch", -1), log.partition_leader_epoch
                ):
                    out["error_code"] = error
                else:
                    out["leader_epoch"], out["end_offset"] = log.end_offset_for_epoch(
                        p.leader_epoch
                    )
                parts.append(out)
            topics.append({"topic": t.topic, "partitions": parts})
        return {"topics": topics}
