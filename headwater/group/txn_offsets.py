"""Offsets committed inside a transaction (TxnOffsetCommit, KIP-98/447), held until it ends.

A transactional producer commits its consumer's offsets with the same
producer id as its output records; the records go into ``__consumer_offsets``
in a transactional batch, and the offsets must become visible exactly when
the output does. So they wait here, per producer id, until the transaction
coordinator's marker reaches the offsets partition: COMMIT moves them into
the committed offsets, ABORT drops them (Kafka's
``pendingTransactionalOffsetCommits``). A replay does the same with the
markers it finds in the log, so a restart or failover keeps the outcome.
While any are pending for a partition, OffsetFetch with ``require_stable``
answers UNSTABLE_OFFSET_COMMIT for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from headwater.group.storage import CommittedOffset

TopicPartition = tuple[str, int]
#: group id -> partition -> offset
GroupOffsets = dict[str, dict[TopicPartition, CommittedOffset | None]]


class PendingTxnOffsets:
    """producer id -> group -> partition -> the offset (None: a transactional tombstone)."""

    def __init__(self) -> None:
        self._by_producer: dict[int, GroupOffsets] = {}

    def add(
        self,
        producer_id: int,
        group_id: str,
        offsets: Mapping[TopicPartition, CommittedOffset | None],
    ) -> None:
        self._by_producer.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)

    def complete(self, producer_id: int) -> GroupOffsets:
        """The producer's transaction ended: its pending offsets (to apply on COMMIT)."""
        return self._by_producer.pop(producer_id, {})

    def is_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in groups.get(group_id, {}) for groups in self._by_producer.values())

    def has_group(self, group_id: str) -> bool:
        return any(group_id in groups for groups in self._by_producer.values())

    def producers(self) -> list[int]:
        return list(self._by_producer)

    def forget_group(self, group_id: str) -> None:
        for groups in self._by_producer.values():
            groups.pop(group_id, None)

    def clear(self) -> None:
        self._by_producer.clear()
