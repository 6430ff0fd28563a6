"""Classic members inside a consumer group: JoinGroup, SyncGroup, Heartbeat and
LeaveGroup served the way Kafka 4 serves them during an online migration.

A classic consumer does not take part in a classic rebalance any more: the
coordinator's server-side assignor decides, and the classic protocol only
carries the answer (Kafka's classicGroupJoinToConsumerGroup and siblings):

* **JoinGroup** updates the member (subscription and owned partitions from its
  ConsumerProtocol metadata), recomputes the target if needed, reconciles the
  member one step (revocation first) and answers at once with the member
  epoch as the generation; nobody is leader, nobody assigns.
* **SyncGroup** answers with the member's current assignment, encoded as a
  ConsumerProtocol assignment.
* **Heartbeat** answers REBALANCE_IN_PROGRESS when the member must rejoin: the
  group epoch moved past it, it has partitions to revoke, or partitions it
  waits for are free now. Its rejoin is its acknowledgement: a partition
  revoked from it is given to another member only once it rejoins without it.
* **LeaveGroup** removes the member; the group epoch rises.

Member epochs, target and ownership are the consumer group's own
(``consumer_group_coordinator.py``), so the "no partition owned twice" rule
holds across both kinds of members.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.coordinator.replication import coordinator_error
from headwater.group.consumer_group import ConsumerGroup, ConsumerGroupMember, MemberState
from headwater.group.consumer_group_coordinator import (
    Changes,
    ConsumerGroupCoordinator,
    metadata_value,
)
from headwater.group.consumer_group_migration import by_ids, encode_assignment
from headwater.group.consumer_group_records import (
    MEMBER_METADATA,
    ClassicMemberMetadata,
    ConsumerGroupKey,
)
from headwater.group.results import JoinResult, LeaveResult, MemberLeaveResult, SyncResult
from headwater.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    decode_subscription,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup addressed to a consumer group."""

    group_id: str
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True


class _Refused(Exception):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


