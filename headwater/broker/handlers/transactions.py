"""The transaction APIs on the wire, with Kafka's ACL check points around the coordinator.

============================  ===============================================
InitProducerId (txn id)       WRITE on the transactional id
AddPartitionsToTxn            WRITE on the id, WRITE on each topic
AddOffsetsToTxn               WRITE on the id, READ on the group
EndTxn                        WRITE on the id
DescribeTransactions          DESCRIBE on each id
ListTransactions              only ids the principal may DESCRIBE
============================  ===============================================

(TxnOffsetCommit goes to the group coordinator: ``headwater.group``.) Each
handler turns a kio request into a call on `TransactionCoordinatorService` and
its answer into the response dict of the request's version, converting
PRODUCER_FENCED for versions that predate it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.coordinator.partition_state_log import OFFSETS_TOPIC
from headwater.coordinator.placement import partition_for
from headwater.security.acl import AclOperation, ResourceType
from headwater.txn.coordinator import api_error
from headwater.txn.service import TransactionCoordinatorService

Response = dict[str, Any]
#: (topic, partition) -> whether it exists (on this broker, or in the cluster view).
PartitionExists = Callable[[str, int], bool]


def _ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


class TransactionApis:
    def __init__(
        self,
        service: TransactionCoordinatorService,
        partition_exists: PartitionExists,
        offsets_partitions: Callable[[], int],
        idempotent_init: Callable[[RequestContext, Any], Response],
    ) -> None:
        """``idempotent_init`` answers InitProducerId without a transactional id
        (the idempotent producer's path, unchanged)."""
        self.service = service
        self._partition_exists = partition_exists
        self._offsets_partitions = offsets_partitions
        self._idempotent_init = idempotent_init

    @staticmethod
    def _may_write_id(ctx: RequestContext, transactional_id: str) -> bool:
        return ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)

    async def init_producer_id(self, ctx: RequestContext, req: Any) -> Response:
        transactional_id = req.transactional_id
        if transactional_id is None:
            return self._idempotent_init(ctx, req)
        none = {"producer_id": -1, "producer_epoch": -1}
        if not self._may_write_id(ctx, transactional_id):
            return {"error_code": int(E.transactional_id_authorization_failed), **none}
        version = ctx.header.api_version
        expected = None
        producer_id = getattr(req, "producer_id", -1)
        if version >= 3 and producer_id >= 0:
            expected = (int(producer_id), int(getattr(req, "producer_epoch", -1)))
        error, pid, epoch = await self.service.init_producer_id(
            transactional_id, _ms(req.transaction_timeout), expected
        )
        return {
            "error_code": int(api_error(error, "init_producer_id", version)),
            "producer_id": pid,
            "producer_epoch": epoch,
        }

    async def add_partitions_to_txn(self, ctx: RequestContext, req: Any) -> Response:
        """v0-v3: one transaction per request. A partition that is unauthorized
        (29) or unknown (3) fails the whole request: the rest get OPERATION_NOT_ATTEMPTED."""
        version = ctx.header.api_version
        transactional_id = req.v3_and_below_transactional_id
        requested = [(t.name, int(p)) for t in req.v3_and_below_topics for p in t.partitions]
        errors: dict[tuple[str, int], int] = {}
        if not self._may_write_id(ctx, transactional_id):
            errors = dict.fromkeys(requested, int(E.transactional_id_authorization_failed))
        else:
            denied_topics = {
                topic
                for topic, _ in requested
                if not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, topic)
            }
            for tp in requested:
                if tp[0] in denied_topics:
                    errors[tp] = int(E.topic_authorization_failed)
                elif not self._partition_exists(*tp):
                    errors[tp] = int(E.unknown_topic_or_partition)
            if errors:
                for tp in requested:
                    errors.setdefault(tp, int(E.operation_not_attempted))
            else:
                error = await self.service.add_partitions(
                    transactional_id,
                    int(req.v3_and_below_producer_id),
                    int(req.v3_and_below_producer_epoch),
                    set(requested),
                )
                code = int(api_error(error, "add_partitions", version))
                errors = dict.fromkeys(requested, code)
        by_topic: dict[str, list[Response]] = {}
        for (topic, partition), code in errors.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "partition_error_code": code}
            )
        return {
            "results_by_topic_v3_and_below": [
                {"name": topic, "results_by_partition": parts} for topic, parts in by_topic.items()
            ]
        }

    async def add_offsets_to_txn(self, ctx: RequestContext, req: Any) -> Response:
        """The group's ``__consumer_offsets`` partition joins the transaction, so the
        coordinator sends it a marker that commits or drops the TxnOffsetCommit."""
        version = ctx.header.api_version
        if not self._may_write_id(ctx, req.transactional_id):
            return {"error_code": int(E.transactional_id_authorization_failed)}
        if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
            return {"error_code": int(E.group_authorization_failed)}
        partition = partition_for(req.group_id, self._offsets_partitions())
        error = await self.service.add_partitions(
            req.transactional_id,
            int(req.producer_id),
            int(req.producer_epoch),
            {(OFFSETS_TOPIC, partition)},
        )
        return {"error_code": int(api_error(error, "add_offsets", version))}

    async def end_txn(self, ctx: RequestContext, req: Any) -> Response:
        version = ctx.header.api_version
        if not self._may_write_id(ctx, req.transactional_id):
            return {"error_code": int(E.transactional_id_authorization_failed)}
        error = await self.service.end_txn(
            req.transactional_id, int(req.producer_id), int(req.producer_epoch), bool(req.committed)
        )
        return {"error_code": int(api_error(error, "end_txn", version))}

    def describe_transactions(self, ctx: RequestContext, req: Any) -> Response:
        states = []
        for transactional_id in req.transactional_ids:
            if not ctx.authorize(
                AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id
            ):
                states.append(
                    {
                        "transactional_id": transactional_id,
                        "error_code": int(E.transactional_id_authorization_failed),
                    }
                )
                continue
            answer = self.service.describe(transactional_id)
            start = answer.get("transaction_start_time_ms", -1)
            answer["transaction_timeout"] = answer.pop("transaction_timeout_ms", 0)
            # kio's field is a datetime; -1 (not started) has no datetime: say 0.
            answer["transaction_start_time"] = max(int(start), 0)  # type: ignore[call-overload]
            answer.pop("transaction_start_time_ms", None)
            states.append(answer)
        return {"transaction_states": states}

    def list_transactions(self, ctx: RequestContext, req: Any) -> Response:
        error, unknown, listings = self.service.list_transactions(
            tuple(req.state_filters),
            tuple(int(p) for p in req.producer_id_filters),
            int(getattr(req, "duration_filter", -1)),
        )
        return {
            "error_code": int(error),
            "unknown_state_filters": unknown,
            "transaction_states": [
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "transaction_state": t.state,
                }
                for t in listings
                if ctx.authorize(
                    AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id
                )
            ],
        }
