"""What the driver asks the broker before planning: partitions and their log bounds.

Both readers plan from a ``LogBounds`` snapshot (the subscribed partitions
with their log start and end offsets, the end being the last stable offset
under ``read_committed``); taking it in one place keeps the planning code
pure and makes the broker round trips per snapshot easy to count: a
Metadata request per topic (plus one for a pattern) and two ListOffsets
requests. Retriable failures (a broker restarting, a connection lost) are
retried with a fresh client, as Spark's Kafka source does with
``fetchOffset.numRetries`` and ``fetchOffset.retryIntervalMs``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from headwater.client.errors import KafkaError
from headwater.client.types import TopicPartition
from headwater.spark.clients import ClientConfig, discard, pooled_consumer
from headwater.spark.offsets import OffsetMap
from headwater.spark.subscription import Subscription


@dataclass(frozen=True)
class LogBounds:
    """The subscribed partitions right now, each with ``[earliest, latest)``."""

    earliest: OffsetMap
    latest: OffsetMap

    @property
    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self.latest)


log = logging.getLogger(__name__)


def fetch_log_bounds(
    config: ClientConfig,
    subscription: Subscription,
    retries: int = 0,
    retry_interval_s: float = 1.0,
) -> LogBounds:
    """Query metadata then both ends of every subscribed partition, retrying transient errors."""
    attempt = 0
    while True:
        try:
            return _fetch_log_bounds(config, subscription)
        except (KafkaError, OSError, TimeoutError) as e:
            if attempt >= retries or (isinstance(e, KafkaError) and not e.retriable):
                raise
            attempt += 1
            log.warning("fetching offsets failed (%s); retry %d of %d", e, attempt, retries)
            discard(config)
            time.sleep(retry_interval_s)


def _fetch_log_bounds(config: ClientConfig, subscription: Subscription) -> LogBounds:
    consumer = pooled_consumer(config)
    names = subscription.topics_of_interest()
    if names is None:
        names = tuple(sorted(consumer.topics()))
    by_topic: dict[str, list[int]] = {}
    for name in names:
        parts = consumer.partitions_for(name)
        if parts is not None:
            by_topic[name] = sorted(parts)
    selected = [TopicPartition(t, p) for t, p in subscription.select(by_topic)]
    if not selected:
        return LogBounds({}, {})
    earliest = consumer.beginning_offsets(selected)
    latest = consumer.end_offsets(selected)
    return LogBounds(
        {(tp.topic, tp.partition): earliest[tp] for tp in selected},
        {(tp.topic, tp.partition): latest[tp] for tp in selected},
    )