class ClassicMembers:
    """The classic protocol's four APIs for members of the coordinator's consumer groups."""

    def __init__(
        self,
        core: ConsumerGroupCoordinator,
        member_id_factory: Callable[[str], str] = lambda prefix: f"{prefix}-{uuid.uuid4()}",
    ) -> None:
        self._core = core
        self._new_member_id = member_id_factory

    def serves(self, group_id: str) -> bool:
        """Whether classic requests for this group go to a consumer group."""
        return self._core.is_consumer_group(group_id)

    # ---------------------------------------------------------------- JoinGroup

    def join(self, now_ms: int, request: ClassicJoin) -> Pending[JoinResult]:
        group = self._core.groups[request.group_id]
        changes = Changes()
        try:
            result = self._join(now_ms, group, request, changes)
        except _Refused as refused:
            return Pending.completed(JoinResult(refused.error, request.member_id))
        return self._core.write(changes).map(
            lambda error: (
                result
                if error is ErrorCode.none
                else JoinResult(coordinator_error(error), result.member_id)
            )
        )

    def _join(
        self, now_ms: int, group: ConsumerGroup, request: ClassicJoin, changes: Changes
    ) -> JoinResult:
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
            raise _Refused(ErrorCode.inconsistent_group_protocol)
        try:
            subscription = decode_subscription(request.protocols[0][1])
        except ConsumerProtocolError:
            raise _Refused(ErrorCode.inconsistent_group_protocol) from None
        member_id = request.member_id
        unknown = not member_id
        if unknown:
            member_id = self._new_member_id(request.instance_id or request.client_id)
        if not self._supports(group, member_id, request.protocols):
            raise _Refused(ErrorCode.inconsistent_group_protocol)
        if (
            member_id not in group.members
            and (request.instance_id is None or group.static_member(request.instance_id) is None)
            and len(group.members) >= self._core.config.max_size
        ):
            raise _Refused(ErrorCode.group_max_size_reached)
        if unknown and request.instance_id is None and request.require_known_member_id:
            return JoinResult(ErrorCode.member_id_required, member_id)
        member = self._member(group, member_id, request, unknown)
        updated = replace(
            member,
            instance_id=request.instance_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            server_assignor=None,
            subscribed_topic_names=subscription.topics,
            subscribed_topic_regex=None,
            client_id=request.client_id,
            client_host=request.client_host,
            classic=ClassicMemberMetadata(request.session_timeout_ms, request.protocols),
        )
        is_new = member_id not in group.members
        bump = is_new or updated.subscribed_topic_names != member.subscribed_topic_names
        if is_new or updated.subscription_key() != member.subscription_key():
            changes.add(
                ConsumerGroupKey(MEMBER_METADATA, group.group_id, member_id),
                metadata_value(updated),
            )
        group.update_member(updated)
        refreshed = self._core.refresh_subscription_metadata(group, changes)
        if bump or refreshed:
            self._core.bump(group, changes)
        if group.group_epoch > group.assignment_epoch:
            self._core.compute_target(group, changes)
        owned = by_ids(subscription.owned_partitions, self._core.topics)
        after = self._core.reconcile(now_ms, group, updated, owned, changes)
        self._core.touch(now_ms, group, after)
        if is_new:
            log.info(
                "group %s: classic member %s joined the consumer group", group.group_id, member_id
            )
        return JoinResult(
            error=ErrorCode.none,
            member_id=member_id,
            generation_id=after.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=request.protocols[0][0],
        )

    @staticmethod
    def _supports(
        group: ConsumerGroup, member_id: str, protocols: Sequence[tuple[str, bytes]]
    ) -> bool:
        """Kafka's supportsClassicProtocols: a protocol every other classic member has."""
        others = [
            m.classic for i, m in group.members.items() if m.classic is not None and i != member_id
        ]
        names = {name for name, _ in protocols}
        return not others or any(
            all(name in {n for n, _ in c.protocols} for c in others) for name in names
        )

    def _member(
        self, group: ConsumerGroup, member_id: str, request: ClassicJoin, unknown: bool
    ) -> ConsumerGroupMember:
        """The joining member: known, new, or a static member's new incarnation."""
        if request.instance_id is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id)
        existing = group.static_member(request.instance_id)
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id)
        if existing.member_id == member_id:
            return existing
        if not unknown:
            raise _Refused(ErrorCode.fenced_instance_id)
        # The instance restarted: the new id takes the old one's place and partitions.
        raise _Refused(ErrorCode.unreleased_instance_id)

    # ---------------------------------------------------------------- SyncGroup

    def sync(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        group = self._core.groups[group_id]
        try:
            member = self._classic_member(group, member_id, instance_id)
        except _Refused as refused:
            return SyncResult(refused.error)
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return SyncResult(ErrorCode.illegal_generation)
        name = member.classic.protocols[0][0] if member.classic.protocols else None
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if (
            group.group_epoch > member.member_epoch
            and member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            return SyncResult(ErrorCode.rebalance_in_progress)
        self._core.touch(now_ms, group, member)
        return SyncResult(
            ErrorCode.none,
            assignment=encode_assignment(
                member.assigned, member.classic.protocols, self._core.topics
            ),
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=name,
        )

    # ---------------------------------------------------------------- Heartbeat

    def heartbeat(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
    ) -> ErrorCode:
        group = self._core.groups[group_id]
        try:
            member = self._classic_member(group, member_id, instance_id)
        except _Refused as refused:
            return refused.error
        if generation_id != member.member_epoch:
            return ErrorCode.illegal_generation
        self._core.touch(now_ms, group, member)
        if (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not group.waiting_on_unreleased_partition(member)
            )
        ):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # --------------------------------------------------------------- LeaveGroup

    def leave(
        self, now_ms: int, *, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> LeaveResult:
        group = self._core.groups[group_id]
        changes = Changes()
        results: list[MemberLeaveResult] = []
        for member_id, instance_id in members:
            try:
                if instance_id is not None and not member_id:
                    found = group.static_member(instance_id)
                    if found is None or found.classic is None:
                        raise _Refused(ErrorCode.unknown_member_id)
                    member = found
                else:
                    member = self._classic_member(group, member_id, instance_id)
            except _Refused as refused:
                results.append(MemberLeaveResult(member_id, instance_id, refused.error))
                continue
            log.info(
                "group %s: classic member %s left the consumer group",
                group.group_id,
                member.member_id,
            )
            self._core.fence(now_ms, group, member.member_id, changes)
            results.append(MemberLeaveResult(member.member_id, instance_id, ErrorCode.none))
            if self._core.groups.get(group_id) is not group:
                break  # the group changed protocol
        self._core.write(changes)
        return LeaveResult(ErrorCode.none, tuple(results))

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _classic_member(
        group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerGroupMember:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            member = group.static_member(instance_id)
            if member is not None and member.member_id != member_id:
                raise _Refused(ErrorCode.fenced_instance_id)
        if member is None or member.classic is None:
            raise _Refused(ErrorCode.unknown_member_id)
        return member
