"""Rebuilding consumer groups from their records when an offsets partition loads.

The records are applied oldest first, the latest value of each key winning
and a tombstone deleting it, exactly as compaction leaves them. Members come
back with their epochs and partitions, so after a coordinator failover or a
restart they keep consuming what they had without a new rebalance; their
sessions restart at the end of the load.
"""

from __future__ import annotations

from dataclasses import replace

from headwater.group.consumer_group import ConsumerGroup, ConsumerGroupMember, MemberState
from headwater.group.consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    CurrentMemberAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    decode_key,
    decode_value,
)


def apply_record(groups: dict[str, ConsumerGroup], raw_key: bytes, raw_value: bytes | None) -> None:
    """Apply one replayed consumer group record to ``groups``."""
    key = decode_key(raw_key)
    group = groups.get(key.group_id)
    if raw_value is None:
        if group is None:
            return
        if key.record_type == GROUP_METADATA:
            del groups[key.group_id]
        elif key.record_type == CURRENT_MEMBER_ASSIGNMENT or key.record_type == MEMBER_METADATA:
            group.remove_member(key.member_id or "")
        elif key.record_type == TARGET_ASSIGNMENT_MEMBER:
            group.target.pop(key.member_id or "", None)
        elif key.record_type == PARTITION_METADATA:
            group.subscription_metadata = {}
        return
    if group is None:
        group = groups[key.group_id] = ConsumerGroup(key.group_id)
    value = decode_value(key.record_type, raw_value)
    member_id = key.member_id or ""
    if isinstance(value, GroupMetadataValue):
        group.group_epoch = value.epoch
    elif isinstance(value, TargetAssignmentMetadataValue):
        group.assignment_epoch = value.assignment_epoch
    elif isinstance(value, PartitionMetadataValue):
        group.subscription_metadata = {t.name: t for t in value.topics}
    elif isinstance(value, TargetAssignmentMemberValue):
        group.target[member_id] = dict(value.partitions)
    elif isinstance(value, MemberMetadataValue):
        member = group.members.get(member_id) or ConsumerGroupMember(member_id)
        group.update_member(
            replace(
                member,
                instance_id=value.instance_id,
                rack_id=value.rack_id,
                client_id=value.client_id,
                client_host=value.client_host,
                subscribed_topic_names=value.subscribed_topic_names,
                subscribed_topic_regex=value.subscribed_topic_regex,
                rebalance_timeout_ms=value.rebalance_timeout_ms,
                server_assignor=value.server_assignor,
                classic=value.classic,
            )
        )
    elif isinstance(value, CurrentMemberAssignmentValue):
        member = group.members.get(member_id) or ConsumerGroupMember(member_id)
        try:
            state = MemberState(value.state)
        except ValueError:
            state = MemberState.UNKNOWN
        group.update_member(
            replace(
                member,
                member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                state=state,
                assigned=dict(value.assigned),
                pending_revocation=dict(value.pending_revocation),
            )
        )


def finish_load(groups: dict[str, ConsumerGroup], now_ms: int, session_timeout_ms: int) -> None:
    """Loaded members get a full session from now, as if they had just heartbeated,
    and a member still revoking gets its rebalance timeout again."""
    for group in groups.values():
        for member_id, member in group.members.items():
            timeout = (
                session_timeout_ms if member.classic is None else member.classic.session_timeout_ms
            )
            group.session_deadlines[member_id] = now_ms + timeout
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                deadline = now_ms + max(member.rebalance_timeout_ms, 0)
                group.rebalance_deadlines[member_id] = (deadline, member.member_epoch)
