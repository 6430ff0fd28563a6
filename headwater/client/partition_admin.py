"""Operations on partitions: delete records, producers, leader elections, reassignments.

Kafka's ``Admin`` sends each of these to a particular broker, and so does
this module: DeleteRecords and DescribeProducers to each partition's
leader (grouped per leader, one request each), WriteTxnMarkers (an
operator's abort of a hanging transaction, KIP-664) to the partition's
leader too, and ElectLeaders, AlterPartitionReassignments and
ListPartitionReassignments to the controller named by Metadata.

Every function takes a connected ``ClusterClient`` (so the caller decides
the bootstrap servers and the security settings) and answers per
partition: a partition's error is part of the result, not an exception,
as the Kafka tools print one line per partition. Errors of the whole
request raise ``KafkaError``.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from headwater.client.cluster import ClusterClient
from headwater.client.errors import KafkaError
from headwater.client.types import TopicPartition
from headwater.protocol.apis import ApiKey
from headwater.protocol.error_codes import ErrorCode

DEFAULT_TIMEOUT_MS: Final = 30_000


class ElectionType(enum.IntEnum):
    """KIP-460: move leadership to the preferred replica, or elect outside the ISR."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """One partition's answer: an error code (0 = done) and the broker's message."""

    error_code: int
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error_code == 0

    def error(self) -> KafkaError:
        return KafkaError(self.error_code, self.message)


@dataclass(frozen=True, slots=True)
class DeletedRecords:
    """DeleteRecords' answer for one partition: the new log start offset, or an error."""

    low_watermark: int
    error_code: int = 0
    message: str = ""


@dataclass(frozen=True, slots=True)
class ProducerState:
    """DescribeProducers' view of one producer id on one partition (KIP-664)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction on this partition


@dataclass(frozen=True, slots=True)
class PartitionProducers:
    producers: tuple[ProducerState, ...]
    error_code: int = 0
    message: str = ""


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A partition being moved: its full replica set, and who joins and leaves."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in tps:
        out.setdefault(tp.topic, []).append(tp.partition)
    return {topic: sorted(set(parts)) for topic, parts in sorted(out.items())}


async def _leaders(
    cluster: ClusterClient, tps: Sequence[TopicPartition]
) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
    """Group partitions by leader; the second list holds those without one (or unknown)."""
    await cluster.refresh_metadata(sorted({tp.topic for tp in tps}))
    by_leader: dict[int, list[TopicPartition]] = {}
    leaderless: list[TopicPartition] = []
    for tp in tps:
        leader = cluster.leader(tp)
        if leader is None:
            leaderless.append(tp)
        else:
            by_leader.setdefault(leader, []).append(tp)
    return by_leader, leaderless


def _missing_error(cluster: ClusterClient, tp: TopicPartition) -> tuple[int, str]:
    meta = cluster.topics.get(tp.topic)
    if meta is None or tp.partition not in meta.partitions:
        return ErrorCode.unknown_topic_or_partition, f"{tp.topic}-{tp.partition} does not exist"
    return ErrorCode.leader_not_available, f"{tp.topic}-{tp.partition} has no leader"


async def _controller(cluster: ClusterClient) -> Any:
    """A connection to the controller (any broker when Metadata names none)."""
    await cluster.refresh_metadata([])
    if cluster.controller_id >= 0:
        return await cluster.connection(cluster.controller_id)
    return await cluster.any_connection()


# -- DeleteRecords (API 21) ------------------------------------------------------


async def delete_records(
    cluster: ClusterClient,
    offsets: Mapping[TopicPartition, int],
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[TopicPartition, DeletedRecords]:
    """Move each partition's log start to the offset (-1: its high watermark)."""
    wanted = list(offsets)
    by_leader, leaderless = await _leaders(cluster, wanted)
    out: dict[TopicPartition, DeletedRecords] = {}
    for tp in leaderless:
        code, message = _missing_error(cluster, tp)
        out[tp] = DeletedRecords(-1, code, message)

    async def at(node: int, group: list[TopicPartition]) -> None:
        conn = await cluster.connection(node)
        topics = [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "offset": offsets[TopicPartition(topic, p)]}
                    for p in parts
                ],
            }
            for topic, parts in _by_topic(group).items()
        ]
        resp = await conn.request(ApiKey.DELETE_RECORDS, {"topics": topics, "timeout": timeout_ms})
        for topic in resp.topics:
            for p in topic.partitions:
                code = int(p.error_code)
                out[TopicPartition(topic.name, int(p.partition_index))] = DeletedRecords(
                    int(p.low_watermark),
                    code,
                    "" if not code else f"{topic.name}-{p.partition_index}",
                )

    await asyncio.gather(*(at(node, group) for node, group in by_leader.items()))
    return {tp: out[tp] for tp in wanted}


