"""KIP-848 consumer groups of one offsets partition: Kafka's consumerGroupHeartbeat.

One heartbeat carries everything (there is no JoinGroup/SyncGroup barrier),
handled in three steps as in Kafka's GroupMetadataManager:

1. the member is created or updated; if its subscription changed, or the
   subscribed topics changed in the cluster, the **group epoch** rises;
2. if the group epoch is ahead of the **target assignment epoch**, the
   server-side assignor (``group.consumer.assignors``, a member's
   ``group.remote.assignor``) computes a new target for every member;
3. the member is reconciled one step towards its target, revocation first
   (``consumer_group_reconciliation.py``).

Every change becomes records in Kafka's formats (``consumer_group_records.py``),
appended in one batch; the heartbeat is answered once the batch is replicated.
``tick(now_ms)`` fences members whose session expired or who did not revoke
within their rebalance timeout, and ``topics_changed`` re-evaluates the
subscriptions (regexes included) when topics are created, deleted or grow.

A running classic group is upgraded here when a consumer-protocol member
joins it, and a group whose last consumer-protocol member leaves is
downgraded (``consumer_group_migration.py``); the classic members of a
consumer group are served by ``consumer_group_classic.py``.

Sans-I/O like the classic coordinator beside it: the shard's `GroupStore`
holds both kinds of groups (one id space, shared offsets), and this module
never touches a socket or a clock of its own.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import re2
from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.coordinator.replication import coordinator_error
from headwater.coordinator.state_log import AppendFailed, LogEntry
from headwater.group.assignors import ASSIGNORS, MemberSpec, ServerAssignor, TopicSpec
from headwater.group.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    assignments_equal,
)
from headwater.group.consumer_group_migration import (
    UPGRADE_POLICIES,
    MigrationRefused,
    check_upgrade,
    classic_group_from_consumer,
    consumer_group_from_classic,
    may_downgrade,
)
from headwater.group.consumer_group_reconciliation import MemberFenced
from headwater.group.consumer_group_reconciliation import reconcile as reconcile_member
from headwater.group.consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    Assignment,
    ConsumerGroupKey,
    CurrentMemberAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicMetadata,
    group_tombstones,
    member_tombstones,
    record,
)
from headwater.group.group_store import GroupStore, group_record
from headwater.group.membership import Group, GroupState
from headwater.group.storage import GroupKey, encode_group_value, encode_key
from headwater.group.topics_image import StaticTopics, TopicsImage

log = logging.getLogger(__name__)

MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The broker settings of KIP-848 groups (Kafka's names in comments)."""

    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy

    @property
    def default_assignor(self) -> str:
        """The first configured assignor, as in Kafka."""
        return self.assignors[0]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, fields as on the wire (None: unchanged since the last)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member as ConsumerGroupDescribe and the CLI show it (topic names resolved)."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]
    target_assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]
    state: str


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[MemberView, ...] = ()


class HeartbeatError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass
class Changes:
    """Records an operation produces, appended in one batch at its end."""

    records: list[LogEntry] = field(default_factory=list)

    def add(self, key: ConsumerGroupKey, value: object) -> None:
        self.records.append(record(key, value))  # type: ignore[arg-type]


