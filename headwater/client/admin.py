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
from headwater.client.types import BrokerMetadata, TopicMetadata, TopicPartition
from headwater.protocol.apis import ApiKey
from headwater.security.client_security import ClientSecurity

TOPIC_RESOURCE: Final = 2
DEFAULT_TIMEOUT_MS: Final = 30_000
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
TOPIC_AUTHORIZATION_FAILED: Final = 29

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
        security: ClientSecurity | None = None,
    ) -> None:
        self.request_timeout_ms = request_timeout_ms
        self._cluster = ClusterClient(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
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

    async def create_topic_with_assignment(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        configs: _Configs = None,
        *,
        validate_only: bool = False,
    ) -> None:
        """CreateTopics with explicit replicas per partition (the broker then places
        nothing itself: how ``--disable-rack-aware`` reaches it)."""
        request = {
            "name": name,
            "num_partitions": -1,
            "replication_factor": -1,
            "assignments": [
                {"partition_index": p, "broker_ids": list(r)} for p, r in sorted(assignment.items())
            ],
            "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()],
        }
        resp = await self._cluster.request_any(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [request],
                "timeout": self.request_timeout_ms,
                "validate_only": validate_only,
            },
        )
        _raise_first(
            [
                KafkaError(int(t.error_code), t.error_message or f"creating topic {t.name!r}")
                for t in resp.topics
                if int(t.error_code)
            ]
        )

    async def brokers(self) -> dict[int, BrokerMetadata]:
        """Every live broker with its rack, from Metadata (what placement plans need)."""
        await self._cluster.refresh_metadata([])
        return dict(sorted(self._cluster.brokers.items()))

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
            code = self._cluster.topic_errors.get(name, UNKNOWN_TOPIC_OR_PARTITION)
            if code == TOPIC_AUTHORIZATION_FAILED:
                raise KafkaError(code, f"not authorized to describe topic {name!r}")
            if code == UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(code, f"topic {name!r} does not exist")
            raise KafkaError(code, f"topic {name!r}")
        return found

    async def describe_configs(self, topic: str) -> dict[str, str | None]:
        entries = await self.describe_config_entries(topic)
        return {name: value for name, (value, _) in entries.items()}

    async def describe_config_entries(
        self, name: str, resource_type: int = TOPIC_RESOURCE
    ) -> dict[str, tuple[str | None, int]]:
        """name -> (value, DescribeConfigs config_source) of a topic's (or a broker's) configs.

        Source 1 is a topic override, 2/3 dynamic broker configs, 4 static, 5 a default.
        """
        resp = await self._cluster.request_any(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": resource_type,
                        "resource_name": name,
                        "configuration_keys": None,
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        what = "topic" if resource_type == TOPIC_RESOURCE else "broker"
        out: dict[str, tuple[str | None, int]] = {}
        for result in resp.results:
            code = int(result.error_code)
            if code:
                raise KafkaError(code, result.error_message or f"describing {what} {name!r}")
            for entry in result.configs:
                source = getattr(entry, "config_source", None)
                if source is None:  # DescribeConfigs v0: only is_default
                    source = 5 if entry.is_default else 1
                out[entry.name] = (entry.value, int(source))
        return out

    async def create_partitions(
        self,
        name: str,
        total: int,
        *,
        validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Grow ``name`` to ``total`` partitions; ``assignments``: the replicas of each
        new partition in order, else the broker places them."""
        given = None if assignments is None else [{"broker_ids": list(r)} for r in assignments]
        resp = await self._cluster.request_any(
            ApiKey.CREATE_PARTITIONS,
            {
                "topics": [{"name": name, "count": total, "assignments": given}],
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


class AdminClient:
    """Blocking admin client (one private event-loop thread)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str = "headwater-admin",
        request_timeout_ms: int = DEFAULT_TIMEOUT_MS,
        security: ClientSecurity | None = None,
    ) -> None:
        self._admin = AsyncAdminClient(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
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

    def describe_config_entries(
        self, name: str, resource_type: int = TOPIC_RESOURCE
    ) -> dict[str, tuple[str | None, int]]:
        result: dict[str, tuple[str | None, int]] = self._run(
            self._admin.describe_config_entries(name, resource_type)
        )
        return result

    def create_partitions(
        self,
        name: str,
        total: int,
        *,
        validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> None:
        self._run(
            self._admin.create_partitions(
                name, total, validate_only=validate_only, assignments=assignments
            )
        )

    def create_topic_with_assignment(
        self, name: str, assignment: Mapping[int, Sequence[int]], configs: _Configs = None
    ) -> None:
        self._run(self._admin.create_topic_with_assignment(name, assignment, configs))

    def brokers(self) -> dict[int, BrokerMetadata]:
        result: dict[int, BrokerMetadata] = self._run(self._admin.brokers())
        return result

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
