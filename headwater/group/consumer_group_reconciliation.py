"""A member's next step towards its target assignment: Kafka's CurrentAssignmentBuilder.

Revocation first. A member first keeps only the partitions that are still
in its target and gives up the others (UNREVOKED_PARTITIONS, at its old
epoch); only once its heartbeat no longer lists them does it move to the
target epoch and receive new partitions. A new partition another member
still holds is withheld (UNRELEASED_PARTITIONS) until that member has let
it go, so a partition never has two owners, whatever order heartbeats
arrive in.

Pure: the member, the target and who holds what in; the member's next
state out. The caller writes a record when the state changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace

from headwater.group.consumer_group import (
    ConsumerGroupMember,
    MemberState,
    TopicPartition,
)
from headwater.group.consumer_group_records import Assignment

#: partition -> epoch of the member holding it, -1 when free (Kafka's currentPartitionEpoch).
OwnerEpoch = Callable[[TopicPartition], int]


class MemberFenced(Exception):
    """The member must give up everything and rejoin (FENCED_MEMBER_EPOCH)."""


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    owner_epoch: OwnerEpoch,
    owned: Assignment | None,
) -> ConsumerGroupMember:
    """The member's next state. ``owned`` is what its heartbeat says it holds
    (None when the heartbeat did not say)."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owner_epoch, owned)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned)
    if owned is None or any(owned.values()):
        raise MemberFenced("the member is in an unknown state and must rejoin")
    return _next(member, target_epoch, target_epoch, target, owner_epoch, owned)


def _still_owns(owned: Assignment | None, revoking: Assignment) -> bool:
    """Whether the heartbeat still lists a partition being revoked (not saying counts as yes)."""
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in revoking.items())


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    owner_epoch: OwnerEpoch,
    owned: Assignment | None,
) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    adding: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept = current & wanted
        gone = current - wanted
        new = wanted - kept
        free = frozenset(p for p in new if owner_epoch((topic_id, p)) == -1)
        unreleased = unreleased or free != new
        for into, parts in ((assigned, kept), (revoking, gone), (adding, free)):
            if parts:
                into[topic_id] = parts
    if revoking and _still_owns(owned, revoking):
        return _with(member, MemberState.UNREVOKED_PARTITIONS, member_epoch, assigned, revoking)
    for topic_id, parts in adding.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | parts
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with(member, state, target_epoch, assigned, {})


def _with(
    member: ConsumerGroupMember,
    state: MemberState,
    epoch: int,
    assigned: Mapping[uuid.UUID, frozenset[int]],
    revoking: Mapping[uuid.UUID, frozenset[int]],
) -> ConsumerGroupMember:
    return replace(
        member,
        state=state,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        assigned=dict(assigned),
        pending_revocation=dict(revoking),
    )
