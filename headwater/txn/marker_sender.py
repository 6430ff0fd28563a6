"""Delivers a transaction's COMMIT/ABORT markers to every partition: Kafka's
TransactionMarkerChannelManager.

A partition led by this broker gets its marker from the broker's own
``TxnMarkerWriter``; any other partition's leader gets a WriteTxnMarkers
request over an inter-broker connection. The decision is already durable in
``__transaction_state`` when sending starts, so sending never gives up on a
partition that still exists: NOT_LEADER, a lost connection or a slow ISR are
retried with backoff (the leader is looked up again each round) until the
marker is written or the partition is deleted. Only a fencing answer (the
producer's epoch or the coordinator moved on) stops it, as in Kafka: a newer
coordinator or epoch owns the transaction then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from headwater.client.connection import BrokerConnection
from headwater.client.errors import KafkaConnectionError, KafkaError
from headwater.cluster.inter_broker import InterBrokerConnector
from headwater.protocol.apis import ApiKey
from headwater.txn.markers import TxnMarker, TxnMarkerWriter

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: (topic, partition) -> its leader's broker id, or None while it has none.
LeaderOf = Callable[[str, int], "int | None"]
PartitionExists = Callable[[str, int], bool]

#: Errors after which the marker is not written and never will be by us.
_FENCED = frozenset(
    {int(ErrorCode.invalid_producer_epoch), int(ErrorCode.transaction_coordinator_fenced)}
)
#: Errors that mean "the marker can never be written there": count it as done (Kafka
#: does the same for these, logging them).
_GIVE_UP = frozenset(
    {
        int(ErrorCode.corrupt_message),
        int(ErrorCode.message_too_large),
        int(ErrorCode.record_list_too_large),
        int(ErrorCode.invalid_required_acks),
        int(ErrorCode.unsupported_for_message_format),
        int(ErrorCode.invalid_producer_id_mapping),
    }
)


class MarkerSender:
    """``await send(marker)``: True once every partition has it, False if fenced."""

    def __init__(
        self,
        local_id: int,
        writer: Callable[[], TxnMarkerWriter | None],
        *,
        leader_of: LeaderOf | None = None,
        partition_exists: PartitionExists,
        connector: InterBrokerConnector | None = None,
        backoff_ms: int = 100,
        max_backoff_ms: int = 2000,
        report_after_s: float = 15.0,
    ) -> None:
        """Without ``leader_of`` (a single broker) every partition is local.
        A marker still unwritten after ``report_after_s`` (and every period after)
        is logged with what each partition last answered."""
        self._local_id = local_id
        self._writer = writer
        self._leader_of = leader_of
        self._partition_exists = partition_exists
        self._connector = connector
        self._backoff_ms = backoff_ms
        self._max_backoff_ms = max_backoff_ms
        self._report_after_s = report_after_s
        self._connections: dict[int, BrokerConnection] = {}

    async def close(self) -> None:
        for conn in self._connections.values():
            conn.close("marker sender stopped")
        self._connections.clear()

    async def send(self, marker: TxnMarker, wanted: Callable[[], bool] = lambda: True) -> bool:
        """True once every partition has the marker; False if fenced, or once
        ``wanted()`` says the coordinator resigned (the next one sends them)."""
        remaining = set(marker.partitions)
        backoff = self._backoff_ms
        started = time.monotonic()
        report_at = started + self._report_after_s
        #: Why each unwritten partition is still unwritten (for the report).
        why: dict[TopicPartition, str] = {}
        while remaining:
            if not wanted():
                return False
            remaining = {tp for tp in remaining if self._partition_exists(*tp)}
            if not remaining:
                break
            by_leader: dict[int | None, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                leader = self._local_id if self._leader_of is None else self._leader_of(*tp)
                by_leader.setdefault(leader, []).append(tp)
            results: dict[TopicPartition, int] = {}
            for leader, partitions in by_leader.items():
                if leader is None:
                    why.update(dict.fromkeys(partitions, "no leader"))
                    continue  # parked until the metadata names a leader (Kafka does too)
                part = replace(marker, partitions=tuple(partitions))
                results.update(await self._send_to(leader, part))
            for tp, error in results.items():
                if error == ErrorCode.none or error in _GIVE_UP:
                    if error != ErrorCode.none:
                        log.error(
                            "marker for producer %d on %s failed for good: error %d",
                            marker.producer_id,
                            tp,
                            error,
                        )
                    remaining.discard(tp)
                    why.pop(tp, None)
                elif error in _FENCED:
                    log.info(
                        "marker for producer %d on %s fenced (error %d); stop sending",
                        marker.producer_id,
                        tp,
                        error,
                    )
                    return False
                else:
                    why[tp] = _error_name(error)
            if remaining:
                now = time.monotonic()
                if now >= report_at:
                    report_at = now + self._report_after_s
                    log.warning(
                        "%s marker of producer %d (epoch %d) still unwritten after %.0f s: %s",
                        "COMMIT" if marker.commit else "ABORT",
                        marker.producer_id,
                        marker.producer_epoch,
                        now - started,
                        ", ".join(
                            f"{t}-{p}: {why.get((t, p), 'pending')}" for t, p in sorted(remaining)
                        ),
                    )
                await asyncio.sleep(backoff / 1000)
                backoff = min(backoff * 2, self._max_backoff_ms)
        return True

    async def _send_to(self, leader: int, marker: TxnMarker) -> dict[TopicPartition, int]:
        if leader == self._local_id:
            writer = self._writer()
            if writer is None:
                return dict.fromkeys(marker.partitions, int(ErrorCode.not_leader_or_follower))
            try:
                return await writer.write(marker)
            except Exception:
                log.exception("writing a marker locally failed; will retry")
                return dict.fromkeys(marker.partitions, int(ErrorCode.unknown_server_error))
        try:
            return await self._send_remote(leader, marker)
        except (TimeoutError, KafkaError, OSError) as exc:
            log.info("WriteTxnMarkers to broker %d failed (%s); will retry", leader, exc)
            conn = self._connections.pop(leader, None)
            if conn is not None:
                conn.close("WriteTxnMarkers failed")
            return dict.fromkeys(marker.partitions, int(ErrorCode.not_leader_or_follower))

    async def _send_remote(self, leader: int, marker: TxnMarker) -> dict[TopicPartition, int]:
        if self._connector is None:
            raise KafkaConnectionError(f"no inter-broker connector to reach broker {leader}")
        conn = self._connections.get(leader)
        if conn is None or conn.closed:
            conn = await self._connector.open(leader, "txn-markers")
            self._connections[leader] = conn
        by_topic: dict[str, list[int]] = {}
        for topic, partition in marker.partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = {
            "markers": [
                {
                    "producer_id": marker.producer_id,
                    "producer_epoch": marker.producer_epoch,
                    "transaction_result": marker.commit,
                    "coordinator_epoch": marker.coordinator_epoch,
                    "topics": [
                        {"name": topic, "partition_indexes": parts}
                        for topic, parts in by_topic.items()
                    ],
                }
            ]
        }
        response: Any = await conn.request(ApiKey.WRITE_TXN_MARKERS, request)
        results: dict[TopicPartition, int] = dict.fromkeys(
            marker.partitions, int(ErrorCode.unknown_topic_or_partition)
        )
        for answer in response.markers:
            for topic in answer.topics:
                for p in topic.partitions:
                    results[(topic.name, p.partition_index)] = int(p.error_code)
        return results


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"
