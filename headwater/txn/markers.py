"""Writing COMMIT/ABORT markers into the partitions this broker leads.

The transaction coordinator ends a transaction by asking the leader of every
partition the transaction wrote to append a control batch (a *marker*) for
the producer. That is Kafka's WriteTxnMarkers; this is its body, kept apart
from the wire so that a coordinator on the same broker calls it directly.

A marker counts as written once it is appended and, in a cluster, on every
in-sync replica (``acks=all``): only then may the coordinator move the
transaction to its complete state, and only then are the
``TxnCompletionListener``s told (the group coordinator makes a
transaction's pending offset commits visible from there).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from headwater.cluster.replica_manager import ReplicaManager
from headwater.log.errors import KafkaApiError
from headwater.log.log import Log
from headwater.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)


#: How long a marker waits for the ISR before the coordinator is told to retry.
DEFAULT_REPLICATION_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One WriteTxnMarkers entry: end ``producer_id``'s transaction in ``partitions``."""

    producer_id: int
    producer_epoch: int
    commit: bool  # True: COMMIT control record (type 1), False: ABORT (type 0)
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]


TxnCompletionListener = Callable[[int, str, int, bool], None]
"""(producer_id, topic, partition, committed): called after a marker is durably
written (and, in a cluster, replicated to the ISR) to a partition led here."""


class TxnMarkerWriter:
    """Writes markers into partitions this broker leads (the body of WriteTxnMarkers)."""

    def __init__(
        self,
        replication: ReplicaManager,
        *,
        replication_timeout_s: float = DEFAULT_REPLICATION_TIMEOUT_S,
    ) -> None:
        self.replication = replication
        self.replication_timeout_s = replication_timeout_s
        self.listeners: list[TxnCompletionListener] = []

    def _leader_log(self, topic: str, partition: int) -> tuple[int, Log | None]:
        """(error, log): the log to append to when this broker leads the partition."""
        replication = self.replication
        log = replication.leader_log(topic, partition)
        if isinstance(log, int):
            return log, None
        if not replication.enough_isr(replication.replicas[(topic, partition)]):
            # Kafka appends markers with acks=all and refuses before writing
            # when the ISR is below min.insync.replicas; the coordinator retries.
            return ErrorCode.not_enough_replicas, None
        return ErrorCode.none, log

    async def write(self, marker: TxnMarker) -> dict[tuple[str, int], int]:
        """Error code per partition (0 ok; NOT_LEADER_OR_FOLLOWER 6,
        ErrorCode.unknown_topic_or_partition 3, INVALID_PRODUCER_EPOCH 47 when the marker's
        epoch is older than the producer's, TRANSACTION_COORDINATOR_FENCED 52 ...).
        Returns once the markers are appended and (cluster) replicated to the ISR
        (acks=all semantics)."""
        now_ms = int(time.time() * 1000)
        codes: dict[tuple[str, int], int] = {}
        appended: dict[tuple[str, int], int] = {}  # partition -> offset after the marker
        for key in dict.fromkeys(marker.partitions):
            topic, partition = key
            error, plog = self._leader_log(topic, partition)
            if plog is None:
                codes[key] = error or ErrorCode.not_leader_or_follower
                continue
            try:
                result = plog.append_control_marker(
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.commit,
                    marker.coordinator_epoch,
                    now_ms,
                    leader_epoch=plog.partition_leader_epoch,
                )
            except KafkaApiError as exc:
                codes[key] = int(exc.kafka_error_code)
                continue
            except OSError:
                log.exception("writing a transaction marker to %s-%d failed", topic, partition)
                codes[key] = ErrorCode.unknown_server_error
                continue
            appended[key] = result.last_offset + 1
            codes[key] = ErrorCode.none
        if appended:
            keys = list(appended)
            waits = [
                self.replication.wait_replicated(t, p, appended[(t, p)], self.replication_timeout_s)
                for t, p in keys
            ]
            for key, code in zip(keys, await asyncio.gather(*waits), strict=True):
                codes[key] = code
        for key in appended:
            if codes[key] == ErrorCode.none and not self._completed(marker, key):
                codes[key] = ErrorCode.unknown_server_error
        return codes

    def _completed(self, marker: TxnMarker, key: tuple[str, int]) -> bool:
        """Tell the listeners; False when one failed (Kafka answers UNKNOWN_SERVER_ERROR)."""
        ok = True
        for listener in tuple(self.listeners):
            try:
                listener(marker.producer_id, key[0], key[1], marker.commit)
            except Exception:
                log.exception("transaction completion listener failed for %s-%d", *key)
                ok = False
        return ok
