"""Requests to a coordinator (group or transaction), found with FindCoordinator.

A transactional producer talks to two coordinators: the transaction
coordinator of its ``transactional.id`` (key type 1: InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) and the group coordinator of the
group whose offsets it commits (key type 0: TxnOffsetCommit). Each answer's
error code decides, through ``transaction_manager.classify``, whether to
retry as is (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS...), to
look the coordinator up again (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
a lost connection) or to stop. ``CoordinatorClient.request`` does those
retries until ``max.block.ms`` runs out and hands every other outcome,
success or not, back to the caller, which owns the transaction's state.

``end_transaction`` ends a transaction on behalf of the producer that
opened it, knowing only (transactional id, producer id, epoch): the
exactly-once Spark sink's driver commits its tasks' transactions this way.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from headwater.client.cluster import ClusterClient
from headwater.client.connection import BrokerConnection
from headwater.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from headwater.client.transaction_manager import Action, classify, error_for
from headwater.client.types import BrokerMetadata, TopicPartition
from headwater.protocol.apis import ApiKey

log = logging.getLogger(__name__)

FIRST_BATCHED_FIND_COORDINATOR: Final = 4
# The newest versions whose shapes this client speaks: AddPartitionsToTxn v4+
# is the broker-to-broker batched form, EndTxn v5 is KIP-890's epoch bump.
MAX_VERSIONS: Final[dict[int, int]] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 4,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.OFFSET_FETCH: 7,  # v8+ batches groups
}
FIRST_REQUIRE_STABLE_OFFSET_FETCH: Final = 7


class CoordinatorType(enum.IntEnum):
    GROUP = 0
    TRANSACTION = 1


ErrorOf = Callable[[Any], int]


def top_level_error(response: Any) -> int:
    return int(response.error_code)


class CoordinatorClient:
    """Finds coordinators and retries requests to them; lives on the cluster client's loop."""

    def __init__(
        self, cluster: ClusterClient, *, retry_backoff_ms: int = 100, max_block_ms: int = 60_000
    ) -> None:
        self.cluster = cluster
        self.retry_backoff_s = max(retry_backoff_ms, 10) / 1000
        self.max_block_s = max_block_ms / 1000
        self._nodes: dict[tuple[CoordinatorType, str], int] = {}

    def forget(self, kind: CoordinatorType, key: str) -> None:
        self._nodes.pop((kind, key), None)

    async def find(self, kind: CoordinatorType, key: str) -> int:
        """The node id of ``key``'s coordinator (cached until an error says it moved)."""
        cached = self._nodes.get((kind, key))
        if cached is not None:
            return cached
        conn = await self.cluster.any_connection()
        version = conn.version(ApiKey.FIND_COORDINATOR)
        if version >= FIRST_BATCHED_FIND_COORDINATOR:
            resp = await conn.request(
                ApiKey.FIND_COORDINATOR,
                {"key_type": int(kind), "coordinator_keys": [key]},
                version,
            )
            (found,) = resp.coordinators
        else:
            found = await conn.request(
                ApiKey.FIND_COORDINATOR, {"key": key, "key_type": int(kind)}, version
            )
        code = int(found.error_code)
        if code:
            raise KafkaError(code, f"FindCoordinator({kind.name.lower()}, {key!r})")
        node_id = int(found.node_id)
        if node_id not in self.cluster.brokers:
            # A broker the metadata cache has not seen yet: the answer says where it is.
            self.cluster.brokers[node_id] = BrokerMetadata(
                node_id, str(found.host), int(found.port), None
            )
        self._nodes[(kind, key)] = node_id
        return node_id

    async def _connection(self, kind: CoordinatorType, key: str) -> BrokerConnection:
        return await self.cluster.connection(await self.find(kind, key))

    async def request(
        self,
        kind: CoordinatorType,
        key: str,
        api_key: ApiKey,
        data: Mapping[str, Any],
        *,
        error_of: ErrorOf = top_level_error,
        what: str = "",
    ) -> tuple[Any, int]:
        """Send until the answer is final: (response, error code) with the code DONE,
        ABORTABLE or FATAL by ``classify``. Raises ``KafkaTimeoutError`` when
        retriable errors last longer than ``max.block.ms``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_block_s
        what = what or api_key.name
        while True:
            reason: KafkaError
            try:
                conn = await self._connection(kind, key)
                version = conn.version(api_key, MAX_VERSIONS.get(api_key))
                resp = await conn.request(api_key, data, version)
                code = error_of(resp)
                action = classify(code)
                if action not in (Action.RETRY, Action.FIND_COORDINATOR):
                    return resp, code
                reason = KafkaError(code, what)
            except KafkaConnectionError as exc:
                action, reason = Action.FIND_COORDINATOR, exc
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                action, reason = classify(exc.code), exc
            if action is Action.FIND_COORDINATOR:
                self.forget(kind, key)
            if loop.time() + self.retry_backoff_s > deadline:
                raise KafkaTimeoutError(f"{what}: still failing after max.block.ms ({reason})")
            log.debug("%s: %s; retrying", what, reason)
            await asyncio.sleep(self.retry_backoff_s)


async def end_transaction(
    coordinators: CoordinatorClient,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
) -> None:
    """EndTxn for (transactional id, producer id, epoch); raises the Kafka error if refused.

    The coordinator checks only these three, so any process may end a
    transaction it knows them for; a producer fenced in the meantime makes
    this fail with ``ProducerFencedError``.
    """
    what = f"EndTxn({'commit' if commit else 'abort'}) for {transactional_id!r}"
    _, code = await coordinators.request(
        CoordinatorType.TRANSACTION,
        transactional_id,
        ApiKey.END_TXN,
        {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "committed": commit,
        },
        what=what,
    )
    if code:
        raise error_for(code, what)


def _offset_fetch_error(response: Any) -> int:
    top = int(getattr(response, "error_code", 0))
    if top:
        return top
    for t in response.topics:
        for p in t.partitions:
            if int(p.error_code):
                return int(p.error_code)
    return 0


async def fetch_committed_offsets(
    coordinators: CoordinatorClient, group_id: str, *, require_stable: bool = True
) -> dict[TopicPartition, int]:
    """Every offset ``group_id`` has committed (OffsetFetch with all topics).

    ``require_stable`` (KIP-447): while a transaction holds uncommitted
    offsets for a partition, the coordinator answers UNSTABLE_OFFSET_COMMIT
    and this waits, so a reader never acts on offsets about to change.
    """
    resp, code = await coordinators.request(
        CoordinatorType.GROUP,
        group_id,
        ApiKey.OFFSET_FETCH,
        {"group_id": group_id, "topics": None, "require_stable": require_stable},
        error_of=_offset_fetch_error,
        what=f"OffsetFetch({group_id!r})",
    )
    if code:
        raise KafkaError(code, f"OffsetFetch({group_id!r})")
    return {
        TopicPartition(t.name, int(p.partition_index)): int(p.committed_offset)
        for t in resp.topics
        for p in t.partitions
        if int(p.committed_offset) >= 0
    }
