"""WriteTxnMarkers (api key 27): a transaction coordinator ends a transaction here.

Only brokers send it (the coordinator of a transactional id, to the leaders
of the partitions the transaction wrote), so it needs CLUSTER_ACTION on the
cluster (or ALTER, which Kafka checks first), like a follower's fetch. The
body is ``TxnMarkerWriter``; the response is sent once every marker is
appended and, in a cluster, on the ISR. Versions: 1 (flexible) only; kio
has no schema for v0, which Kafka 4 removed too.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from headwater.txn.markers import TxnMarker, TxnMarkerWriter


class WriteTxnMarkersApi:
    def __init__(self, writer: TxnMarkerWriter) -> None:
        self.writer = writer

    async def write_txn_markers(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        markers = [
            TxnMarker(
                producer_id=m.producer_id,
                producer_epoch=m.producer_epoch,
                commit=bool(m.transaction_result),
                coordinator_epoch=m.coordinator_epoch,
                partitions=tuple((t.name, int(p)) for t in m.topics for p in t.partition_indexes),
            )
            for m in req.markers
        ]
        if not (
            ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
            or ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        ):
            denied = int(E.cluster_authorization_failed)
            results = [dict.fromkeys(m.partitions, denied) for m in markers]
        else:
            results = list(await asyncio.gather(*(self.writer.write(m) for m in markers)))
        return {
            "markers": [
                {
                    "producer_id": marker.producer_id,
                    "topics": _by_topic(codes),
                }
                for marker, codes in zip(markers, results, strict=True)
            ]
        }


def _by_topic(codes: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in codes.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]
