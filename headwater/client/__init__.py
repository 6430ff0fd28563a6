"""Headwater's own Kafka client: consumer with KIP-227 sessions, producer, admin.

The blocking classes (``Consumer``, ``Producer``, ``AdminClient``) suit
scripts, the CLI and Spark tasks; their ``Async*`` twins run on the
caller's asyncio loop.
"""

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