# -- DescribeProducers (API 61) ----------------------------------------------------


async def describe_producers(
    cluster: ClusterClient, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, PartitionProducers]:
    """The active producer ids of each partition, from its leader's producer state."""
    wanted = list(dict.fromkeys(tps))
    by_leader, leaderless = await _leaders(cluster, wanted)
    out: dict[TopicPartition, PartitionProducers] = {}
    for tp in leaderless:
        code, message = _missing_error(cluster, tp)
        out[tp] = PartitionProducers((), code, message)

    async def at(node: int, group: list[TopicPartition]) -> None:
        conn = await cluster.connection(node)
        topics = [
            {"name": topic, "partition_indexes": parts} for topic, parts in _by_topic(group).items()
        ]
        resp = await conn.request(ApiKey.DESCRIBE_PRODUCERS, {"topics": topics})
        for topic in resp.topics:
            for p in topic.partitions:
                states = tuple(
                    ProducerState(
                        producer_id=int(s.producer_id),
                        producer_epoch=int(s.producer_epoch),
                        last_sequence=int(s.last_sequence),
                        last_timestamp=int(s.last_timestamp),
                        coordinator_epoch=int(s.coordinator_epoch),
                        current_txn_start_offset=int(s.current_txn_start_offset),
                    )
                    for s in p.active_producers
                )
                out[TopicPartition(topic.name, int(p.partition_index))] = PartitionProducers(
                    states, int(p.error_code), p.error_message or ""
                )

    await asyncio.gather(*(at(node, group) for node, group in by_leader.items()))
    return {tp: out[tp] for tp in wanted}


# -- aborting a hanging transaction (WriteTxnMarkers, API 27; KIP-664) ---------------


async def abort_transaction(
    cluster: ClusterClient,
    tp: TopicPartition,
    producer: ProducerState,
) -> PartitionResult:
    """Write an ABORT marker for ``producer``'s open transaction on ``tp``, at its leader.

    This is what ``kafka-transactions.sh abort`` does for a transaction its
    coordinator has forgotten (a *hanging* one): the marker carries the
    producer's id and epoch and the coordinator epoch the partition last saw.
    """
    by_leader, leaderless = await _leaders(cluster, [tp])
    if leaderless:
        return PartitionResult(*_missing_error(cluster, tp))
    (node,) = by_leader
    conn = await cluster.connection(node)
    resp = await conn.request(
        ApiKey.WRITE_TXN_MARKERS,
        {
            "markers": [
                {
                    "producer_id": producer.producer_id,
                    "producer_epoch": producer.producer_epoch,
                    "transaction_result": False,
                    "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
                    "coordinator_epoch": producer.coordinator_epoch,
                }
            ]
        },
    )
    for marker in resp.markers:
        for topic in marker.topics:
            for p in topic.partitions:
                code = int(p.error_code)
                return PartitionResult(code, f"{tp.topic}-{tp.partition}" if code else "")
    return PartitionResult(ErrorCode.unknown_server_error, "the broker answered no partition")


# -- ElectLeaders (API 43; KIP-460) ----------------------------------------------------


