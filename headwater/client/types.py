"""The client's public value types, named as Kafka's clients name them.

Plain ``NamedTuple``s: cheap to build by the hundred thousand on the
consumer's decode path, picklable for Spark, and unpackable like
kafka-python's equivalents.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

Header = tuple[str, bytes | None]

CREATE_TIME = 0
LOG_APPEND_TIME = 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class ConsumerRecord(NamedTuple):
    """One record handed to the application.

    ``timestamp_type`` is Kafka's: 0 CreateTime, 1 LogAppendTime.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


class RecordMetadata(NamedTuple):
    """Where the broker stored a produced record (acks=0: offset -1)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class PartitionMetadata(NamedTuple):
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


class TopicMetadata(NamedTuple):
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionMetadata]
    is_internal: bool = False


class BrokerMetadata(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class ConsumerGroupMetadata(NamedTuple):
    """The group a transaction commits offsets for (KIP-447).

    A plain group id (generation -1, no member) suits an application that
    assigns partitions itself; a member of a live group passes its
    generation and member id so the coordinator can fence a zombie member.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TransactionHandle(NamedTuple):
    """What it takes to end a transaction from another process (EndTxn on its behalf)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
