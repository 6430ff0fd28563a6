"""Topic administration: create, delete, list, describe configs, add partitions;
and the transactions of the cluster (list, describe).

``AsyncAdminClient`` speaks CreateTopics, DeleteTopics, Metadata,
DescribeConfigs, CreatePartitions, ListOffsets, ListTransactions and
DescribeTransactions through kio's entities;
``AdminClient`` is its blocking front (the CLI uses it). Every per-topic
error raises ``KafkaError`` carrying Kafka's name for the code, e.g.
``TOPIC_ALREADY_EXISTS (36): topic 'x' already exists``.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from headwater.client.cluster import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ClusterClient
from headwater.client.coordinator import CoordinatorClient, fetch_committed_offsets
from headwater.client.errors import KafkaError
from headwater.client.loop_thread import EventLoopThread
from headwater.client.types import TopicMetadata, TopicPartition
from headwater.protocol.apis import ApiKey

TOPIC_RESOURCE: Final = 2
DEFAULT_TIMEOUT_MS: Final = 30_000

_Configs = Mapping[str, str] | None
NewTopic = tuple[str, int, _Configs] | tuple[str, int, _Configs, int]
"""(name, partitions, configs[, replication factor]); partitions -1 takes the broker's
num.partitions, a missing or -1 replication factor its default.replication.factor."""


TRANSACTION_KEY_TYPE: Final = 1
_COORDINATOR_ATTEMPTS: Final = 20
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
_COORDINATOR_RETRIABLE: Final = frozenset({14, 15})


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One ListTransactions entry, with the broker that coordinates it."""

    transactional_id: str
    coordinator_id: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions for one id (Kafka's kafka-transactions.sh describe)."""

    transactional_id: str
    coordinator_id: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction in progress
    partitions: tuple[tuple[str, int], ...]


def _epoch_ms(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def _duration_ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def _raise_first(errors: list[KafkaError]) -> None:
    if errors:
        raise errors[0]


class AsyncAdminClient:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str = "headwater-admin",
        request_timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self.request_timeout_ms = request_timeout_ms
        self._cluster = ClusterClient(
            bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms
        )

    async def __aenter__(self) -> AsyncAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._cluster.close()

    async def create_topics(
        self, topics: Iterable[NewTopic], *, validate_only: bool = False
    ) -> None:
        request = [
            {
                "name": topic[0],
                "num_partitions": topic[1],
                "replication_factor": topic[3] if len(topic) > 3 else -1,  # type: ignore[misc]
                "assignments": [],
                "configs": [{"name": k, "value": str(v)} for k, v in (topic[2] or {}).items()],
            }
            for topic in topics
        ]
        resp = await self._cluster.request_any(
            ApiKey.CREATE_TOPICS,
            {"topics": request, "timeout": self.request_timeout_ms, "validate_only": validate_only},
        )
        _raise_first(
            [
                KafkaError(int(t.error_code), t.error_message or f"creating topic {t.name!r}")
                for t in resp.topics
                if int(t.error_code)
            ]
        )

    async def delete_topics(self, names: Iterable[str]) -> None:
        wanted = list(names)
        resp = await self._cluster.request_any(
            ApiKey.DELETE_TOPICS,
            {
                "topics": [{"name": n, "topic_id": None} for n in wanted],
                "topic_names": wanted,
                "timeout": self.request_timeout_ms,
            },
        )
        _raise_first(
            [
                KafkaError(
                    int(r.error_code),
                    getattr(r, "error_message", None) or f"deleting topic {r.name!r}",
                )
                for r in resp.responses
                if int(r.error_code)
            ]
        )

    async def list_topics(self) -> dict[str, TopicMetadata]:
        return dict(sorted((await self._cluster.refresh_metadata(None)).items()))

    async def describe_topic(self, name: str) -> TopicMetadata:
        found = (await self._cluster.refresh_metadata([name])).get(name)
        if found is None:
            raise KafkaError(3, f"topic {name!r} does not exist")
        return found

    async def describe_configs(self, topic: str) -> dict[str, str | None]:
        resp = await self._cluster.request_any(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": TOPIC_RESOURCE,
                        "resource_name": topic,
                        "configuration_keys": None,
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        out: dict[str, str | None] = {}
        for result in resp.results:
            code = int(result.error_code)
            if code:
                raise KafkaError(code, result.error_message or f"describing topic {topic!r}")
            for entry in result.configs:
                out[entry.name] = entry.value
        return out

    async def create_partitions(
        self, name: str, total: int, *, validate_only: bool = False
    ) -> None:
        resp = await self._cluster.request_any(
            ApiKey.CREATE_PARTITIONS,
            {
                "topics": [{"name": name, "count": total, "assignments": None}],
                "timeout": self.request_timeout_ms,
                "validate_only": validate_only,
            },
        )
        _raise_first(
            [
                KafkaError(int(r.error_code), r.error_message or f"adding partitions to {name!r}")
                for r in resp.results
                if int(r.error_code)
            ]
        )

    async def list_offsets(
        self, partitions: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """-2 for log start offsets, -1 for log end (high watermark) offsets."""
        return await self._cluster.list_offsets(partitions, timestamp)

    async def log_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (log start offset, log end offset) for every partition of ``topic``.

        A partition whose leader cannot be reached (it just died and ZooKeeper
        has not moved its leadership yet) shows -1, -1: describing a topic must
        not fail while other brokers are up.
        """
        meta = await self.describe_topic(topic)
        tps = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        starts = await self._cluster.list_offsets(tps, EARLIEST_TIMESTAMP, unreachable=-1)
        ends = await self._cluster.list_offsets(tps, LATEST_TIMESTAMP, unreachable=-1)
        return {tp.partition: (starts[tp], ends[tp]) for tp in tps}

    async def list_consumer_group_offsets(
        self, group_id: str, *, require_stable: bool = False
    ) -> dict[TopicPartition, int]:
        """The group's committed offsets (Kafka's Admin.listConsumerGroupOffsets)."""
        coordinators = CoordinatorClient(self._cluster, max_block_ms=self.request_timeout_ms)
        return await fetch_committed_offsets(coordinators, group_id, require_stable=require_stable)

    async def list_transactions(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = ()
    ) -> list[TransactionListing]:
        """Every broker's transactions (each coordinates its own partitions of
        ``__transaction_state``), filtered by state names and producer ids."""
        await self._cluster.refresh_metadata([])
        listings: list[TransactionListing] = []
        for node_id in sorted(self._cluster.brokers):
            conn = await self._cluster.connection(node_id)
            resp = await conn.request(
                ApiKey.LIST_TRANSACTIONS,
                {"state_filters": list(states), "producer_id_filters": list(producer_ids)},
            )
            code = int(resp.error_code)
            if code:
                raise KafkaError(code, f"ListTransactions on broker {node_id}")
            listings.extend(
                TransactionListing(
                    t.transactional_id, node_id, int(t.producer_id), t.transaction_state
                )
                for t in resp.transaction_states
            )
        return sorted(listings, key=lambda t: t.transactional_id)

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """Ask the id's coordinator (FindCoordinator key type 1) for its state."""
        for attempt in range(_COORDINATOR_ATTEMPTS):
            found = await self._cluster.request_any(
                ApiKey.FIND_COORDINATOR,
                {
                    "key": transactional_id,
                    "key_type": TRANSACTION_KEY_TYPE,
                    "coordinator_keys": [transactional_id],
                },
            )
            answer = found.coordinators[0] if hasattr(found, "coordinators") else found
            code = int(answer.error_code)
            if code not in _COORDINATOR_RETRIABLE or attempt == _COORDINATOR_ATTEMPTS - 1:
                break
            # The cluster creates __transaction_state on first need: wait for it.
            await asyncio.sleep(0.3)
        if code:
            raise KafkaError(code, f"FindCoordinator for transactional id {transactional_id!r}")
        node_id = int(answer.node_id)
        await self._cluster.refresh_metadata([])
        conn = await self._cluster.connection(node_id)
        resp = await conn.request(
            ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]}
        )
        (state,) = resp.transaction_states
        code = int(state.error_code)
        if code:
            raise KafkaError(code, f"transactional id {transactional_id!r}")
        return TransactionDescription(
            transactional_id=transactional_id,
            coordinator_id=node_id,
            producer_id=int(state.producer_id),
            producer_epoch=int(state.producer_epoch),
            state=state.transaction_state,
            timeout_ms=_duration_ms(state.transaction_timeout),
            start_time_ms=_epoch_ms(state.transaction_start_time),
            partitions=tuple(sorted((t.topic, int(p)) for t in state.topics for p in t.partitions)),
        )

    # -- cluster operations (issue 17) ------------------------------------------

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """DeleteRecords on each partition's leader: the new log start offsets
        (-1 as an offset: up to the high watermark). Raises the first error."""
        await self._cluster.refresh_metadata({tp.topic for tp in offsets})
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in offsets:
            leader = self._cluster.leader(tp)
            if leader is None:
                raise KafkaError(3, f"{tp.topic}-{tp.partition} has no leader")
            by_leader.setdefault(leader, []).append(tp)
        out: dict[TopicPartition, int] = {}
        for node_id, tps in by_leader.items():
            topics: dict[str, list[dict[str, int]]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "offset": offsets[tp]}
                )
            conn = await self._cluster.connection(node_id)
            resp = await conn.request(
                ApiKey.DELETE_RECORDS,
                {
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    "timeout": datetime.timedelta(milliseconds=self.request_timeout_ms),
                },
            )
            for t in resp.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code:
                        raise KafkaError(code, f"DeleteRecords on {t.name}-{p.partition_index}")
                    out[TopicPartition(t.name, int(p.partition_index))] = int(p.low_watermark)
        return out

    async def elect_leaders(
        self, election_type: int, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, int]:
        """ElectLeaders (0 PREFERRED, 1 UNCLEAN): error code per partition (0: elected)."""
        listed = None
        if partitions is not None:
            grouped: dict[str, list[int]] = {}
            for tp in partitions:
                grouped.setdefault(tp.topic, []).append(tp.partition)
            listed = [{"topic": t, "partitions": ps} for t, ps in grouped.items()]
        resp = await self._cluster.request_any(
            ApiKey.ELECT_LEADERS,
            {
                "election_type": election_type,
                "topic_partitions": listed,
                "timeout": datetime.timedelta(milliseconds=self.request_timeout_ms),
            },
        )
        code = int(getattr(resp, "error_code", 0))
        if code:
            raise KafkaError(code, "ElectLeaders")
        return {
            TopicPartition(r.topic, int(p.partition_id)): int(p.error_code)
            for r in resp.replica_election_results
            for p in r.partition_result
        }

    async def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, int]:
        """Start (a replica list) or cancel (None) moves: error code per partition."""
        grouped: dict[str, list[dict[str, Any]]] = {}
        for tp, replicas in targets.items():
            grouped.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "replicas": None if replicas is None else list(replicas),
                }
            )
        resp = await self._cluster.request_any(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            {
                "timeout": datetime.timedelta(milliseconds=self.request_timeout_ms),
                "topics": [{"name": t, "partitions": ps} for t, ps in grouped.items()],
            },
        )
        code = int(resp.error_code)
        if code:
            raise KafkaError(code, resp.error_message or "AlterPartitionReassignments")
        return {
            TopicPartition(t.name, int(p.partition_index)): int(p.error_code)
            for t in resp.responses
            for p in t.partitions
        }

    async def list_partition_reassignments(
        self,
    ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """Moves in flight: partition -> (replicas, adding, removing)."""
        resp = await self._cluster.request_any(
            ApiKey.LIST_PARTITION_REASSIGNMENTS,
            {"timeout": datetime.timedelta(milliseconds=self.request_timeout_ms), "topics": None},
        )
        code = int(resp.error_code)
        if code:
            raise KafkaError(code, resp.error_message or "ListPartitionReassignments")
        return {
            TopicPartition(t.name, int(p.partition_index)): (
                [int(b) for b in p.replicas],
                [int(b) for b in p.adding_replicas],
                [int(b) for b in p.removing_replicas],
            )
            for t in resp.topics
            for p in t.partitions
        }


class AdminClient:
    """Blocking admin client (one private event-loop thread)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str = "headwater-admin",
        request_timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self._admin = AsyncAdminClient(
            bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms
        )
        self._thread = EventLoopThread("headwater-admin")
        self._closed = False

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coro: Any) -> Any:
        return self._thread.run(coro)

    def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False) -> None:
        self._run(self._admin.create_topics(list(topics), validate_only=validate_only))

    def delete_topics(self, names: Iterable[str]) -> None:
        self._run(self._admin.delete_topics(list(names)))

    def list_topics(self) -> dict[str, TopicMetadata]:
        result: dict[str, TopicMetadata] = self._run(self._admin.list_topics())
        return result

    def describe_topic(self, name: str) -> TopicMetadata:
        result: TopicMetadata = self._run(self._admin.describe_topic(name))
        return result

    def describe_configs(self, topic: str) -> dict[str, str | None]:
        result: dict[str, str | None] = self._run(self._admin.describe_configs(topic))
        return result

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        self._run(self._admin.create_partitions(name, total, validate_only=validate_only))

    def list_offsets(
        self, partitions: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = self._run(
            self._admin.list_offsets(list(partitions), timestamp)
        )
        return result

    def log_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        result: dict[int, tuple[int, int]] = self._run(self._admin.log_offsets(topic))
        return result

    def list_consumer_group_offsets(
        self, group_id: str, *, require_stable: bool = False
    ) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = self._run(
            self._admin.list_consumer_group_offsets(group_id, require_stable=require_stable)
        )
        return result

    def list_transactions(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = ()
    ) -> list[TransactionListing]:
        result: list[TransactionListing] = self._run(
            self._admin.list_transactions(states, producer_ids)
        )
        return result

    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = self._run(self._admin.delete_records(offsets))
        return result

    def elect_leaders(
        self, election_type: int, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, int]:
        listed = None if partitions is None else list(partitions)
        result: dict[TopicPartition, int] = self._run(
            self._admin.elect_leaders(election_type, listed)
        )
        return result

    def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = self._run(
            self._admin.alter_partition_reassignments(targets)
        )
        return result

    def list_partition_reassignments(
        self,
    ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        result: dict[TopicPartition, tuple[list[int], list[int], list[int]]] = self._run(
            self._admin.list_partition_reassignments()
        )
        return result

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        result: TransactionDescription = self._run(
            self._admin.describe_transaction(transactional_id)
        )
        return result

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._admin.close())
        finally:
            self._thread.stop()
