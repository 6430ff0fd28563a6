"""Produce: append record batches to partition logs.

The handler is synchronous on purpose: the connection applies a Produce
before it reads the next frame, so an idempotent producer's in-flight
batches reach the log in the order they were sent. Appends notify the
partition's listeners, which wakes parked fetches (the purgatory).
"""

from __future__ import annotations

import logging
import time

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.broker.handlers.admin import AdminApis
from headwater.broker.metrics import BrokerMetrics
from headwater.log.errors import KafkaApiError
from headwater.log.log_directory import LogDirectory
from headwater.protocol.produce_codec import (
    ProducePartitionResponse,
    ProduceResponseData,
    ProduceTopicResponse,
    decode_produce_request,
    encode_produce_response,
)
from headwater.security.acl import AclOperation
from headwater.security.quotas import QuotaKey

log = logging.getLogger(__name__)


class ProduceApi:
    def __init__(self, logs: LogDirectory, admin: AdminApis, metrics: BrokerMetrics) -> None:
        self.logs = logs
        self.admin = admin
        self.metrics = metrics

    def handle(self, ctx: RequestContext, frame: memoryview, offset: int) -> bytes | None:
        version = ctx.header.api_version
        req = decode_produce_request(frame, offset, version)
        now_ms = int(time.time() * 1000)
        topics: list[ProduceTopicResponse] = []
        acks_ok = req.acks in (-1, 0, 1)
        may_write = ctx.topic_check(AclOperation.WRITE)
        for topic in req.topics:
            writable = may_write(topic.name)
            info = None
            if acks_ok and writable:
                info = self.admin.ensure_topic(topic.name, self.admin.may_create(ctx, topic.name))
            parts: list[ProducePartitionResponse] = []
            for index, records in topic.partitions:
                out = ProducePartitionResponse(index=index)
                if not writable:
                    out.error_code = int(E.topic_authorization_failed)
                elif not acks_ok:
                    out.error_code = int(E.invalid_required_acks)
                elif info is None or not 0 <= index < info.num_partitions:
                    out.error_code = int(E.unknown_topic_or_partition)
                elif records is None or len(records) == 0:
                    out.error_code = int(E.invalid_record)
                    out.error_message = "produce request carried no records"
                else:
                    plog = self.logs.log(topic.name, index)
                    try:
                        result = plog.append(records, now_ms)
                    except KafkaApiError as exc:
                        out.error_code = int(exc.kafka_error_code)
                        out.error_message = str(exc)
                        log.info("produce to %s-%d rejected: %s", topic.name, index, exc)
                    else:
                        out.base_offset = result.base_offset
                        out.log_append_time_ms = result.log_append_time_ms
                        out.log_start_offset = result.log_start_offset
                        if not result.duplicate:
                            self.metrics.bytes_in.inc(len(records))
                parts.append(out)
            topics.append(ProduceTopicResponse(name=topic.name, partitions=parts))
        produced = sum(len(r) for t in req.topics for _, r in t.partitions if r is not None)
        throttle_ms = ctx.throttle(QuotaKey.PRODUCER_BYTE_RATE, produced)
        if req.acks == 0:
            return None
        return encode_produce_response(
            ProduceResponseData(topics=topics, throttle_time_ms=throttle_ms), version
        )
