"""ListOffsets and OffsetForLeaderEpoch: where a consumer may start reading.

A single broker has one leader epoch, 0, for every partition; it answers
OffsetForLeaderEpoch so librdkafka's KIP-320 position validation succeeds.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.fetch.planner import LEADER_EPOCH, leader_epoch_error
from headwater.log.log_directory import LogDirectory
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType

LATEST = -1
EARLIEST = -2


class OffsetApis:
    def __init__(self, logs: LogDirectory) -> None:
        self.logs = logs

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
                    "leader_epoch": LEADER_EPOCH,
                }
                if not allowed:
                    out["error_code"] = int(E.topic_authorization_failed)
                    parts.append(out)
                    continue
                log = self.logs.existing_log(t.name, p.partition_index)
                if log is None:
                    out["error_code"] = int(E.unknown_topic_or_partition)
                    parts.append(out)
                    continue
                error = leader_epoch_error(getattr(p, "current_leader_epoch", -1))
                if error:
                    out["error_code"] = error
                    parts.append(out)
                    continue
                ts = p.timestamp
                if ts == LATEST:
                    out["offset"] = log.last_stable_offset if read_committed else log.high_watermark
                elif ts == EARLIEST:
                    out["offset"] = log.log_start_offset
                elif ts >= 0:
                    found = log.offset_for_timestamp(ts)
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
                log = self.logs.existing_log(t.topic, p.partition)
                if not allowed:
                    out["error_code"] = int(E.topic_authorization_failed)
                elif log is None:
                    out["error_code"] = int(E.unknown_topic_or_partition)
                elif error := leader_epoch_error(getattr(p, "current_leader_epoch", -1)):
                    out["error_code"] = error
                elif p.leader_epoch <= LEADER_EPOCH:
                    out["leader_epoch"] = LEADER_EPOCH
                    out["end_offset"] = log.log_end_offset
                parts.append(out)
            topics.append({"topic": t.topic, "partitions": parts})
        return {"topics": topics}
