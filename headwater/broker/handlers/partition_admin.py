"""DeleteRecords and DescribeProducers: administration of one partition's log, on its leader.

DeleteRecords (API 21) moves the log start offset forward (``Log.delete_records``),
which followers copy from the ``log_start_offset`` of their fetch responses, as
in Kafka. An offset of -1 means the high watermark; past it the answer is
OFFSET_OUT_OF_RANGE. The answer waits, as Kafka's DelayedDeleteRecords does,
until the low watermark (the smallest log start offset over the live replicas)
reaches the new offset, and carries it as ``low_watermark``.

DescribeProducers (API 61, KIP-664) lists the producer ids a partition remembers,
which ``kafka-transactions.sh find-hanging`` uses to find open transactions.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.cluster.replica_manager import ReplicaManager
from headwater.log.errors import KafkaApiError
from headwater.log.log import Log
from headwater.security.acl import AclOperation

HIGH_WATERMARK = -1  # DeleteRecords: "delete everything before the high watermark"


class PartitionAdminApis:
    def __init__(self, replication: ReplicaManager) -> None:
        self.replication = replication

    def _leader_log(self, topic: str, partition: int) -> Log | int:
        return self.replication.leader_log(topic, partition)

    async def delete_records(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        """Kafka's rule: the answer waits until every live replica's log start reached
        the new offset (the low watermark), or ``timeout_ms`` (REQUEST_TIMED_OUT)."""
        may_delete = ctx.topic_check(AclOperation.DELETE)
        topics = []
        waits: list[tuple[dict[str, Any], str, int, int]] = []
        for t in req.topics:
            allowed = may_delete(t.name)
            parts = []
            for p in t.partitions:
                low, error = -1, 0
                log = self._leader_log(t.name, p.partition_index) if allowed else 0
                if not allowed:
                    error = int(E.topic_authorization_failed)
                elif isinstance(log, int):
                    error = log
                else:
                    offset = log.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                    try:
                        low = log.delete_records(offset)
                    except KafkaApiError as exc:
                        error = exc.kafka_error_code
                part = {"partition_index": p.partition_index, "low_watermark": low,
                        "error_code": error}  # fmt: skip
                parts.append(part)
                if not error:
                    waits.append((part, t.name, p.partition_index, low))
            topics.append({"name": t.name, "partitions": parts})
        timeout_s = max(getattr(req, "timeout_ms", 30_000), 0) / 1000
        codes = await asyncio.gather(
            *(self.replication.wait_low_watermark(t, p, low, timeout_s) for _, t, p, low in waits)
        )
        for (part, topic, partition, _), code in zip(waits, codes, strict=True):
            part["error_code"] = int(code)
            part["low_watermark"] = (
                self.replication.low_watermark(topic, partition) if not code else -1
            )
        return {"topics": topics}

    def describe_producers(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        may_read = ctx.topic_check(AclOperation.READ)
        topics = []
        for t in req.topics:
            allowed = may_read(t.name)
            parts = []
            for index in t.partition_indexes:
                out: dict[str, Any] = {
                    "partition_index": index, "error_code": 0, "error_message": None,
                    "active_producers": [],
                }  # fmt: skip
                log = self._leader_log(t.name, index) if allowed else 0
                if not allowed:
                    out["error_code"] = int(E.topic_authorization_failed)
                elif isinstance(log, int):
                    out["error_code"] = log
                else:
                    out["active_producers"] = [
                        {
                            "producer_id": pid,
                            "producer_epoch": entry.epoch,
                            "last_sequence": entry.last_seq,
                            "last_timestamp": entry.last_append_ms if entry.last_append_ms else -1,
                            "coordinator_epoch": entry.coordinator_epoch,
                            "current_txn_start_offset": entry.current_txn_first_offset,
                        }
                        for pid, entry in sorted(log.producers().items())
                    ]
                parts.append(out)
            topics.append({"name": t.name, "partitions": parts})
        return {"topics": topics}