class ConsumerGroupCoordinator:
    """The consumer groups (KIP-848) of one offsets partition, kept in its `GroupStore`."""

    def __init__(
        self,
        store: GroupStore,
        *,
        topics: TopicsImage | None = None,
        config: ConsumerGroupConfig | None = None,
        assignors: Mapping[str, ServerAssignor] | None = None,
    ) -> None:
        self.config = config or ConsumerGroupConfig()
        self._store = store
        self.groups: dict[str, ConsumerGroup] = store.consumer_groups
        self.topics: TopicsImage = topics if topics is not None else StaticTopics()
        available = assignors if assignors is not None else ASSIGNORS
        self._assignors = {
            name: available[name] for name in self.config.assignors if name in available
        }
        self._regexes: dict[str, object] = {}
        #: group.max.size: a downgrade may not make a larger classic group.
        self.classic_max_size = 2**31 - 1
        #: The classic coordinator's hooks: a running classic group was upgraded (its
        #: waiting JoinGroup/SyncGroup must be told to rejoin), or a group downgraded
        #: (the classic group must rebalance).
        self.on_upgrade: Callable[[Group], None] | None = None
        self.on_downgrade: Callable[[int, Group], None] | None = None

    # --------------------------------------------------------------- heartbeat

    def heartbeat(self, now_ms: int, request: HeartbeatRequest) -> Pending[HeartbeatResult]:
        """ConsumerGroupHeartbeat: join (epoch 0), heartbeat, leave (-1, or -2 for a static
        member); answered once the records it wrote are replicated."""
        changes = Changes()
        try:
            self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                result = self._leave(now_ms, request, changes)
            else:
                result = self._heartbeat(now_ms, request, changes)
        except HeartbeatError as failed:
            result = HeartbeatResult(failed.error, failed.message, request.member_id or None)
        except MemberFenced as fenced:
            result = HeartbeatResult(ErrorCode.fenced_member_epoch, str(fenced), request.member_id)
        return self.write(changes).map(
            lambda error: (
                result
                if error is ErrorCode.none
                else HeartbeatResult(coordinator_error(error), None, request.member_id or None)
            )
        )

    def _validate(self, request: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (4.x, v1 member ids)."""

        def invalid(message: str) -> HeartbeatError:
            return HeartbeatError(ErrorCode.invalid_request, message)

        if not request.group_id:
            raise invalid("GroupId can't be empty.")
        if request.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if request.rack_id == "":
            raise invalid("RackId can't be empty.")
        epoch = request.member_epoch
        if request.version >= 1 and not request.member_id:
            raise invalid("MemberId can't be empty.")
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not request.member_id:
                raise invalid("MemberId can't be empty.")
        elif epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or any(request.owned.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                    "when (re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not request.member_id:
                raise invalid("MemberId can't be empty.")
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid("MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self._assignors:
            raise HeartbeatError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self._assignors)}.",
            )
        if request.subscribed_topic_regex:
            self._regex(request.subscribed_topic_regex)

    def _regex(self, pattern: str) -> object:
        """A compiled RE2 pattern (Kafka's syntax for SubscribedTopicRegex)."""
        compiled = self._regexes.get(pattern)
        if compiled is None:
            try:
                compiled = compile_regex(pattern)
            except ValueError as exc:
                raise HeartbeatError(ErrorCode.invalid_regular_expression, str(exc)) from None
            self._regexes[pattern] = compiled
        return compiled

    def _group_for(self, now_ms: int, request: HeartbeatRequest, changes: Changes) -> ConsumerGroup:
        group = self.groups.get(request.group_id)
        if group is not None:
            return group
        classic = self._store.groups.get(request.group_id)
        if classic is not None and classic.state is GroupState.DEAD:
            classic = None
        if classic is not None and self.config.migration_policy not in UPGRADE_POLICIES:
            raise HeartbeatError(
                ErrorCode.group_id_not_found,
                f"Group {request.group_id} is not a consumer group "
                f"(group.consumer.migration.policy={self.config.migration_policy}).",
            )
        if request.member_epoch != 0:
            raise HeartbeatError(
                ErrorCode.unknown_member_id, f"Group {request.group_id} has no such member."
            )
        if classic is not None and classic.state is not GroupState.EMPTY:
            return self._upgrade(now_ms, classic, changes)
        if classic is not None:
            # An empty classic group becomes a consumer group; its offsets stay.
            log.info("group %s: empty classic group upgraded to a consumer group", classic.group_id)
            if classic.persisted:
                changes.records.append((encode_key(GroupKey(classic.group_id)), None))
            classic.transition_to(GroupState.DEAD)
            del self._store.groups[classic.group_id]
        group = self.groups[request.group_id] = ConsumerGroup(request.group_id)
        return group

    def _upgrade(self, now_ms: int, classic: Group, changes: Changes) -> ConsumerGroup:
        """Kafka's convertToConsumerGroup: a running classic group becomes a consumer
        group whose members stay, as classic members, with what they own; members
        waiting in JoinGroup/SyncGroup are told to rejoin (REBALANCE_IN_PROGRESS)."""
        try:
            check_upgrade(classic, self.config.migration_policy, self.config.max_size)
            group = consumer_group_from_classic(classic, self.topics)
        except MigrationRefused as refused:
            raise HeartbeatError(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade classic group {classic.group_id} to a consumer group: {refused}.",
            ) from None
        log.info(
            "group %s: running classic group (generation %d, %d members) upgraded to a "
            "consumer group",
            classic.group_id,
            classic.generation_id,
            len(classic.members),
        )
        if classic.persisted:
            changes.records.append((encode_key(GroupKey(classic.group_id)), None))
        if self.on_upgrade is not None:
            self.on_upgrade(classic)
        classic.transition_to(GroupState.DEAD)
        del self._store.groups[classic.group_id]
        self.groups[group.group_id] = group
        self.refresh_subscription_metadata(group, changes)
        for member_id, member in group.members.items():
            changes.add(
                ConsumerGroupKey(MEMBER_METADATA, group.group_id, member_id), metadata_value(member)
            )
        changes.add(
            ConsumerGroupKey(GROUP_METADATA, group.group_id), GroupMetadataValue(group.group_epoch)
        )
        for member_id, target in group.target.items():
            changes.add(
                ConsumerGroupKey(TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
                TargetAssignmentMemberValue(target),
            )
        changes.add(
            ConsumerGroupKey(TARGET_ASSIGNMENT_METADATA, group.group_id),
            TargetAssignmentMetadataValue(group.assignment_epoch),
        )
        for member_id, member in group.members.items():
            changes.add(
                ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, group.group_id, member_id),
                _current(member),
            )
            self.touch(now_ms, group, member)
        return group

    def _heartbeat(
        self, now_ms: int, request: HeartbeatRequest, changes: Changes
    ) -> HeartbeatResult:
        group = self._group_for(now_ms, request, changes)
        member_id = request.member_id or str(uuid.uuid4())
        joining = request.member_epoch == 0
        if (
            len(group.members) >= self.config.max_size
            and member_id not in group.members
            and not (request.instance_id is not None and group.static_member(request.instance_id))
        ):
            raise HeartbeatError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.max_size} members.",
            )
        if request.instance_id is None:
            member = self._dynamic_member(group, member_id, request)
        else:
            member = self._static_member(group, member_id, request, changes)
        old = member
        updated = replace(
            member,
            instance_id=request.instance_id
            if request.instance_id is not None
            else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(
                request.rebalance_timeout_ms
                if request.rebalance_timeout_ms != -1
                else member.rebalance_timeout_ms
            ),
            server_assignor=(
                request.server_assignor
                if request.server_assignor is not None
                else member.server_assignor
            ),
            subscribed_topic_names=(
                tuple(request.subscribed_topic_names)
                if request.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (request.subscribed_topic_regex or None)
                if request.subscribed_topic_regex is not None
                else member.subscribed_topic_regex
            ),
            client_id=request.client_id,
            client_host=request.client_host,
            classic=None,
        )
        is_new = updated.member_id not in group.members
        bump = is_new
        if is_new or updated.subscription_key() != old.subscription_key():
            changes.add(
                ConsumerGroupKey(MEMBER_METADATA, group.group_id, member_id),
                metadata_value(updated),
            )
            if (
                updated.subscribed_topic_names != old.subscribed_topic_names
                or updated.subscribed_topic_regex != old.subscribed_topic_regex
                or updated.server_assignor != old.server_assignor
                or updated.rack_id != old.rack_id
            ):
                bump = True
        group.update_member(updated)
        if bump:
            self.refresh_subscription_metadata(group, changes)
            self.bump(group, changes)
        elif self.refresh_subscription_metadata(group, changes):
            self.bump(group, changes)
        if group.group_epoch > group.assignment_epoch:
            self.compute_target(group, changes)
        before = group.members[member_id]
        after = self.reconcile(now_ms, group, before, request.owned, changes)
        self.touch(now_ms, group, after)
        full = joining or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
        changed = not assignments_equal(old.assigned, after.assigned) or is_new
        return HeartbeatResult(
            member_id=member_id,
            member_epoch=after.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=dict(after.assigned) if full or changed else None,
        )

    def _dynamic_member(
        self, group: ConsumerGroup, member_id: str, request: HeartbeatRequest
    ) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if request.member_epoch != 0:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id,
                    f"Member {member_id} is not a member of group {group.group_id}.",
                )
            return ConsumerGroupMember(member_id)
        if request.member_epoch == 0:
            # A rejoin with the same id (v1 ids are the client's): it gave up everything.
            return self._reset(group, member)
        _check_epoch(member, request.member_epoch, request.owned)
        return member

    def _reset(self, group: ConsumerGroup, member: ConsumerGroupMember) -> ConsumerGroupMember:
        reset = replace(
            member,
            member_epoch=0,
            previous_member_epoch=0,
            state=MemberState.STABLE,
            assigned={},
            pending_revocation={},
        )
        group.update_member(reset)
        group.rebalance_deadlines.pop(member.member_id, None)
        return reset

    def _static_member(
        self,
        group: ConsumerGroup,
        member_id: str,
        request: HeartbeatRequest,
        changes: Changes,
    ) -> ConsumerGroupMember:
        instance_id = request.instance_id
        assert instance_id is not None
        existing = group.static_member(instance_id)
        if request.member_epoch == 0:
            if existing is None:
                member = group.members.get(member_id)
                return (
                    ConsumerGroupMember(member_id) if member is None else self._reset(group, member)
                )
            if existing.member_id == member_id:
                return self._reset(group, existing)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise HeartbeatError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {member_id} with instance id {instance_id} cannot join the "
                    f"group because the instance id is owned by {existing.member_id} member.",
                )
            # The instance comes back under a new member id: it takes over the old
            # member's partitions and target, without a rebalance.
            replacement = replace(
                existing, member_id=member_id, member_epoch=0, previous_member_epoch=0
            )
            target = group.target.pop(existing.member_id, {})
            deadline = group.rebalance_deadlines.pop(existing.member_id, None)
            group.remove_member(existing.member_id)
            changes.records.extend(member_tombstones(group.group_id, existing.member_id))
            group.update_member(replacement)
            group.target[member_id] = target
            if deadline is not None:
                group.rebalance_deadlines[member_id] = deadline
            changes.add(
                ConsumerGroupKey(TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
                TargetAssignmentMemberValue(target),
            )
            changes.add(
                ConsumerGroupKey(MEMBER_METADATA, group.group_id, member_id),
                metadata_value(replacement),
            )
            changes.add(
                ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, group.group_id, member_id),
                _current(replacement),
            )
            return replacement
        if existing is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown."
            )
        if existing.member_id != member_id:
            raise HeartbeatError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {existing.member_id}.",
            )
        _check_epoch(existing, request.member_epoch, request.owned)
        return existing

    def _leave(self, now_ms: int, request: HeartbeatRequest, changes: Changes) -> HeartbeatResult:
        group = self.groups.get(request.group_id)
        if group is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id, f"Group {request.group_id} has no such member."
            )
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id,
                    f"Member {request.member_id} is not a member of group {group.group_id}.",
                )
        else:
            member = group.static_member(request.instance_id)
            if member is None:
                raise HeartbeatError(
                    ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown."
                )
            if member.member_id != request.member_id:
                raise HeartbeatError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {request.member_id} with instance id {request.instance_id} "
                    f"was fenced by member {member.member_id}.",
                )
            if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # Gone for now: its partitions stay its own until its session expires.
                away = replace(
                    member,
                    member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    previous_member_epoch=member.member_epoch,
                    pending_revocation={},
                )
                group.update_member(away)
                group.rebalance_deadlines.pop(member.member_id, None)
                changes.add(
                    ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, group.group_id, member.member_id),
                    _current(away),
                )
                return HeartbeatResult(
                    member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH
                )
        log.info("group %s: member %s left", group.group_id, member.member_id)
        self.fence(now_ms, group, member.member_id, changes)
        return HeartbeatResult(member_id=member.member_id, member_epoch=request.member_epoch)

    # ----------------------------------------------------------- target, epochs

    def bump(self, group: ConsumerGroup, changes: Changes) -> None:
        group.group_epoch += 1
        changes.add(
            ConsumerGroupKey(GROUP_METADATA, group.group_id), GroupMetadataValue(group.group_epoch)
        )

    def _resolved_regexes(self, group: ConsumerGroup) -> dict[str, frozenset[str]]:
        """Each member regex -> the topics it matches now (internal topics never match)."""
        names = list(self.topics.names())
        resolved: dict[str, frozenset[str]] = {}
        for member in group.members.values():
            pattern = member.subscribed_topic_regex
            if pattern is None or pattern in resolved:
                continue
            try:
                resolved[pattern] = topics_matching(self._regex(pattern), names)
            except HeartbeatError:
                resolved[pattern] = frozenset()
        return resolved

    def refresh_subscription_metadata(self, group: ConsumerGroup, changes: Changes) -> bool:
        """Recompute the subscribed topics' metadata; True (and a record) if it changed."""
        subscribed = group.subscribed_topic_names(self._resolved_regexes(group))
        metadata: dict[str, TopicMetadata] = {}
        for name in sorted(subscribed):
            topic = self.topics.get(name)
            if topic is not None:
                metadata[name] = topic
        if metadata == group.subscription_metadata:
            return False
        group.subscription_metadata = metadata
        changes.add(
            ConsumerGroupKey(PARTITION_METADATA, group.group_id),
            PartitionMetadataValue(tuple(metadata.values())),
        )
        return True

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for, else the default (Kafka's rule)."""
        counts: dict[str, int] = {}
        for member in group.members.values():
            if member.server_assignor in self._assignors:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        if not counts:
            return self.config.default_assignor
        return max(sorted(counts), key=lambda name: counts[name])

    def compute_target(self, group: ConsumerGroup, changes: Changes) -> None:
        """Kafka's TargetAssignmentBuilder: the assignor's answer at the group epoch;
        only members whose target changed get a record."""
        resolved = self._resolved_regexes(group)
        topics = {
            name: TopicSpec(name, topic.num_partitions, topic.partition_racks)
            for name, topic in group.subscription_metadata.items()
        }
        ids = {name: topic.topic_id for name, topic in group.subscription_metadata.items()}
        names_by_id = {topic_id: name for name, topic_id in ids.items()}
        specs: dict[str, MemberSpec] = {}
        for member_id, member in group.members.items():
            subscribed = set(member.subscribed_topic_names)
            if member.subscribed_topic_regex is not None:
                subscribed |= resolved.get(member.subscribed_topic_regex, frozenset())
            owned = {
                names_by_id[topic_id]: parts
                for topic_id, parts in group.target.get(member_id, {}).items()
                if topic_id in names_by_id
            }
            specs[member_id] = MemberSpec(
                member_id=member_id,
                rack=member.rack_id,
                subscribed_topics=frozenset(subscribed & set(topics)),
                owned=owned,
                instance_id=member.instance_id,
            )
        assignor = self._assignors[self.preferred_assignor(group)]
        result = assignor.assign(specs, topics) if specs else {}
        for member_id in list(group.target):
            if member_id not in group.members:
                del group.target[member_id]
        for member_id in group.members:
            new: Assignment = {
                ids[name]: frozenset(parts)
                for name, parts in result.get(member_id, {}).items()
                if parts and name in ids
            }
            if member_id in group.target and assignments_equal(group.target[member_id], new):
                continue
            group.target[member_id] = new
            changes.add(
                ConsumerGroupKey(TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
                TargetAssignmentMemberValue(new),
            )
        group.assignment_epoch = group.group_epoch
        changes.add(
            ConsumerGroupKey(TARGET_ASSIGNMENT_METADATA, group.group_id),
            TargetAssignmentMetadataValue(group.assignment_epoch),
        )

    def reconcile(
        self,
        now_ms: int,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        owned: Assignment | None,
        changes: Changes,
    ) -> ConsumerGroupMember:
        if member.member_epoch < 0 or member.is_reconciled_to(group.assignment_epoch):
            return member
        updated = reconcile_member(
            member,
            group.assignment_epoch,
            group.target.get(member.member_id, {}),
            group.owner_epoch,
            owned,
        )
        if updated.assignment_key() == member.assignment_key():
            return member
        group.update_member(updated)
        changes.add(
            ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT, group.group_id, member.member_id),
            _current(updated),
        )
        if updated.state is MemberState.UNREVOKED_PARTITIONS:
            deadline = now_ms + max(updated.rebalance_timeout_ms, 0)
            group.rebalance_deadlines[member.member_id] = (deadline, updated.member_epoch)
        else:
            group.rebalance_deadlines.pop(member.member_id, None)
        return updated

    def fence(self, now_ms: int, group: ConsumerGroup, member_id: str, changes: Changes) -> None:
        """Remove the member; the group epoch rises and the target is recomputed, so its
        partitions go to the others once they are free. When only classic members
        would remain, the group becomes a classic group instead (online downgrade)."""
        if may_downgrade(group, member_id, self.config.migration_policy, self.classic_max_size):
            self._downgrade(now_ms, group, member_id, changes)
            return
        group.remove_member(member_id)
        changes.records.extend(member_tombstones(group.group_id, member_id))
        self.refresh_subscription_metadata(group, changes)
        self.bump(group, changes)
        self.compute_target(group, changes)

    def _downgrade(
        self, now_ms: int, group: ConsumerGroup, leaving_member_id: str, changes: Changes
    ) -> None:
        """Kafka's convertToClassicGroup: the consumer group's records are tombstoned, the
        classic group's record written, and the classic group rebalances."""
        classic = classic_group_from_consumer(group, leaving_member_id, self.topics, now_ms)
        log.info(
            "group %s: last consumer-protocol member %s left; downgraded to a classic group "
            "(generation %d, %d members)",
            group.group_id,
            leaving_member_id,
            classic.generation_id,
            len(classic.members),
        )
        for member_id in set(group.members) | set(group.target):
            changes.records.extend(member_tombstones(group.group_id, member_id))
        changes.records.extend(group_tombstones(group.group_id))
        changes.records.append(
            (encode_key(GroupKey(classic.group_id)), encode_group_value(group_record(classic)))
        )
        classic.persisted = True
        del self.groups[group.group_id]
        self._store.groups[classic.group_id] = classic
        if self.on_downgrade is not None:
            self.on_downgrade(now_ms, classic)

    def touch(self, now_ms: int, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """A sign of life: the member's session starts over (a classic member's own
        session timeout, else group.consumer.session.timeout.ms)."""
        timeout = (
            self.config.session_timeout_ms
            if member.classic is None
            else member.classic.session_timeout_ms
        )
        group.session_deadlines[member.member_id] = now_ms + timeout

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> None:
        """Fence members whose session expired, or who did not revoke in time."""
        changes = Changes()
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.session_deadlines.items()):
                if self.groups.get(group.group_id) is not group:
                    break  # downgraded to a classic group
                if deadline <= now_ms and member_id in group.members:
                    log.info(
                        "group %s: member %s fenced, its session expired", group.group_id, member_id
                    )
                    self.fence(now_ms, group, member_id, changes)
            for member_id, (deadline, epoch) in list(group.rebalance_deadlines.items()):
                member = group.members.get(member_id)
                if deadline > now_ms or self.groups.get(group.group_id) is not group:
                    continue
                group.rebalance_deadlines.pop(member_id, None)
                if (
                    member is not None
                    and member.state is MemberState.UNREVOKED_PARTITIONS
                    and member.member_epoch == epoch
                ):
                    log.info(
                        "group %s: member %s fenced, it did not revoke within its rebalance "
                        "timeout",
                        group.group_id,
                        member_id,
                    )
                    self.fence(now_ms, group, member_id, changes)
        self.write(changes)

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = []
        for group in self.groups.values():
            deadlines.extend(group.session_deadlines.values())
            deadlines.extend(d for d, _ in group.rebalance_deadlines.values())
        return min(deadlines, default=None)

    def topics_changed(self) -> None:
        """Topics were created, deleted or grew: subscriptions (regexes too) are
        re-evaluated, and a group whose subscribed topics changed gets a new target."""
        changes = Changes()
        for group in self.groups.values():
            if group.members and self.refresh_subscription_metadata(group, changes):
                self.bump(group, changes)
                self.compute_target(group, changes)
        self.write(changes)

    # ------------------------------------------------------------------ writes

    def write(self, changes: Changes) -> Pending[ErrorCode]:
        if not changes.records:
            return Pending.completed(ErrorCode.none)
        try:
            end_offset = self._store.log.append(changes.records)
        except AppendFailed as failed:
            log.warning("consumer group records not written: %s", failed)
            return Pending.completed(failed.error)
        return self._store.replicated(end_offset)

    # ------------------------------------------------------------ admin views

    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups: only an empty group; its records and offsets are tombstoned."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        entries: list[LogEntry] = list(self._store.offsets.tombstones_for_group(group_id))
        for member_id in group.target:
            entries.extend(member_tombstones(group_id, member_id))
        entries.extend(group_tombstones(group_id))
        try:
            self._store.log.append(entries)
        except AppendFailed as failed:
            return coordinator_error(failed.error)
        self._store.offsets.forget_group(group_id)
        del self.groups[group_id]
        return ErrorCode.none

    def remove_empty(self, holds_offsets: Callable[[str], bool]) -> None:
        """Forget empty consumer groups whose offsets have expired (or that never had
        any), tombstoning their records, as Kafka's cleanupGroupMetadata does."""
        for group_id, group in list(self.groups.items()):
            if not group.members and not holds_offsets(group_id):
                self.delete_group(group_id)

    def downgrade_if_empty(self, group_id: str) -> bool:
        """A classic JoinGroup for an empty consumer group: the group becomes classic
        (its records tombstoned, its offsets kept) when group.consumer.migration.policy
        allows a downgrade; False if it may not (members left, or the policy)."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members or self.config.migration_policy not in ("bidirectional", "downgrade"):
            return False
        entries: list[LogEntry] = []
        for member_id in group.target:
            entries.extend(member_tombstones(group_id, member_id))
        entries.extend(group_tombstones(group_id))
        try:
            self._store.log.append(entries)
        except AppendFailed as failed:
            log.warning("group %s: not downgraded to a classic group: %s", group_id, failed)
            return False
        del self.groups[group_id]
        log.info("group %s: empty consumer group downgraded to a classic group", group_id)
        return True

    def describe(self, group_id: str) -> GroupView | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        return GroupView(
            group_id=group_id,
            state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=self.preferred_assignor(group),
            members=tuple(
                MemberView(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=m.subscribed_topic_names,
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=self._named(group, m.assigned),
                    target_assignment=self._named(group, group.target.get(m.member_id, {})),
                    state=m.state.name,
                )
                for m in group.members.values()
            ),
        )

    def _named(
        self, group: ConsumerGroup, assignment: Assignment
    ) -> tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]:
        by_id = {t.topic_id: name for name, t in group.subscription_metadata.items()}
        return tuple(
            sorted(
                (
                    topic_id,
                    by_id.get(topic_id) or self.topics.name_of(topic_id) or "",
                    tuple(sorted(parts)),
                )
                for topic_id, parts in assignment.items()
                if parts
            )
        )

    def listings(self) -> Iterator[tuple[str, str]]:
        """(group id, state) of every consumer group."""
        for group in self.groups.values():
            yield group.group_id, group.state.value

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.groups

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)


def compile_regex(pattern: str) -> object:
    """RE2, as Kafka (RE2/J) reads SubscribedTopicRegex; ValueError when it is not one."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise ValueError(
            f"SubscribedTopicRegex {pattern} is not a valid regular expression: {exc}"
        ) from None


