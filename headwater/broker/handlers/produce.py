"""Produce: append record batches to partition logs.

The connection applies a Produce before it reads the next frame, so an
idempotent producer's in-flight batches reach the log in the order they were
sent. A Produce that touches many partitions (first appends create files)
runs in time slices, still before the next frame is read, so that it does
not stall every other client. Appends notify the
partition's listeners, which wakes parked fetches (the purgatory).

In a cluster only the leader appends, and ``acks=all`` is answered once the
ISR has the batch: the appends happen first (in order), then the response
waits in the produce purgatory while the connection reads on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from functools import partial

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import Ordered, RequestContext
from headwater.broker.cooperative import Steps, run_cooperatively
from headwater.broker.handlers.admin import AdminApis, is_valid_topic_name
from headwater.broker.metrics import BrokerMetrics
from headwater.broker.rejection_log import OncePerKey, RejectionLog
from headwater.cluster.produce_purgatory import await_acks
from headwater.cluster.replica_manager import ReplicaManager
from headwater.log.errors import KafkaApiError, KafkaStorageError
from headwater.log.log_directory import LogDirectory, TopicInfo
from headwater.log.segment_files import precreate_segment_files
from headwater.protocol.metadata_codec import MetadataBroker
from headwater.protocol.produce_codec import (
    ProducePartitionResponse,
    ProduceRequestData,
    ProduceResponseData,
    ProduceTopicResponse,
    RecordError,
    decode_produce_request,
    encode_produce_response,
)
from headwater.records.batch import ATTRIBUTES_OFFSET, TRANSACTIONAL_MASK
from headwater.security.acl import AclOperation, ResourceType
from headwater.security.quotas import QuotaKey

log = logging.getLogger(__name__)


async def _after_appends(rest: Awaitable[bytes | AwaitingAcks | None]) -> bytes | None:
    """The sliced path: the appends, then (``acks=all``) the ISR, before the next request."""
    result = await rest
    if isinstance(result, AwaitingAcks):
        return await result.response
    return result


def _has_transactional_records(req: ProduceRequestData) -> bool:
    """Whether any partition's first batch is transactional (Kafka's hasTransactionalRecords)."""
    for topic in req.topics:
        for _, records in topic.partitions:
            if (
                records is not None
                and len(records) > ATTRIBUTES_OFFSET + 1
                and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK
            ):
                return True
    return False


#: Fresh partitions in one request from which their files are made off the loop.
PRECREATE_AT_LEAST = 8


_Waits = dict[tuple[str, int], tuple[ProducePartitionResponse, "asyncio.Future[int]"]]


@dataclass(frozen=True, slots=True)
class AwaitingAcks:
    """Appended; the response waits for the ISR (``acks=all`` in a cluster)."""

    response: Awaitable[bytes]


#: Longest a Produce that auto-created a topic waits for its leaders before appending.
AUTO_CREATE_WAIT_MS = 5_000


class ProduceApi:
    def __init__(
        self,
        logs: LogDirectory,
        admin: AdminApis,
        metrics: BrokerMetrics,
        replication: ReplicaManager,
    ) -> None:
        self.logs = logs
        self.admin = admin
        self.metrics = metrics
        self.replication = replication
        self.rejections = RejectionLog(log)
        #: A full or failed disk: one WARNING per partition per minute, no traceback.
        self.storage_warnings = OncePerKey(log)

    def handle(
        self, ctx: RequestContext, frame: memoryview, offset: int
    ) -> bytes | Ordered | Awaitable[bytes] | None:
        """Answered at once when quick; in slices (in order) when it touches many partitions.

        Once appended, an ``acks=all`` request in a cluster waits for its ISR
        without holding the connection: the next request is read meanwhile
        (its appends still come after this one's), and responses leave in order.
        """
        req = decode_produce_request(frame, offset, ctx.header.api_version)
        result = run_cooperatively(self._append_all(ctx, req))
        if isinstance(result, bytes) or result is None:
            return result
        if isinstance(result, AwaitingAcks):
            return result.response
        return Ordered(_after_appends(result))

    def _append_all(
        self, ctx: RequestContext, req: ProduceRequestData
    ) -> Steps[bytes | AwaitingAcks | None]:
        """Append every partition's batches, yielding after each (a cooperative checkpoint)."""
        version = ctx.header.api_version
        now_ms = int(time.time() * 1000)
        topics: list[ProduceTopicResponse] = []
        acks_ok = req.acks in (-1, 0, 1)
        replication = self.replication
        waits: _Waits = {}
        may_write = ctx.topic_check(AclOperation.WRITE)
        writable = [may_write(t.name) for t in req.topics]
        if _has_transactional_records(req) and not (
            req.transactional_id is not None
            and ctx.authorize(
                AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
            )
        ):
            # Kafka's rule: transactional batches come with the transactional id
            # whose WRITE permission covers them, or the whole request fails.
            return encode_produce_response(
                ProduceResponseData(
                    topics=[
                        ProduceTopicResponse(
                            name=t.name,
                            partitions=[
                                ProducePartitionResponse(
                                    index=index,
                                    error_code=int(E.transactional_id_authorization_failed),
                                )
                                for index, _ in t.partitions
                            ],
                        )
                        for t in req.topics
                    ]
                ),
                version,
            )
        infos = [
            self.admin.ensure_topic(t.name, partial(self.admin.may_create, ctx, t.name))
            if acks_ok and allowed
            else None
            for t, allowed in zip(req.topics, writable, strict=True)
        ]
        creating = [
            t.name for t, info in zip(req.topics, infos, strict=True)
            if info is None and self.admin.is_creating(t.name)
        ]  # fmt: skip
        if creating:
            # Auto-created by this request: the controller elects their leaders within
            # moments (at once in a cluster of one), so the records go in now.
            yield self.admin.wait_for_leaders(creating, min(req.timeout_ms, AUTO_CREATE_WAIT_MS))
            topics_now = self.logs.topics()
            infos = [
                topics_now.get(t.name) if info is None and t.name in creating else info
                for t, info in zip(req.topics, infos, strict=True)
            ]
        fresh = yield from self._fresh_partitions(req, infos)
        if fresh:
            # Their first segment files are created on a worker thread, not on the loop.
            loop = asyncio.get_running_loop()
            yield loop.run_in_executor(None, precreate_segment_files, fresh)
        for topic, info, may in zip(req.topics, infos, writable, strict=True):
            parts: list[ProducePartitionResponse] = []
            for index, records in topic.partitions:
                out = ProducePartitionResponse(index=index)
                if not may:
                    out.error_code = int(E.topic_authorization_failed)
                elif not acks_ok:
                    out.error_code = int(E.invalid_required_acks)
                elif info is None and not is_valid_topic_name(topic.name):
                    out.error_code = int(E.invalid_topic_exception)
                elif info is None or not 0 <= index < info.num_partitions:
                    out.error_code = int(E.unknown_topic_or_partition)
                elif records is None or len(records) == 0:
                    out.error_code = int(E.invalid_record)
                    out.error_message = "produce request carried no records"
                elif self._refused(replication, req, topic.name, index, out):
                    pass  # not the leader here, or too few replicas in sync
                elif refusal := self.logs.write_refusal(topic.name, index, len(records)):
                    # Below the free-space floor: refused before anything is written,
                    # so the producer's epoch and sequence stay as they were.
                    out.error_code = int(E.kafka_storage_error)
                    out.error_message = refusal
                    self.storage_warnings.warn(
                        (topic.name, index),
                        "produce to %s-%d refused: %s",
                        topic.name,
                        index,
                        refusal,
                    )
                else:
                    try:
                        result, waiting = replication.append_records(
                            topic.name, index, records, now_ms, req.acks
                        )
                    except KafkaStorageError as exc:
                        out.error_code = int(exc.kafka_error_code)
                        out.error_message = str(exc)
                        self.storage_warnings.warn(
                            (topic.name, index),
                            "produce to %s-%d failed: %s",
                            topic.name,
                            index,
                            exc,
                        )
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
                            count = result.last_offset - result.base_offset + 1
                            self.metrics.topics.produced(topic.name, len(records), count)
                        # acks=all waits until the ISR has it (at once when the
                        # ISR is this broker alone).
                        if waiting is not None:
                            waits[(topic.name, index)] = (out, waiting)
                    yield None  # a checkpoint: others may be served between partitions
                parts.append(out)
            topics.append(ProduceTopicResponse(name=topic.name, partitions=parts))
        produced = sum(len(r) for t in req.topics for _, r in t.partitions if r is not None)
        throttle_ms = max(
            ctx.throttle(QuotaKey.PRODUCER_BYTE_RATE, produced), ctx.request_throttle_ms()
        )
        if req.acks == 0:
            return None
        response = ProduceResponseData(topics=topics, throttle_time_ms=throttle_ms)
        if not waits:
            self._add_leader_hints(response, ctx, version)
            return encode_produce_response(response, version)
        return AwaitingAcks(
            self._acknowledge(replication, response, waits, req.timeout_ms, version, ctx)
        )

    @staticmethod
    def _refused(
        replication: ReplicaManager,
        req: ProduceRequestData,
        topic: str,
        index: int,
        out: ProducePartitionResponse,
    ) -> bool:
        """Whether a cluster refuses this partition here (not the leader, too small an ISR)."""
        error = replication.serving_error(topic, index)
        replica = replication.replica(topic, index)
        if error or replica is None:
            out.error_code = error or int(E.not_leader_or_follower)
            return True
        if req.acks == -1 and not replication.enough_isr(replica):
            # Kafka refuses before appending: the write could not be as safe as asked.
            out.error_code = int(E.not_enough_replicas)
            out.error_message = (
                f"ISR {list(replica.isr)} is smaller than min.insync.replicas="
                f"{replication.min_insync_replicas(topic)}"
            )
            return True
        return False

    async def _acknowledge(
        self,
        replication: ReplicaManager,
        response: ProduceResponseData,
        waits: _Waits,
        timeout_ms: int,
        version: int,
        ctx: RequestContext,
    ) -> bytes:
        """``acks=all``: answer when the ISR has every batch, or at the request timeout."""
        waiting = time.perf_counter()
        codes = await await_acks(
            replication.purgatory, {k: f for k, (_, f) in waits.items()}, timeout_ms / 1000
        )
        ctx.remote_seconds += time.perf_counter() - waiting
        for key, code in codes.items():
            if code:
                out = waits[key][0]
                out.error_code = code
                out.error_message = None
        self._add_leader_hints(response, ctx, version)
        return encode_produce_response(response, version)

    def _add_leader_hints(
        self, response: ProduceResponseData, ctx: RequestContext, version: int
    ) -> None:
        """v10+ (KIP-951): name the current leader of each partition refused with
        NOT_LEADER_OR_FOLLOWER, and where it listens on the client's listener, so
        the client sends there at once instead of backing off and asking for
        Metadata (as Kafka's ``handleProduceRequest``). A controlled shutdown or
        a failover then costs a producer one round trip per moved partition."""
        if version < 10:
            return
        view = self.replication.view
        leaders: set[int] = set()
        for topic in response.topics:
            for out in topic.partitions:
                if out.error_code != E.not_leader_or_follower:
                    continue
                state = view.partition_states.get((topic.name, out.index))
                if state is None:
                    continue
                out.current_leader = (state.leader, state.leader_epoch)
                leaders.add(state.leader)
        listener = ctx.listener.name
        for broker_id in sorted(leaders):
            registration = view.brokers.get(broker_id)
            if registration is None:  # not alive: the client learns it from Metadata
                continue
            host, port = registration.endpoint(listener) or (registration.host, registration.port)
            response.node_endpoints.append(MetadataBroker(broker_id, host, port, registration.rack))

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
                if self.replication.serving_error(topic.name, index):
                    continue  # refused below: no files for a partition led elsewhere
                plog = self.logs.log(topic.name, index)
                if not plog.segments:  # a first look lists the directory: a checkpoint
                    fresh.append((str(plog.directory), plog.log_end_offset))
                yield None
        return fresh if len(fresh) >= PRECREATE_AT_LEAST else []
