"""Produce: append record batches to partition logs.

The appends are synchronous on purpose: the connection applies a Produce
before it reads the next frame, so an idempotent producer's in-flight
batches reach the log in the order they were sent. Appends notify the
partition's listeners, which wakes parked fetches (the purgatory).

In a cluster only the leader appends, and ``acks=all`` is answered once the
ISR has the batch: the handler then returns an awaitable that waits in the
produce purgatory (the append itself has already happened, in order).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.broker.handlers.admin import AdminApis
from headwater.broker.metrics import BrokerMetrics
from headwater.cluster.produce_purgatory import await_acks
from headwater.cluster.replica_manager import ReplicaManager
from headwater.log.errors import KafkaApiError
from headwater.log.log_directory import LogDirectory
from headwater.protocol.produce_codec import (
    ProducePartitionResponse,
    ProduceResponseData,
    ProduceTopicResponse,
    decode_produce_request,
    encode_produce_response,
)

log = logging.getLogger(__name__)


class ProduceApi:
    def __init__(
        self,
        logs: LogDirectory,
        admin: AdminApis,
        metrics: BrokerMetrics,
        replication: ReplicaManager | None = None,
    ) -> None:
        self.logs = logs
        self.admin = admin
        self.metrics = metrics
        self.replication = replication

    def handle(
        self, ctx: RequestContext, frame: memoryview, offset: int
    ) -> bytes | Awaitable[bytes | None] | None:
        version = ctx.header.api_version
        req = decode_produce_request(frame, offset, version)
        now_ms = int(time.time() * 1000)
        topics: list[ProduceTopicResponse] = []
        acks_ok = req.acks in (-1, 0, 1)
        replication = self.replication
        waits: dict[tuple[str, int], tuple[ProducePartitionResponse, asyncio.Future[int]]] = {}
        for topic in req.topics:
            info = self.admin.ensure_topic(topic.name) if acks_ok else None
            parts: list[ProducePartitionResponse] = []
            for index, records in topic.partitions:
                out = ProducePartitionResponse(index=index)
                parts.append(out)
                if not acks_ok:
                    out.error_code = int(E.invalid_required_acks)
                    continue
                if info is None or not 0 <= index < info.num_partitions:
                    out.error_code = int(E.unknown_topic_or_partition)
                    continue
                if records is None or len(records) == 0:
                    out.error_code = int(E.invalid_record)
                    out.error_message = "produce request carried no records"
                    continue
                replica = None
                if replication is not None:
                    error = replication.serving_error(topic.name, index)
                    replica = replication.replica(topic.name, index)
                    if error or replica is None:
                        out.error_code = error or int(E.not_leader_or_follower)
                        continue
                    if req.acks == -1 and not replication.enough_isr(replica):
                        # Kafka refuses before appending: the write could not be as
                        # safe as the producer asked.
                        out.error_code = int(E.not_enough_replicas)
                        out.error_message = (
                            f"ISR {list(replica.isr)} is smaller than min.insync.replicas="
                            f"{replication.min_insync_replicas(topic.name)}"
                        )
                        continue
                plog = self.logs.log(topic.name, index)
                try:
                    result = plog.append(records, now_ms)
                except KafkaApiError as exc:
                    out.error_code = int(exc.kafka_error_code)
                    out.error_message = str(exc)
                    log.info("produce to %s-%d rejected: %s", topic.name, index, exc)
                    continue
                out.base_offset = result.base_offset
                out.log_append_time_ms = result.log_append_time_ms
                out.log_start_offset = result.log_start_offset
                if not result.duplicate:
                    self.metrics.bytes_in.inc(len(records))
                # The replica manager saw the append through the log's listener;
                # acks=all waits until the ISR has it.
                if (
                    replication is not None
                    and req.acks == -1
                    and plog.high_watermark <= result.last_offset
                ):
                    key = (topic.name, index)
                    future = replication.purgatory.wait(key, result.last_offset + 1)
                    waits[key] = (out, future)
            topics.append(ProduceTopicResponse(name=topic.name, partitions=parts))
        if req.acks == 0:
            return None
        response = ProduceResponseData(topics=topics)
        if not waits or replication is None:
            return encode_produce_response(response, version)
        return self._acknowledge(replication, response, waits, req.timeout_ms, version)

    async def _acknowledge(
        self,
        replication: ReplicaManager,
        response: ProduceResponseData,
        waits: dict[tuple[str, int], tuple[ProducePartitionResponse, asyncio.Future[int]]],
        timeout_ms: int,
        version: int,
    ) -> bytes:
        """``acks=all``: answer when the ISR has every batch, or at the request timeout."""
        codes = await await_acks(
            replication.purgatory, {k: f for k, (_, f) in waits.items()}, timeout_ms / 1000
        )
        for key, code in codes.items():
            if code:
                out = waits[key][0]
                out.error_code = code
                out.error_message = None
        return encode_produce_response(response, version)