def topics_matching(compiled: object, names: Iterable[str]) -> frozenset[str]:
    """The topics a regex subscribes to: whole-name matches, internal topics excluded."""
    match = compiled.fullmatch  # type: ignore[attr-defined]
    return frozenset(n for n in names if not n.startswith("__") and match(n) is not None)


def _check_epoch(member: ConsumerGroupMember, epoch: int, owned: Assignment | None) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: a member one epoch behind is
    forgiven if it owns no more than it is assigned (its last answer was lost)."""
    if epoch > member.member_epoch:
        raise MemberFenced(
            f"The consumer group member has a greater member epoch ({epoch}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must "
            "abandon all its partitions and rejoin."
        )
    if epoch < member.member_epoch and (
        epoch != member.previous_member_epoch or not _is_subset(owned, member.assigned)
    ):
        raise MemberFenced(
            f"The consumer group member has a smaller member epoch ({epoch}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must "
            "abandon all its partitions and rejoin."
        )


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(parts <= assigned.get(topic_id, frozenset()) for topic_id, parts in owned.items())


def metadata_value(member: ConsumerGroupMember) -> MemberMetadataValue:
    """The member metadata record of a member (a classic member's protocols included)."""
    return MemberMetadataValue(
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=member.subscribed_topic_names,
        subscribed_topic_regex=member.subscribed_topic_regex,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor,
        classic=member.classic,
    )


def _current(member: ConsumerGroupMember) -> CurrentMemberAssignmentValue:
    return CurrentMemberAssignmentValue(
        member_epoch=member.member_epoch,
        previous_member_epoch=member.previous_member_epoch,
        state=int(member.state),
        assigned=member.assigned,
        pending_revocation=member.pending_revocation,
    )


def owned_from_wire(
    topic_partitions: Sequence[tuple[uuid.UUID, Sequence[int]]] | None,
) -> Assignment | None:
    """A heartbeat's TopicPartitions as an assignment (None stays None: "unchanged")."""
    if topic_partitions is None:
        return None
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, partitions in topic_partitions:
        owned[topic_id] = owned.get(topic_id, frozenset()) | frozenset(partitions)
    return owned
