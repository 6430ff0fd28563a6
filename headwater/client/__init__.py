"""Headwater's own Kafka client: consumer with KIP-227 sessions, producer, admin.

The blocking classes (``Consumer``, ``Producer``, ``AdminClient``) suit
scripts, the CLI and Spark tasks; their ``Async*`` twins run on the
caller's asyncio loop.

The names below are imported on first use (PEP 562): importing one
submodule (``headwater.client.errors``, say) then loads only what it
needs. Spark starts a fresh Python process for every streaming query's
reader, and the producer and admin stacks it never uses cost it ~0.1 s.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headwater.client.admin import AdminClient, AsyncAdminClient
    from headwater.client.consumer import AsyncConsumer, Consumer
    from headwater.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
    from headwater.client.producer import AsyncProducer, Producer
    from headwater.client.session_handler import FetchSessionHandler
    from headwater.client.types import (
        ConsumerRecord,
        PartitionMetadata,
        RecordMetadata,
        TopicMetadata,
        TopicPartition,
    )

_HOMES = {
    "AdminClient": "admin",
    "AsyncAdminClient": "admin",
    "AsyncConsumer": "consumer",
    "Consumer": "consumer",
    "KafkaConnectionError": "errors",
    "KafkaError": "errors",
    "KafkaTimeoutError": "errors",
    "AsyncProducer": "producer",
    "Producer": "producer",
    "FetchSessionHandler": "session_handler",
    "ConsumerRecord": "types",
    "PartitionMetadata": "types",
    "RecordMetadata": "types",
    "TopicMetadata": "types",
    "TopicPartition": "types",
}

__all__ = [
    "AdminClient",
    "AsyncAdminClient",
    "AsyncConsumer",
    "AsyncProducer",
    "Consumer",
    "ConsumerRecord",
    "FetchSessionHandler",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "PartitionMetadata",
    "Producer",
    "RecordMetadata",
    "TopicMetadata",
    "TopicPartition",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
