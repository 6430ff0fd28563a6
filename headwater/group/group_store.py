"""The groups of one offsets partition and their records: Kafka's GroupMetadataManager.

`GroupCoordinator` decides what happens to a group (the rebalance protocol);
this store keeps what it decided, in memory and as records in the partition's
`StateLog`, and rebuilds it from them. Writes the coordinator answers after
(a commit, an assignment) return a `Pending[ErrorCode]` from the `Replicated`
hook; tombstones do not wait, as in Kafka (a lost one is written again by the
next deletion).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.coordinator.replication import Replicated, coordinator_error, replicated_at_once
from headwater.coordinator.state_log import (
    AppendFailed,
    LogEntry,
    ReplayItem,
    StateLog,
    TxnEnd,
    TxnLogEntry,
)
from headwater.group.consumer_group import ConsumerGroup
from headwater.group.consumer_group_records import CONSUMER_GROUP_RECORD_TYPES, record_type
from headwater.group.consumer_group_replay import apply_record
from headwater.group.membership import Group, GroupState, Member
from headwater.group.offsets import DEFAULT_MAX_METADATA_BYTES, OffsetStore, PartitionExists
from headwater.group.storage import (
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
)
from headwater.group.txn_offsets import PendingTxnOffsets


class GroupStore:
    """Group id -> `Group`, the committed offsets, and the log they are kept in."""

    def __init__(
        self,
        log: StateLog,
        partition_exists: PartitionExists,
        *,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
        replicated: Replicated = replicated_at_once,
    ) -> None:
        self.log = log
        self.replicated = replicated
        self.offsets = OffsetStore(log, partition_exists, max_metadata_bytes=max_metadata_bytes)
        self.pending_txn = PendingTxnOffsets()
        self.groups: dict[str, Group] = {}
        #: KIP-848 consumer groups (``consumer_group_coordinator.py``): one id space
        #: with the classic groups, and the same committed offsets.
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        # Commits written but not yet replicated, per group: Kafka's pending offset
        # commits, which make a group hold offsets before any is visible.
        self.commits_replicating: Counter[str] = Counter()

    def holds_offsets(self, group_id: str) -> bool:
        """Kafka's GroupMetadata.hasOffsets: committed, replicating or awaiting a marker.

        An empty group that holds offsets is not idle, so a tick must not forget
        it while its first commit is still replicating.
        """
        return (
            self.offsets.has_offsets(group_id)
            or self.commits_replicating[group_id] > 0
            or self.pending_txn.has_group(group_id)
        )

    def complete_txn(self, producer_id: int, committed: bool) -> None:
        """The producer's marker is on this offsets partition: its TxnOffsetCommits
        become committed offsets, or vanish."""
        for group_id, offsets in self.pending_txn.complete(producer_id).items():
            if not committed:
                continue
            for (topic, partition), value in offsets.items():
                self.offsets.load(OffsetKey(group_id, topic, partition), value)
            if (
                group_id not in self.groups
                and group_id not in self.consumer_groups
                and self.offsets.has_offsets(group_id)
            ):
                self.groups[group_id] = Group(group_id)

    def store_group(self, group: Group) -> Pending[ErrorCode]:
        """Append the group's record; the pending tells when it is replicated (or why not)."""
        try:
            end_offset = self.log.append(
                [(encode_key(GroupKey(group.group_id)), encode_group_value(group_record(group)))]
            )
        except AppendFailed as failed:
            return Pending.completed(failed.error)
        group.persisted = True
        return self.replicated(end_offset)

    def delete_group(self, group: Group) -> ErrorCode:
        """Tombstone the group and its offsets, and forget them; nothing changes if the
        log refuses the tombstones (the coordinator's error is returned)."""
        entries = self.offsets.tombstones_for_group(group.group_id)
        if group.persisted:
            entries.append((encode_key(GroupKey(group.group_id)), None))
        if entries:
            try:
                self.log.append(entries)
            except AppendFailed as failed:
                return coordinator_error(failed.error)
        self.offsets.forget_group(group.group_id)
        group.transition_to(GroupState.DEAD)
        del self.groups[group.group_id]
        return ErrorCode.none

    def clear(self) -> None:
        """Forget everything in memory (the partition moved); the log keeps it."""
        self.groups.clear()
        self.consumer_groups.clear()
        self.offsets.clear()
        self.pending_txn.clear()
        self.commits_replicating = Counter()  # a commit still answering counts in the old one

    def live_records(self) -> Iterator[LogEntry]:
        """The current state as records: what a compacted offsets log would hold."""
        for group in self.groups.values():
            if group.persisted:
                yield (
                    encode_key(GroupKey(group.group_id)),
                    encode_group_value(group_record(group)),
                )
        yield from self.offsets.live_records()

    def load(self, entries: Iterable[ReplayItem], now_ms: int) -> None:
        """Apply replayed records, oldest first; may be called in steps, then `finish_load`.

        Transactional offset records wait for their producer's marker; those
        still waiting at the end stay pending until the coordinator sends it."""
        for entry in entries:
            if isinstance(entry, TxnEnd):
                self.complete_txn(entry.producer_id, entry.committed)
                continue
            if isinstance(entry, TxnLogEntry):
                txn_key = decode_key(entry.key)
                if isinstance(txn_key, OffsetKey):
                    value = None if entry.value is None else decode_offset_value(entry.value)
                    self.pending_txn.add(
                        entry.producer_id,
                        txn_key.group_id,
                        {(txn_key.topic, txn_key.partition): value},
                    )
                continue
            raw_key, raw_value = entry
            if record_type(raw_key) in CONSUMER_GROUP_RECORD_TYPES:
                apply_record(self.consumer_groups, raw_key, raw_value)
                continue
            key = decode_key(raw_key)
            if isinstance(key, OffsetKey):
                value = None if raw_value is None else decode_offset_value(raw_value)
                self.offsets.load(key, value)
            elif raw_value is None:
                self.groups.pop(key.group_id, None)
            else:
                self.groups[key.group_id] = group_from_record(
                    key.group_id, decode_group_value(raw_value), now_ms
                )

    def finish_load(self, now_ms: int) -> None:
        """Groups known only by their offsets appear; loaded members' sessions start now."""
        for group_id in self.offsets.group_ids():
            if group_id not in self.groups and group_id not in self.consumer_groups:
                self.groups[group_id] = Group(group_id, empty_since_ms=now_ms)
        for group in self.groups.values():
            for member in group.members.values():
                member.session_deadline_ms = now_ms + member.session_timeout_ms


def group_record(group: Group) -> GroupRecord:
    protocol = group.protocol_name or ""
    return GroupRecord(
        protocol_type=group.protocol_type or "",
        generation_id=group.generation_id,
        protocol_name=group.protocol_name,
        leader_id=group.leader_id,
        members=tuple(
            MemberRecord(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(protocol),
                assignment=m.assignment or b"",
            )
            for m in group.members.values()
        ),
    )


def group_from_record(group_id: str, record: GroupRecord, now_ms: int) -> Group:
    """A group as it was at its last durable generation; members get a fresh session."""
    group = Group(
        group_id,
        state=GroupState.STABLE if record.members else GroupState.EMPTY,
        generation_id=record.generation_id,
        protocol_type=record.protocol_type or None,
        protocol_name=record.protocol_name,
        leader_id=record.leader_id if record.members else None,
        persisted=True,
        empty_since_ms=now_ms,
    )
    for m in record.members:
        group.members[m.member_id] = Member(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            session_timeout_ms=m.session_timeout_ms,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            protocols=((record.protocol_name or "", m.subscription),),
            session_deadline_ms=now_ms + m.session_timeout_ms,
            assignment=m.assignment,
        )
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    return group
