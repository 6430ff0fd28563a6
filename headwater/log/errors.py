"""Errors the log layer raises, each carrying the Kafka error code the broker answers with."""

from __future__ import annotations

from typing import ClassVar

from headwater.records.errors import (
    CorruptRecordError,
    KafkaApiError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)

__all__ = [
    "CorruptRecordError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "KafkaApiError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "TopicExistsError",
    "TransactionCoordinatorFencedError",
    "UnexpectedAppendOffsetError",
    "UnknownTopicOrPartitionError",
]


class OffsetOutOfRangeError(KafkaApiError):
    """A fetch offset below the log start or past the readable end."""

    kafka_error_code: ClassVar[int] = 1


class UnknownTopicOrPartitionError(KafkaApiError):
    kafka_error_code: ClassVar[int] = 3


class InvalidTopicError(KafkaApiError):
    """A topic name Kafka would refuse (characters, length, '.'/'..', collisions)."""

    kafka_error_code: ClassVar[int] = 17


class TopicExistsError(KafkaApiError):
    kafka_error_code: ClassVar[int] = 36


class InvalidPartitionsError(KafkaApiError):
    """A partition count below 1, or not above the current one when adding partitions."""

    kafka_error_code: ClassVar[int] = 37


class InvalidRecordError(KafkaApiError):
    """A record the log refuses, e.g. one without a key in a compacted topic (INVALID_RECORD)."""

    kafka_error_code: ClassVar[int] = 87


class InvalidConfigError(KafkaApiError):
    """A log config value that does not parse or is out of range."""

    kafka_error_code: ClassVar[int] = 40


class OutOfOrderSequenceError(KafkaApiError):
    """An idempotent producer skipped or reordered sequence numbers."""

    kafka_error_code: ClassVar[int] = 45


class InvalidProducerEpochError(KafkaApiError):
    """A batch from a producer epoch older than one already seen (a fenced producer)."""

    kafka_error_code: ClassVar[int] = 47


class InvalidTxnStateError(KafkaApiError):
    """A non-transactional batch from a producer whose transaction is open."""

    kafka_error_code: ClassVar[int] = 48


class TransactionCoordinatorFencedError(KafkaApiError):
    """A marker from a coordinator epoch older than one already seen for the producer."""

    kafka_error_code: ClassVar[int] = 52


class UnexpectedAppendOffsetError(KafkaApiError):
    """A follower's batches do not start at its log end or do not increase.

    Internal to replication (the replica fetcher handles it by re-fetching or
    truncating); should it ever reach a client it is UNKNOWN_SERVER_ERROR.
    """

    kafka_error_code: ClassVar[int] = -1


class KafkaStorageError(KafkaApiError):
    """The log directory could not take the write (full, below its free-space floor, or
    offline after an I/O error): KAFKA_STORAGE_ERROR, which clients retry (Kafka, KIP-112).

    Raised before anything the append changes is visible: the log end, the producer
    table and the leader-epoch cache are as they were, so an idempotent producer's
    retry of the same batch is accepted at the same sequence once space returns.
    """

    kafka_error_code: ClassVar[int] = 56
