"""Errors a record payload can fail with, each carrying the Kafka error code to answer.

The broker maps an exception to a response by its ``kafka_error_code`` so
that no layer needs a table of exception types.
"""

from __future__ import annotations

from typing import ClassVar


class KafkaApiError(Exception):
    """Base of every error that becomes a Kafka error code on the wire."""

    kafka_error_code: ClassVar[int] = -1  # UNKNOWN_SERVER_ERROR


class CorruptRecordError(KafkaApiError):
    """A batch failed a structural or CRC check (CORRUPT_MESSAGE)."""

    kafka_error_code: ClassVar[int] = 2


class RecordTooLargeError(KafkaApiError):
    """One batch is larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE)."""

    kafka_error_code: ClassVar[int] = 10


class RecordBatchTooLargeError(KafkaApiError):
    """A whole append is larger than a segment can hold (RECORD_LIST_TOO_LARGE)."""

    kafka_error_code: ClassVar[int] = 18