async def elect_leaders(
    cluster: ClusterClient,
    election_type: ElectionType,
    partitions: Iterable[TopicPartition] | None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[TopicPartition, PartitionResult]:
    """Elect leaders for the partitions (``None``: every partition), at the controller.

    Per partition: 0 done, ELECTION_NOT_NEEDED (84) when the wanted leader
    already leads, PREFERRED_LEADER_NOT_AVAILABLE (80) or
    ELIGIBLE_LEADERS_NOT_AVAILABLE (83) when no replica can take it.
    """
    conn = await _controller(cluster)
    topic_partitions = (
        None
        if partitions is None
        else [{"topic": t, "partitions": ps} for t, ps in _by_topic(partitions).items()]
    )
    resp = await conn.request(
        ApiKey.ELECT_LEADERS,
        {
            "election_type": int(election_type),
            "topic_partitions": topic_partitions,
            "timeout": timeout_ms,
        },
    )
    code = int(getattr(resp, "error_code", 0))
    if code:
        raise KafkaError(code, "ElectLeaders")
    out: dict[TopicPartition, PartitionResult] = {}
    for topic in resp.replica_election_results:
        for p in topic.partition_result:
            out[TopicPartition(topic.topic, int(p.partition_id))] = PartitionResult(
                int(p.error_code), p.error_message or ""
            )
    return dict(sorted(out.items()))


# -- AlterPartitionReassignments / ListPartitionReassignments (APIs 45, 46; KIP-455) ---


async def alter_partition_reassignments(
    cluster: ClusterClient,
    targets: Mapping[TopicPartition, Sequence[int] | None],
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[TopicPartition, PartitionResult]:
    """Start moving each partition to its target replicas (``None`` cancels a move)."""
    conn = await _controller(cluster)
    topics = [
        {
            "name": topic,
            "partitions": [
                {
                    "partition_index": p,
                    "replicas": (
                        None
                        if targets[TopicPartition(topic, p)] is None
                        else list(targets[TopicPartition(topic, p)] or ())
                    ),
                }
                for p in parts
            ],
        }
        for topic, parts in _by_topic(targets).items()
    ]
    resp = await conn.request(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"timeout": timeout_ms, "topics": topics}
    )
    code = int(resp.error_code)
    if code:
        raise KafkaError(code, resp.error_message or "AlterPartitionReassignments")
    out: dict[TopicPartition, PartitionResult] = {}
    for topic in resp.responses:
        for p in topic.partitions:
            out[TopicPartition(topic.name, int(p.partition_index))] = PartitionResult(
                int(p.error_code), p.error_message or ""
            )
    return dict(sorted(out.items()))


async def list_partition_reassignments(
    cluster: ClusterClient,
    partitions: Iterable[TopicPartition] | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[TopicPartition, OngoingReassignment]:
    """The reassignments in progress (of ``partitions``, or all)."""
    conn = await _controller(cluster)
    topics = (
        None
        if partitions is None
        else [{"name": t, "partition_indexes": ps} for t, ps in _by_topic(partitions).items()]
    )
    resp = await conn.request(
        ApiKey.LIST_PARTITION_REASSIGNMENTS, {"timeout": timeout_ms, "topics": topics}
    )
    code = int(resp.error_code)
    if code:
        raise KafkaError(code, resp.error_message or "ListPartitionReassignments")
    out: dict[TopicPartition, OngoingReassignment] = {}
    for topic in resp.topics:
        for p in topic.partitions:
            out[TopicPartition(topic.name, int(p.partition_index))] = OngoingReassignment(
                tuple(int(r) for r in p.replicas),
                tuple(int(r) for r in p.adding_replicas),
                tuple(int(r) for r in p.removing_replicas),
            )
    return dict(sorted(out.items()))


# -- AlterReplicaLogDirs (API 34; KIP-113) ----------------------------------------------


async def alter_replica_log_dirs(
    cluster: ClusterClient, broker: int, dirs: Mapping[TopicPartition, str]
) -> dict[TopicPartition, int]:
    """Ask ``broker`` to move its replica of each partition to the given data directory;
    the error code of each (REPLICA_NOT_AVAILABLE: no replica there yet, the directory is
    remembered for when it is created)."""
    conn = await cluster.connection(broker)
    by_dir: dict[str, dict[str, list[int]]] = {}
    for tp, path in dirs.items():
        by_dir.setdefault(path, {}).setdefault(tp.topic, []).append(tp.partition)
    resp = await conn.request(
        ApiKey.ALTER_REPLICA_LOG_DIRS,
        {
            "dirs": [
                {
                    "path": path,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                }
                for path, topics in by_dir.items()
            ]
        },
    )
    return {
        TopicPartition(t.topic_name, int(p.partition_index)): int(p.error_code)
        for t in resp.results
        for p in t.partitions
    }
