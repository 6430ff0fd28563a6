"""Committed offsets of every group, kept in memory and made durable in the offsets log.

This module checks what a single partition's commit needs (the partition exists,
the metadata fits `offset.metadata.max.bytes`) and owns the offsets' records.
Whether the committer may commit at all (generation, member id) depends on the
group's membership, so `GroupCoordinator.commit_offsets` decides that first and
then calls `OffsetStore.commit`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from headwater.coordinator.state_log import LogEntry, StateLog
from headwater.group.storage import CommittedOffset, OffsetKey, encode_key, encode_offset_value

DEFAULT_MAX_METADATA_BYTES = 4096

PartitionExists = Callable[[str, int], bool]
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    """One partition of an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class AppendedCommit:
    """A commit written to the log but not yet visible: `end_offset` is None if nothing was."""

    errors: list[ErrorCode]
    accepted: dict[TopicPartition, CommittedOffset]
    end_offset: int | None


class OffsetStore:
    """Group id -> partition -> last committed offset, rebuilt from the log on start."""

    def __init__(
        self,
        log: StateLog,
        partition_exists: PartitionExists,
        *,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
    ) -> None:
        self._log = log
        self._partition_exists = partition_exists
        self._max_metadata_bytes = max_metadata_bytes
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def partition_error(self, topic: str, partition: int) -> ErrorCode:
        """The error this partition gets whatever the group's state (checked first, as Kafka)."""
        if not self._partition_exists(topic, partition):
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.none

    def commit(
        self,
        group_id: str,
        entries: Sequence[OffsetCommitEntry],
        *,
        timestamp_ms: int,
        producer: tuple[int, int] | None = None,
    ) -> AppendedCommit:
        """Append the valid entries in one batch; one error per entry, in order.

        Memory changes only with `apply`, once the append is replicated.
        With ``producer`` (id, epoch) the records are a transactional batch.
        Kafka measures metadata in characters (Java String.length), so do we.
        """
        errors: list[ErrorCode] = []
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for entry in entries:
            error = self.partition_error(entry.topic, entry.partition)
            metadata = entry.metadata if entry.metadata is not None else ""
            if error is ErrorCode.none and len(metadata) > self._max_metadata_bytes:
                error = ErrorCode.offset_metadata_too_large
            if error is ErrorCode.none:
                accepted[(entry.topic, entry.partition)] = CommittedOffset(
                    offset=entry.offset,
                    leader_epoch=entry.leader_epoch,
                    metadata=metadata,
                    commit_timestamp_ms=timestamp_ms,
                )
            errors.append(error)
        end_offset = None
        if accepted:
            records = [
                (encode_key(OffsetKey(group_id, topic, partition)), encode_offset_value(value))
                for (topic, partition), value in accepted.items()
            ]
            if producer is None:
                end_offset = self._log.append(records)
            else:
                # TxnOffsetCommit: part of the producer's transaction (see txn_offsets.py).
                end_offset = self._log.append_transactional(records, *producer)
        return AppendedCommit(errors, accepted, end_offset)

    def apply(self, group_id: str, accepted: Mapping[TopicPartition, CommittedOffset]) -> None:
        """Make a replicated commit visible."""
        if accepted:
            self._offsets.setdefault(group_id, {}).update(accepted)

    def fetch(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> list[tuple[str, int, CommittedOffset | None]]:
        """Committed offsets of the given partitions (None = not committed), or all of them."""
        committed = self._offsets.get(group_id, {})
        if partitions is None:
            return [(topic, partition, value) for (topic, partition), value in committed.items()]
        return [
            (topic, partition, committed.get((topic, partition))) for topic, partition in partitions
        ]

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._offsets.get(group_id))

    def group_ids(self) -> Iterable[str]:
        return [group_id for group_id, offsets in self._offsets.items() if offsets]

    def delete(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Forget the partitions' commits, with tombstones so a replay forgets them too."""
        committed = self._offsets.get(group_id, {})
        doomed = [tp for tp in dict.fromkeys(partitions) if tp in committed]
        if not doomed:
            return
        self._log.append(
            [
                (encode_key(OffsetKey(group_id, topic, partition)), None)
                for topic, partition in doomed
            ]
        )
        for tp in doomed:
            del committed[tp]

    def tombstones_for_group(self, group_id: str) -> list[LogEntry]:
        """Records deleting all of a group's offsets, for the caller's atomic append."""
        return [
            (encode_key(OffsetKey(group_id, topic, partition)), None)
            for topic, partition in self._offsets.get(group_id, {})
        ]

    def clear(self) -> None:
        """Forget every group's offsets (the partition moved to another coordinator)."""
        self._offsets.clear()

    def forget_group(self, group_id: str) -> None:
        """Drop a group's offsets from memory once its tombstones are durable."""
        self._offsets.pop(group_id, None)

    def load(self, key: OffsetKey, value: CommittedOffset | None) -> None:
        """Apply one replayed record: the latest value wins, a tombstone deletes."""
        tp = (key.topic, key.partition)
        if value is None:
            group = self._offsets.get(key.group_id)
            if group is not None:
                group.pop(tp, None)
        else:
            self._offsets.setdefault(key.group_id, {})[tp] = value

    def live_records(self) -> Iterator[LogEntry]:
        """The current offsets as records: what a compacted log would contain."""
        for group_id, committed in self._offsets.items():
            for (topic, partition), value in committed.items():
                yield encode_key(OffsetKey(group_id, topic, partition)), encode_offset_value(value)
