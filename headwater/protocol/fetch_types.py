"""Plain values shared by the Fetch codec, the fetch planner and fetch sessions.

They carry no behaviour so that every layer (codec, sessions, planner,
server) can be tested by building them by hand.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from headwater.protocol.file_slice import FileSlice

__all__ = [
    "ZERO_UUID",
    "AbortedTransaction",
    "FetchRequestData",
    "FetchResponseData",
    "PartitionData",
    "PartitionFetch",
    "TopicIdPartition",
]

ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class AbortedTransaction:
    """What a fetch response lists per aborted transaction (the wire's AbortedTransaction).

    The log's transaction index makes them; the codec writes them.
    """

    producer_id: int
    first_offset: int


class TopicIdPartition(NamedTuple):
    """A partition as fetch sessions key it: by id when the client uses ids (v13+)."""

    topic_id: uuid.UUID
    topic: str
    partition: int


@dataclass(slots=True)
class PartitionFetch:
    """One partition of a FetchRequest, as decoded from the wire."""

    topic_id: uuid.UUID
    topic: str  # resolved name; "" when the id is unknown to the broker
    partition: int
    fetch_offset: int
    log_start_offset: int = -1
    partition_max_bytes: int = 1 << 20
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1

    @property
    def key(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic, self.partition)


@dataclass(slots=True)
class FetchRequestData:
    """A decoded FetchRequest (any version 4..16); absent fields take Kafka's defaults."""

    version: int
    replica_id: int = -1
    max_wait_ms: int = 0
    min_bytes: int = 0
    max_bytes: int = 0x7FFFFFFF
    isolation_level: int = 0
    session_id: int = 0
    session_epoch: int = -1
    partitions: list[PartitionFetch] = field(default_factory=list)
    forgotten: list[TopicIdPartition] = field(default_factory=list)
    rack_id: str = ""

    @property
    def uses_topic_ids(self) -> bool:
        return self.version >= 13


@dataclass(slots=True)
class PartitionData:
    """What the broker answers for one partition."""

    topic_id: uuid.UUID
    topic: str
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: FileSlice | bytes | memoryview | None = None
    aborted_transactions: list[AbortedTransaction] | None = None
    preferred_read_replica: int = -1
    #: v12+ tagged field 0 for followers whose log diverged from the leader's:
    #: the largest epoch both share and where it ends on the leader (-1: none).
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    #: Not on the wire: where this fetch's isolation let it read to (the log
    #: end for followers), so a session knows whether the fetcher caught up.
    readable_end: int = -1

    @property
    def key(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic, self.partition)

    @property
    def records_size(self) -> int:
        r = self.records
        if r is None:
            return 0
        return r.size if isinstance(r, FileSlice) else len(r)


@dataclass(slots=True)
class FetchResponseData:
    """A FetchResponse before encoding; partitions in the order they are sent."""

    error_code: int = 0
    session_id: int = 0
    throttle_time_ms: int = 0
    partitions: list[PartitionData] = field(default_factory=list)
