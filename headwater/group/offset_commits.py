"""Who may commit or delete a group's offsets: Kafka's OffsetMetadataManager.

`OffsetStore` keeps the offsets and their records; whether a request may
change them depends on the group's membership (generation, member id,
subscriptions), which is decided here, before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.coordinator.replication import coordinator_error
from headwater.coordinator.state_log import AppendFailed
from headwater.group.group_store import GroupStore
from headwater.group.membership import Group, GroupState
from headwater.group.offsets import OffsetCommitEntry, TopicPartition
from headwater.group.storage import CommittedOffset
from headwater.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    decode_subscription,
)


class OffsetCommits:
    """OffsetCommit and OffsetDelete for the groups of one `GroupStore`."""

    def __init__(self, store: GroupStore) -> None:
        self._store = store

    def commit(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        entries: Sequence[OffsetCommitEntry],
        timestamp_ms: int,
        group_instance_id: str | None = None,
        api_version: int = 9,
    ) -> Pending[list[ErrorCode]]:
        """OffsetCommit: one error per entry, in order, once the commit is replicated.

        Members of a group must name their current generation; a consumer that
        manages its own partitions (generation -1, no member id) may commit
        only while the group has no members. The offsets are visible to
        OffsetFetch once replicated; a failed replication leaves them out.
        """
        partition_errors = [
            self._store.offsets.partition_error(e.topic, e.partition) for e in entries
        ]
        consumer_group = self._store.consumer_groups.get(group_id)
        if consumer_group is not None:
            # KIP-848: the generation field carries the member epoch (STALE_MEMBER_EPOCH).
            error = consumer_group.validate_offset_commit(
                member_id, generation_id, transactional=False, api_version=api_version
            )
            return self._commit_checked(group_id, entries, partition_errors, error, timestamp_ms)
        group = self._store.groups.get(group_id)
        error = ErrorCode.none
        if group is None:
            if generation_id >= 0:
                error = ErrorCode.illegal_generation
        elif group.state is GroupState.DEAD:
            error = ErrorCode.coordinator_not_available
        elif generation_id < 0 and group.state is GroupState.EMPTY:
            pass  # the group only uses Kafka to store offsets
        elif generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error is ErrorCode.none and generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
            if error is ErrorCode.none and group.state is GroupState.COMPLETING_REBALANCE:
                # It has the new generation but not yet its assignment.
                error = ErrorCode.rebalance_in_progress
        elif group.state is not GroupState.EMPTY:
            error = ErrorCode.unknown_member_id
        if error is not ErrorCode.none:
            return Pending.completed(
                [e if e is not ErrorCode.none else error for e in partition_errors]
            )
        valid = [
            entry for entry, e in zip(entries, partition_errors, strict=True) if e is ErrorCode.none
        ]
        if group is None:
            if not valid:
                return Pending.completed(partition_errors)
            group = self._store.groups[group_id] = Group(group_id, empty_since_ms=now_ms)
        member = group.members.get(member_id)
        if member is not None:
            member.touch(now_ms)
        return self._append(
            group_id,
            valid,
            partition_errors,
            timestamp_ms=timestamp_ms,
            producer=None,
            on_replicated=lambda accepted: self._store.offsets.apply(group_id, accepted),
        )

    def txn_commit(
        self,
        now_ms: int,
        *,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        entries: Sequence[OffsetCommitEntry],
        timestamp_ms: int,
    ) -> Pending[list[ErrorCode]]:
        """TxnOffsetCommit: the offsets are written in the producer's transaction and
        held pending until its marker (`GroupStore.complete_txn`).

        KIP-447: a producer that names its consumer's group metadata is checked
        against the group, so a zombie from an old generation cannot commit
        (Kafka's doTxnCommitOffsets: FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION). A group the coordinator does not know is created.
        """
        partition_errors = [
            self._store.offsets.partition_error(e.topic, e.partition) for e in entries
        ]
        consumer_group = self._store.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = consumer_group.validate_offset_commit(
                member_id, generation_id, transactional=True, api_version=-1
            )
            return self._commit_checked(
                group_id,
                entries,
                partition_errors,
                error,
                timestamp_ms,
                producer=(producer_id, producer_epoch),
            )
        group = self._store.groups.get(group_id)
        error = ErrorCode.none
        if group is not None:
            if group.state is GroupState.DEAD:
                error = ErrorCode.coordinator_not_available
            elif (
                group_instance_id is not None
                and group.static_members.get(group_instance_id, member_id) != member_id
            ):
                error = ErrorCode.fenced_instance_id
            elif member_id and member_id not in group.members:
                error = ErrorCode.unknown_member_id
            elif generation_id >= 0 and generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
        elif member_id:
            error = ErrorCode.unknown_member_id
        elif generation_id >= 0:
            error = ErrorCode.illegal_generation
        if error is ErrorCode.none and group is None:
            self._store.groups[group_id] = Group(group_id, empty_since_ms=now_ms)
        return self._commit_checked(
            group_id,
            entries,
            partition_errors,
            error,
            timestamp_ms,
            producer=(producer_id, producer_epoch),
        )

    def _commit_checked(
        self,
        group_id: str,
        entries: Sequence[OffsetCommitEntry],
        partition_errors: list[ErrorCode],
        error: ErrorCode,
        timestamp_ms: int,
        producer: tuple[int, int] | None = None,
    ) -> Pending[list[ErrorCode]]:
        """A commit whose group check is done: ``error`` on every partition, or write
        the valid entries (committed at once, or pending in ``producer``'s transaction)."""
        if error is not ErrorCode.none:
            return Pending.completed(
                [e if e is not ErrorCode.none else error for e in partition_errors]
            )
        valid = [
            entry for entry, e in zip(entries, partition_errors, strict=True) if e is ErrorCode.none
        ]

        def on_replicated(accepted: dict[TopicPartition, CommittedOffset]) -> None:
            if producer is None:
                self._store.offsets.apply(group_id, accepted)
            else:
                self._store.pending_txn.add(producer[0], group_id, accepted)

        return self._append(
            group_id,
            valid,
            partition_errors,
            timestamp_ms=timestamp_ms,
            producer=producer,
            on_replicated=on_replicated,
        )

    def _append(
        self,
        group_id: str,
        valid: list[OffsetCommitEntry],
        partition_errors: list[ErrorCode],
        *,
        timestamp_ms: int,
        producer: tuple[int, int] | None,
        on_replicated: Callable[[dict[TopicPartition, CommittedOffset]], None],
    ) -> Pending[list[ErrorCode]]:
        """Write the valid entries; once replicated, ``on_replicated(accepted)`` and answer.

        The one path of OffsetCommit and TxnOffsetCommit: they differ only in
        whose batch it is (``producer``) and where accepted offsets go (the
        committed table, or pending until the transaction's marker).
        """
        try:
            appended = self._store.offsets.commit(
                group_id, valid, timestamp_ms=timestamp_ms, producer=producer
            )
        except AppendFailed as failed:
            refused = coordinator_error(failed.error, commit=True)
            return Pending.completed(
                [refused if e is ErrorCode.none else e for e in partition_errors]
            )
        stored = iter(appended.errors)
        errors = [next(stored) if e is ErrorCode.none else e for e in partition_errors]
        if appended.end_offset is None:
            return Pending.completed(errors)
        replicating = self._store.commits_replicating
        replicating[group_id] += 1

        def answer(replication_error: ErrorCode) -> list[ErrorCode]:
            replicating[group_id] -= 1
            if not replicating[group_id]:
                del replicating[group_id]
            if replication_error is ErrorCode.none:
                on_replicated(appended.accepted)
                return errors
            failed = coordinator_error(replication_error, commit=True)
            return [failed if e is ErrorCode.none else e for e in errors]

        return self._store.replicated(appended.end_offset).map(answer)

    def delete(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete: only offsets of topics the group's members do not subscribe to."""
        group = self._store.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found, []
        subscribed: frozenset[str] = frozenset()
        if group.state is not GroupState.EMPTY and group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            topics = self._subscribed_topics(group)
            if topics is None:
                return ErrorCode.non_empty_group, []
            subscribed = topics
        errors: list[ErrorCode] = []
        doomed: list[TopicPartition] = []
        for topic, partition in partitions:
            error = self._store.offsets.partition_error(topic, partition)
            if error is not ErrorCode.none:
                errors.append(error)
            elif topic in subscribed:
                errors.append(ErrorCode.group_subscribed_to_topic)
            else:
                errors.append(ErrorCode.none)
                doomed.append((topic, partition))
        try:
            self._store.offsets.delete(group_id, doomed)
        except AppendFailed as failed:
            return coordinator_error(failed.error), []
        return ErrorCode.none, errors

    @staticmethod
    def _subscribed_topics(group: Group) -> frozenset[str] | None:
        """Union of the members' subscribed topics, or None if it cannot be known."""
        if group.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            try:
                topics.update(decode_subscription(member.metadata(group.protocol_name)).topics)
            except ConsumerProtocolError:
                return None
        return frozenset(topics)
