"""Produce: append record batches to partition logs.

The connection applies a Produce before it reads the next frame, so an
idempotent producer's in-flight batches reach the log in the order they were
sent. A Produce that touches many partitions (first appends create files)
runs in time slices, still before the next frame is read, so that it does
not stall every other client. Appends notify the
partition's listeners, which wakes parked fetches (the purgatory).
"""

from __future__ import annotations

import asyncio
import logging
import time

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import Ordered, RequestContext
from headwater.broker.cooperative import Steps, run_cooperatively
from headwater.broker.handlers.admin import AdminApis, is_valid_topic_name
from headwater.broker.metrics import BrokerMetrics
from headwater.broker.rejection_log import RejectionLog
from headwater.log.errors import KafkaApiError
from headwater.log.log_directory import LogDirectory, TopicInfo
from headwater.log.segment_files import precreate_segment_files
from headwater.protocol.produce_codec import (
    ProducePartitionResponse,
    ProduceRequestData,
    ProduceResponseData,
    ProduceTopicResponse,
    RecordError,
    decode_produce_request,
    encode_produce_response,
)

log = logging.getLogger(__name__)

#: Fresh partitions in one request from which their files are made off the loop.
PRECREATE_AT_LEAST = 8


class ProduceApi:
    def __init__(self, logs: LogDirectory, admin: AdminApis, metrics: BrokerMetrics) -> None:
        self.logs = logs
        self.admin = admin
        self.metrics = metrics
        self.rejections = RejectionLog(log)

    def handle(
        self, ctx: RequestContext, frame: memoryview, offset: int
    ) -> bytes | Ordered | None:
        """Answered at once when quick; in slices (in order) when it touches many partitions."""
        req = decode_produce_request(frame, offset, ctx.header.api_version)
        result = run_cooperatively(self._append_all(ctx, req))
        if isinstance(result, bytes) or result is None:
            return result
        return Ordered(result)

    def _append_all(self, ctx: RequestContext, req: ProduceRequestData) -> Steps[bytes | None]:
        """Append every partition's batches, yielding after each (a cooperative checkpoint)."""
        version = ctx.header.api_version
        now_ms = int(time.time() * 1000)
        topics: list[ProduceTopicResponse] = []
        acks_ok = req.acks in (-1, 0, 1)
        infos = [self.admin.ensure_topic(t.name) if acks_ok else None for t in req.topics]
        fresh = yield from self._fresh_partitions(req, infos)
        if fresh:
            # Their first segment files are created on a worker thread, not on the loop.
            loop = asyncio.get_running_loop()
            yield loop.run_in_executor(None, precreate_segment_files, fresh)
        for topic, info in zip(req.topics, infos, strict=True):
            parts: list[ProducePartitionResponse] = []
            for index, records in topic.partitions:
                out = ProducePartitionResponse(index=index)
                if not acks_ok:
                    out.error_code = int(E.invalid_required_acks)
                elif info is None and not is_valid_topic_name(topic.name):
                    out.error_code = int(E.invalid_topic_exception)
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
                        out.record_errors = [
                            RecordError(*e) for e in getattr(exc, "record_errors", ())
                        ]
                        self.rejections.reject(
                            f"produce to {topic.name}-{index}",
                            ctx.client_host,
                            ctx.header.client_id,
                            f"{type(exc).__name__}: {exc}",
                        )
                    else:
                        out.base_offset = result.base_offset
                        out.log_append_time_ms = result.log_append_time_ms
                        out.log_start_offset = result.log_start_offset
                        if not result.duplicate:
                            self.metrics.bytes_in.inc(len(records))
                    yield None  # a checkpoint: others may be served between partitions
                parts.append(out)
            topics.append(ProduceTopicResponse(name=topic.name, partitions=parts))
        if req.acks == 0:
            return None
        return encode_produce_response(ProduceResponseData(topics=topics), version)

    def _fresh_partitions(
        self, req: ProduceRequestData, infos: list[TopicInfo | None]
    ) -> Steps[list[tuple[str, int]]]:
        """(directory, base offset) of partitions this request writes first, when many.

        A handful are created inline as before; only a request that touches
        many new partitions pays for a trip to the worker thread.
        """
        fresh: list[tuple[str, int]] = []
        for topic, info in zip(req.topics, infos, strict=True):
            if info is None:
                continue
            for index, records in topic.partitions:
                if records is None or not 0 <= index < info.num_partitions:
                    continue
                plog = self.logs.log(topic.name, index)
                if not plog.segments:  # a first look lists the directory: a checkpoint
                    fresh.append((str(plog.directory), plog.log_end_offset))
                yield None
        return fresh if len(fresh) >= PRECREATE_AT_LEAST else []
