"""The group coordinator: Kafka's classic rebalance protocol as a sans-I/O object.

Shape of the API
----------------
Every method takes the current time as `now_ms` (a monotonic clock in
milliseconds) and never blocks, sleeps or touches a socket.

* `join_group` and `sync_group` return a `Pending[JoinResult]` /
  `Pending[SyncResult]`. It is already `done` when the answer is immediate
  (errors, MEMBER_ID_REQUIRED, a rejoin that changes nothing); otherwise the
  coordinator completes it later, when the last member rejoins, when the
  leader sends its assignment, or from `tick`. Callbacks registered with
  `Pending.on_done` run synchronously at completion.
* `commit_offsets` returns a `Pending[list[ErrorCode]]`: it is answered once
  its record is replicated (see `coordinator/replication.py`).
* `heartbeat`, `leave_group`, the other offset methods and the queries answer at once.
* `tick(now_ms)` fires every timer that is due: member session expiry, the end
  of a join phase (rebalance timeout or `group.initial.rebalance.delay.ms`),
  members that never sent SyncGroup, and removal of empty groups that hold
  nothing. `next_deadline_ms()` says when the next timer is due, so a driver
  can sleep exactly that long.

The rules follow Kafka's GroupCoordinator (classic protocol, Kafka 3.x): error
codes, when a rebalance starts, who is leader, static membership (KIP-345),
MEMBER_ID_REQUIRED (KIP-394), pending-sync expiry and skip_assignment
(KIP-814). Durability: completed generations and committed offsets go to the
`StateLog` (see `group/storage.py`) and are replayed by the constructor (or
by `load` in steps). A commit, the leader's SyncGroup and a static member's
rejoin are answered only when the `Replicated` hook says the record is
replicated, as Kafka's coordinator answers from its append callback. What is
kept and how it becomes records is `GroupStore`'s (group/group_store.py);
a group's own state machine is `Group`'s (group/membership.py).

One `GroupCoordinator` holds the groups of one ``__consumer_offsets``
partition, like a shard of Kafka's CoordinatorRuntime; `group/shards.py`
routes groups to the shards this broker leads.

Size: the coordinator's operations on one partition's groups (join, sync,
heartbeat, leave, commits, transactional commits, expiration, loading) share the
shard's groups, timers and pending writes; the group state machine and the store
are their own modules.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.coordinator.replication import Replicated, coordinator_error, replicated_at_once
from headwater.coordinator.state_log import LogEntry, ReplayItem, StateLog
from headwater.group.consumer_group_classic import ClassicJoin, ClassicMembers
from headwater.group.consumer_group_coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
)
from headwater.group.consumer_group_replay import finish_load as finish_consumer_group_load
from headwater.group.group_store import GroupStore
from headwater.group.membership import Group, GroupState, Member, Protocols
from headwater.group.offset_commits import OffsetCommits
from headwater.group.offsets import (
    DEFAULT_MAX_METADATA_BYTES,
    OffsetCommitEntry,
    PartitionExists,
    TopicPartition,
)
from headwater.group.results import (
    GroupDescription,
    GroupListing,
    JoinedMember,
    JoinResult,
    LeaveResult,
    MemberDescription,
    MemberLeaveResult,
    SyncResult,
)
from headwater.group.storage import CommittedOffset
from headwater.group.topics_image import TopicsImage

log = logging.getLogger(__name__)

# Kafka's bit set of operations allowed on a group when no ACLs are in force:
# READ(3), DELETE(6), DESCRIBE(8), DESCRIBE_CONFIGS(10), ALTER_CONFIGS(11).
ALL_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings of the group coordinator (Kafka's names in comments)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES  # offset.metadata.max.bytes
    # How long an empty group without offsets is remembered (offsets.retention.minutes),
    # and how long committed offsets outlive their group becoming empty (KIP-211).
    empty_group_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms


def random_member_id(prefix: str) -> str:
    """Kafka's member id shape: client id (or instance id), a dash, a UUID."""
    return f"{prefix}-{uuid.uuid4()}"


_Completion = tuple[Pending[JoinResult] | Pending[SyncResult], JoinResult | SyncResult]


class GroupCoordinator:
    """The consumer groups of one offsets partition, rebuilt from its `StateLog`."""

    def __init__(
        self,
        log: StateLog,
        partition_exists: PartitionExists,
        *,
        now_ms: int,
        config: GroupConfig | None = None,
        member_id_factory: Callable[[str], str] = random_member_id,
        replicated: Replicated = replicated_at_once,
        replay: bool = True,
        consumer_config: ConsumerGroupConfig | None = None,
        topics: TopicsImage | None = None,
    ) -> None:
        """`replay=False` starts empty, for a caller that feeds the log through `load`.

        KIP-848 consumer groups of the same partition live beside the classic
        ones in `consumer_groups` (their own module), sharing the store;
        `topics` is what their assignors see of the cluster."""
        self.config = config or GroupConfig()
        self._new_member_id = member_id_factory
        self._store = GroupStore(
            log,
            partition_exists,
            max_metadata_bytes=self.config.max_metadata_bytes,
            replicated=replicated,
        )
        self._groups = self._store.groups
        self.consumer_groups = ConsumerGroupCoordinator(
            self._store, topics=topics, config=consumer_config
        )
        # Online migration: classic members of a consumer group, and the two hooks
        # by which a group changes protocol under the classic side's feet.
        self._classic_members = ClassicMembers(self.consumer_groups, member_id_factory)
        self.consumer_groups.classic_max_size = self.config.max_size
        self.consumer_groups.on_upgrade = self._upgraded
        self.consumer_groups.on_downgrade = self._downgraded
        self._next_offsets_expiry_ms = now_ms + self.config.offsets_retention_check_interval_ms
        self.offsets = self._store.offsets
        self._offset_commits = OffsetCommits(self._store)
        # Answers to hand out once the current operation has updated all state.
        self._completions: list[_Completion] = []
        self._answering_depth = 0
        if replay:
            self.load(log.replay(), now_ms)
            self.finish_load(now_ms)

    # ------------------------------------------------------------------ JoinGroup

    def join_group(
        self,
        now_ms: int,
        *,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int = -1,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = True,
        supports_skip_assignment: bool = False,
    ) -> Pending[JoinResult]:
        """Join (or rejoin) a group.

        `require_known_member_id` is True for JoinGroup v4+: a new dynamic
        member first gets MEMBER_ID_REQUIRED with its id and must rejoin with it.
        A negative `rebalance_timeout_ms` (v0) means the session timeout.
        """
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        request = _JoinRequest(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=tuple(protocols),
            supports_skip_assignment=supports_skip_assignment,
        )
        if not group_id:
            return Pending.completed(_join_error(ErrorCode.invalid_group_id, member_id))
        if not (
            self.config.min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return Pending.completed(_join_error(ErrorCode.invalid_session_timeout, member_id))
        if self._classic_members.serves(group_id):
            consumer_group = self.consumer_groups.group(group_id)
            if consumer_group is not None and consumer_group.members:
                # A classic member of a running consumer group (online migration).
                return self._classic_members.join(
                    now_ms,
                    ClassicJoin(
                        group_id=group_id,
                        member_id=member_id,
                        instance_id=group_instance_id,
                        protocol_type=protocol_type,
                        protocols=tuple(protocols),
                        session_timeout_ms=session_timeout_ms,
                        rebalance_timeout_ms=rebalance_timeout_ms,
                        client_id=client_id,
                        client_host=client_host,
                        require_known_member_id=require_known_member_id,
                    ),
                )
            if not self.consumer_groups.downgrade_if_empty(group_id):
                # An empty consumer group the migration policy keeps a consumer group.
                return Pending.completed(
                    _join_error(ErrorCode.inconsistent_group_protocol, member_id)
                )
        group = self._groups.get(group_id)
        if group is None:
            if member_id:
                return Pending.completed(_join_error(ErrorCode.unknown_member_id, member_id))
            group = self._groups[group_id] = Group(group_id)
        if not self._accepts_joining_member(group, member_id, group_instance_id):
            group.pending_members.pop(member_id, None)
            return Pending.completed(_join_error(ErrorCode.group_max_size_reached, member_id))
        with self._answering():
            if not member_id:
                return self._join_new_member(now_ms, group, request, require_known_member_id)
            return self._join_known_member(now_ms, group, request)

    def _accepts_joining_member(
        self, group: Group, member_id: str, instance_id: str | None
    ) -> bool:
        """group.max.size: a full group still lets its own members rejoin.

        A restarted static member takes its old place, so it counts as one too.
        """
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if not member_id and instance_id is not None:
            member_id = group.static_members.get(instance_id, "")
        member = group.members.get(member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            joined = sum(1 for m in group.members.values() if m.awaiting_join is not None)
            return (member is not None and member.awaiting_join is not None) or (
                joined < self.config.max_size
            )
        return member is not None or len(group.members) < self.config.max_size

    def _join_new_member(
        self, now_ms: int, group: Group, request: _JoinRequest, require_known_member_id: bool
    ) -> Pending[JoinResult]:
        if group.state is GroupState.DEAD:
            return Pending.completed(_join_error(ErrorCode.coordinator_not_available, ""))
        if not group.supports_protocols(request.protocol_type, request.protocol_names):
            return Pending.completed(_join_error(ErrorCode.inconsistent_group_protocol, ""))
        new_id = self._new_member_id(request.group_instance_id or request.client_id)
        if request.group_instance_id is not None:
            return self._join_static_member(now_ms, group, new_id, request)
        if require_known_member_id:
            group.pending_members[new_id] = now_ms + request.session_timeout_ms
            return Pending.completed(_join_error(ErrorCode.member_id_required, new_id))
        return self._add_member_and_rebalance(now_ms, group, new_id, request)

    def _join_static_member(
        self, now_ms: int, group: Group, new_id: str, request: _JoinRequest
    ) -> Pending[JoinResult]:
        """A static member (re)starts with an empty member id: take over its old place."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        old_id = group.static_members.get(instance_id)
        if old_id is None:
            return self._add_member_and_rebalance(now_ms, group, new_id, request)
        previous_leader = group.leader_id or ""
        member, old = group.replace_static_member(instance_id, old_id, new_id)
        self._fence(old)
        self._update_member(now_ms, member, request)
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
            # Same protocol: the old assignment still holds, no rebalance (KIP-345).
            stored = self._store.store_group(group)
            is_leader = group.leader_id == new_id
            skip = is_leader and request.supports_skip_assignment
            joined = JoinResult(
                error=ErrorCode.none,
                member_id=new_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                # Below v9 the old leader id is returned, so a restarted leader
                # acts as a follower: a Stable group would not broadcast its
                # new assignment anyway.
                leader_id=new_id if skip else previous_leader,
                members=self._joined_members(group) if skip else (),
                skip_assignment=skip,
            )
            # The new member id is only answered once it is durable; a failed
            # write keeps it in memory (Kafka reverts it), which a retry or the
            # next coordinator's reload corrects.
            return stored.map(
                lambda error: (
                    joined
                    if error is ErrorCode.none
                    else _join_error(coordinator_error(error), new_id)
                )
            )
        pending: Pending[JoinResult] = Pending()
        member.awaiting_join = pending
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(now_ms, group)
        else:
            # Stable with a new protocol, or CompletingRebalance (the leader may
            # have assigned to the old member id): start over.
            self._prepare_rebalance(now_ms, group)
            self._maybe_complete_join(now_ms, group)
        return pending

    def _join_known_member(
        self, now_ms: int, group: Group, request: _JoinRequest
    ) -> Pending[JoinResult]:
        member_id = request.member_id
        if group.state is GroupState.DEAD:
            return Pending.completed(_join_error(ErrorCode.coordinator_not_available, member_id))
        if not group.supports_protocols(request.protocol_type, request.protocol_names):
            return Pending.completed(_join_error(ErrorCode.inconsistent_group_protocol, member_id))
        if member_id in group.pending_members:
            # The second step of MEMBER_ID_REQUIRED: now it becomes a member.
            del group.pending_members[member_id]
            if request.group_instance_id is not None:
                return Pending.completed(_join_error(ErrorCode.unknown_member_id, member_id))
            return self._add_member_and_rebalance(now_ms, group, member_id, request)
        error = group.validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            return Pending.completed(_join_error(error, member_id))
        member = group.members[member_id]
        self._touch(now_ms, member)
        if group.state is GroupState.COMPLETING_REBALANCE and member.matches(request.protocols):
            # It probably lost the JoinGroup response: repeat it.
            return Pending.completed(self._join_result(group, member))
        if (
            group.state is GroupState.STABLE
            and group.leader_id != member_id
            and member.matches(request.protocols)
        ):
            # A follower rejoining with nothing new: no reason to disturb the group.
            return Pending.completed(self._join_result(group, member, include_members=False))
        pending: Pending[JoinResult] = Pending()
        self._update_member(now_ms, member, request)
        self._await_join(member, pending)
        if group.can_rebalance:
            self._prepare_rebalance(now_ms, group)
        self._maybe_complete_join(now_ms, group)
        return pending

    def _add_member_and_rebalance(
        self, now_ms: int, group: Group, member_id: str, request: _JoinRequest
    ) -> Pending[JoinResult]:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocols=request.protocols,
            session_deadline_ms=now_ms + request.session_timeout_ms,
        )
        pending: Pending[JoinResult] = Pending()
        member.awaiting_join = pending
        if group.initial_delay_remaining_ms is not None:
            group.new_member_added = True
        group.add(member, request.protocol_type)
        if group.can_rebalance:
            self._prepare_rebalance(now_ms, group)
        self._maybe_complete_join(now_ms, group)
        return pending

    def _update_member(self, now_ms: int, member: Member, request: _JoinRequest) -> None:
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host
        self._touch(now_ms, member)

    def _await_join(self, member: Member, pending: Pending[JoinResult]) -> None:
        """Record a member's JoinGroup; a repeated one answers the earlier request too."""
        previous = member.awaiting_join
        if previous is not None:
            pending.on_done(previous.complete)
        member.awaiting_join = pending

    # ------------------------------------------------------------- rebalancing

    def _prepare_rebalance(self, now_ms: int, group: Group) -> None:
        """Start a join phase: every member must rejoin (found out via heartbeat)."""
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Followers waiting for the leader's assignment will not get one.
            for member in group.members.values():
                member.assignment = None
                self._answer_sync(member, SyncResult(ErrorCode.rebalance_in_progress))
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        if group.state is GroupState.EMPTY and self.config.initial_rebalance_delay_ms > 0:
            # A new group waits a little for more members, so the first
            # consumers of an application do not each cause a rebalance.
            delay = self.config.initial_rebalance_delay_ms
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
            group.join_deadline_ms = now_ms + delay
        else:
            group.initial_delay_remaining_ms = None
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
        group.transition_to(GroupState.PREPARING_REBALANCE)

    def _maybe_complete_join(self, now_ms: int, group: Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.initial_delay_remaining_ms is None
            and group.has_all_members_joined()
        ):
            self._complete_join(now_ms, group)

    def _complete_join(self, now_ms: int, group: Group) -> None:
        """End the join phase: drop who did not rejoin, start the next generation."""
        for member in list(group.members.values()):
            if member.awaiting_join is None and member.group_instance_id is None:
                self._remove_member(group, member)
        if group.members and not group.elect_joined_leader():
            # Only static members that have not rejoined are left: give them
            # another rebalance timeout (or until their sessions lapse).
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            return
        group.join_deadline_ms = None
        group.initial_delay_remaining_ms = None
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.transition_to(GroupState.EMPTY)
            group.empty_since_ms = now_ms
            self._store.store_group(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(GroupState.COMPLETING_REBALANCE)
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        for member in group.members.values():
            pending = member.awaiting_join
            if pending is not None:
                member.awaiting_join = None
                self._touch(now_ms, member)
                self._completions.append((pending, self._join_result(group, member)))

    def _join_result(
        self, group: Group, member: Member, *, include_members: bool = True
    ) -> JoinResult:
        is_leader = group.leader_id == member.member_id
        return JoinResult(
            error=ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=self._joined_members(group) if is_leader and include_members else (),
        )

    @staticmethod
    def _joined_members(group: Group) -> tuple[JoinedMember, ...]:
        protocol = group.protocol_name or ""
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(protocol))
            for m in group.members.values()
        )

    # ------------------------------------------------------------------ SyncGroup

    def sync_group(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Sequence[tuple[str, bytes]] = (),
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Pending[SyncResult]:
        """Followers wait for the leader; the leader's assignments end the rebalance."""
        group = self._groups.get(group_id)
        if not group_id:
            return Pending.completed(SyncResult(ErrorCode.invalid_group_id))
        if self._classic_members.serves(group_id):
            return Pending.completed(
                self._classic_members.sync(
                    now_ms,
                    group_id=group_id,
                    generation_id=generation_id,
                    member_id=member_id,
                    instance_id=group_instance_id,
                    protocol_type=protocol_type,
                    protocol_name=protocol_name,
                )
            )
        if group is None:
            return Pending.completed(SyncResult(ErrorCode.unknown_member_id))
        if group.state is GroupState.DEAD:
            return Pending.completed(SyncResult(ErrorCode.coordinator_not_available))
        error = group.validate_member(member_id, group_instance_id)
        if error is ErrorCode.none and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        if error is ErrorCode.none and (
            (protocol_type is not None and protocol_type != group.protocol_type)
            or (protocol_name is not None and protocol_name != group.protocol_name)
        ):
            error = ErrorCode.inconsistent_group_protocol
        if error is not ErrorCode.none:
            return Pending.completed(SyncResult(error))
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            return Pending.completed(SyncResult(ErrorCode.rebalance_in_progress))
        if group.state is GroupState.STABLE:
            self._synced(group, member_id)
            self._touch(now_ms, member)
            return Pending.completed(self._sync_result(group, member))
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return Pending.completed(SyncResult(ErrorCode.unknown_member_id))
        pending: Pending[SyncResult] = Pending()
        with self._answering():
            previous = member.awaiting_sync
            if previous is not None:
                pending.on_done(previous.complete)
            member.awaiting_sync = pending
            self._synced(group, member_id)
            if member_id == group.leader_id:
                given = dict(assignments)
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                generation = group.generation_id
                self._store.store_group(group).on_done(
                    lambda error: self._assignment_stored(now_ms, group, generation, error)
                )
        return pending

    def _assignment_stored(
        self, now_ms: int, group: Group, generation: int, error: ErrorCode
    ) -> None:
        """The leader's assignment is replicated (or not): answer everyone waiting.

        Members may have joined or left meanwhile; then the new rebalance
        decides, as in Kafka. A failed write sends the group back to rebalance.
        `now_ms` is the leader's SyncGroup time: the wait is short next to
        session timeouts.
        """
        if (
            self._groups.get(group.group_id) is not group
            or group.state is not GroupState.COMPLETING_REBALANCE
            or group.generation_id != generation
        ):
            return
        with self._answering():
            if error is ErrorCode.none:
                group.transition_to(GroupState.STABLE)
                for m in group.members.values():
                    if m.awaiting_sync is not None:
                        self._touch(now_ms, m)
                        self._answer_sync(m, self._sync_result(group, m))
                return
            failed = SyncResult(coordinator_error(error))
            for m in group.members.values():
                m.assignment = None
                self._answer_sync(m, failed)
            self._prepare_rebalance(now_ms, group)

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline_ms = None

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(
            error=ErrorCode.none,
            assignment=member.assignment or b"",
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
        )

    # ------------------------------------------------------------ Heartbeat, Leave

    def heartbeat(
        self,
        now_ms: int,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        """Keep a member alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
        if not group_id:
            return ErrorCode.invalid_group_id
        if self._classic_members.serves(group_id):
            return self._classic_members.heartbeat(
                now_ms,
                group_id=group_id,
                generation_id=generation_id,
                member_id=member_id,
                instance_id=group_instance_id,
            )
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = group.validate_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            self._touch(now_ms, member)
            return ErrorCode.rebalance_in_progress
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self._touch(now_ms, member)
        return ErrorCode.none

    def leave_group(
        self, now_ms: int, *, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> LeaveResult:
        """Remove members (member id, instance id); an empty member id leaves by instance id."""
        if not group_id:
            return LeaveResult(ErrorCode.invalid_group_id)
        if self._classic_members.serves(group_id):
            return self._classic_members.leave(now_ms, group_id=group_id, members=members)
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(
                ErrorCode.none,
                tuple(
                    MemberLeaveResult(mid, iid, ErrorCode.unknown_member_id) for mid, iid in members
                ),
            )
        if group.state is GroupState.DEAD:
            return LeaveResult(ErrorCode.coordinator_not_available)
        results: list[MemberLeaveResult] = []
        with self._answering():
            for member_id, instance_id in members:
                error = self._leave_one(now_ms, group, member_id, instance_id)
                results.append(MemberLeaveResult(member_id, instance_id, error))
        return LeaveResult(ErrorCode.none, tuple(results))

    def _leave_one(
        self, now_ms: int, group: Group, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if not member_id:
            resolved = group.static_members.get(instance_id) if instance_id else None
            if resolved is None:
                return ErrorCode.unknown_member_id
            member_id = resolved
        elif member_id in group.pending_members:
            del group.pending_members[member_id]
            self._maybe_complete_join(now_ms, group)
            return ErrorCode.none
        else:
            error = group.validate_member(member_id, instance_id)
            if error is not ErrorCode.none:
                return error
        self._remove_member_and_rebalance(now_ms, group, group.members[member_id])
        return ErrorCode.none

    # ---------------------------------------------------------------- membership

    def _remove_member(self, group: Group, member: Member) -> None:
        """Take a member out, answering its blocked requests with UNKNOWN_MEMBER_ID."""
        self._answer_blocked(member, ErrorCode.unknown_member_id)
        group.remove(member.member_id)

    def _remove_member_and_rebalance(self, now_ms: int, group: Group, member: Member) -> None:
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms, group)
        self._maybe_complete_join(now_ms, group)

    def _upgraded(self, group: Group) -> None:
        """The group became a consumer group: members blocked in JoinGroup or SyncGroup
        are told to rejoin (Kafka's completeAllJoinFutures(REBALANCE_IN_PROGRESS))."""
        with self._answering():
            for member in group.members.values():
                self._answer_blocked(member, ErrorCode.rebalance_in_progress)
            group.join_deadline_ms = group.sync_deadline_ms = None

    def _downgraded(self, now_ms: int, group: Group) -> None:
        """The group became classic again: its members rejoin for a classic rebalance."""
        with self._answering():
            self._prepare_rebalance(now_ms, group)

    def _fence(self, old: Member) -> None:
        """A newer instance of a static member took over: its blocked requests are fenced."""
        self._answer_blocked(old, ErrorCode.fenced_instance_id)

    def _answer_blocked(self, member: Member, error: ErrorCode) -> None:
        """Answer the member's waiting JoinGroup and SyncGroup, if any, with `error`."""
        if member.awaiting_join is not None:
            pending = member.awaiting_join
            member.awaiting_join = None
            self._completions.append((pending, _join_error(error, member.member_id)))
        self._answer_sync(member, SyncResult(error))

    def _answer_sync(self, member: Member, result: SyncResult) -> None:
        if member.awaiting_sync is not None:
            pending = member.awaiting_sync
            member.awaiting_sync = None
            self._completions.append((pending, result))

    @staticmethod
    def _touch(now_ms: int, member: Member) -> None:
        member.touch(now_ms)

    # ------------------------------------------------------------------- timers

    def tick(self, now_ms: int) -> None:
        """Fire every timer due at `now_ms`, earliest first.

        Timers that fall due because of what this tick did (a rebalance with a
        zero timeout, say) wait for the next tick, so a tick always ends.
        """
        due: list[tuple[int, int, str, str]] = []
        for group in self._groups.values():
            for member in group.members.values():
                if not member.is_awaiting and member.session_deadline_ms <= now_ms:
                    due.append((member.session_deadline_ms, 0, group.group_id, member.member_id))
            for member_id, deadline in group.pending_members.items():
                if deadline <= now_ms:
                    due.append((deadline, 1, group.group_id, member_id))
            if group.join_deadline_ms is not None and group.join_deadline_ms <= now_ms:
                due.append((group.join_deadline_ms, 2, group.group_id, ""))
            if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
                due.append((group.sync_deadline_ms, 3, group.group_id, ""))
        with self._answering():
            for deadline, kind, group_id, member_id in sorted(due):
                found = self._groups.get(group_id)
                if found is None:
                    continue
                group = found
                if kind == 0:
                    self._expire_session(now_ms, group, member_id, deadline)
                elif kind == 1:
                    if group.pending_members.get(member_id) == deadline:
                        del group.pending_members[member_id]
                        self._maybe_complete_join(now_ms, group)
                elif kind == 2:
                    if group.join_deadline_ms == deadline:
                        self._expire_join(now_ms, group)
                elif group.sync_deadline_ms == deadline:
                    self._expire_sync(now_ms, group)
            self.consumer_groups.tick(now_ms)
            if now_ms >= self._next_offsets_expiry_ms:
                self._next_offsets_expiry_ms = (
                    now_ms + self.config.offsets_retention_check_interval_ms
                )
                self._expire_offsets(now_ms)
                self.consumer_groups.remove_empty(self._store.holds_offsets)
            self._remove_idle_groups(now_ms)

    def next_deadline_ms(self) -> int | None:
        """When `tick` next has work, or None if no timer is set."""
        deadlines: list[int] = []
        for group in self._groups.values():
            deadlines.extend(
                m.session_deadline_ms for m in group.members.values() if not m.is_awaiting
            )
            deadlines.extend(group.pending_members.values())
            for deadline in (group.join_deadline_ms, group.sync_deadline_ms):
                if deadline is not None:
                    deadlines.append(deadline)
        consumer_deadline = self.consumer_groups.next_deadline_ms()
        if consumer_deadline is not None:
            deadlines.append(consumer_deadline)
        return min(deadlines, default=None)

    def _expire_session(self, now_ms: int, group: Group, member_id: str, deadline: int) -> None:
        member = group.members.get(member_id)
        if member is None or member.is_awaiting or member.session_deadline_ms != deadline:
            return
        self._remove_member_and_rebalance(now_ms, group, member)

    def _expire_join(self, now_ms: int, group: Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            group.join_deadline_ms = None
            return
        remaining = group.initial_delay_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            # Members are still arriving: wait another delay, within the rebalance timeout.
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = max(
                remaining - self.config.initial_rebalance_delay_ms, 0
            )
            group.new_member_added = False
            group.join_deadline_ms = now_ms + delay
            return
        self._complete_join(now_ms, group)

    def _expire_sync(self, now_ms: int, group: Group) -> None:
        """Members that never sent SyncGroup (the leader, typically) are dropped."""
        group.sync_deadline_ms = None
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member)
        group.pending_sync.clear()
        self._prepare_rebalance(now_ms, group)
        self._maybe_complete_join(now_ms, group)

    def _expire_offsets(self, now_ms: int) -> None:
        """KIP-211: committed offsets expire ``offsets.retention.minutes`` after their group
        became empty; a group without a protocol (commits from ``assign`` users) expires
        each offset that long after its commit. Tombstones make it last (compaction).
        """
        retention = self.config.empty_group_retention_ms
        for group_id in list(self.offsets.group_ids()):
            group = self._groups.get(group_id)
            consumer_group = self.consumer_groups.group(group_id)
            if (
                self._store.pending_txn.has_group(group_id)
                or (group is not None and group.state is not GroupState.EMPTY)
                or (consumer_group is not None and consumer_group.members)
            ):
                continue  # a group with members keeps its offsets (KIP-848 ones too)
            committed = self.offsets.fetch(group_id, None)
            if group is not None and group.protocol_type:
                if now_ms - group.empty_since_ms < retention:
                    continue
                doomed = [(topic, partition) for topic, partition, _ in committed]
            else:
                doomed = [
                    (topic, partition)
                    for topic, partition, value in committed
                    if value is not None and now_ms - value.commit_timestamp_ms >= retention
                ]
            if not doomed:
                continue
            try:
                self.offsets.delete(group_id, doomed)
            except Exception as exc:  # the log refused the tombstones: next check
                log.warning("expiring offsets of group %s failed: %s", group_id, exc)
                continue
            log.info("expired %d committed offsets of group %s", len(doomed), group_id)

    def _remove_idle_groups(self, now_ms: int) -> None:
        """Forget empty groups that hold nothing.

        A group that never completed a generation (say, a MEMBER_ID_REQUIRED
        that was never claimed) goes at once; one with a history is kept for
        the retention period, so its generation keeps rising if it comes back.
        """
        for group in list(self._groups.values()):
            if (
                group.state is not GroupState.EMPTY
                or group.pending_members
                or self._store.holds_offsets(group.group_id)
            ):
                continue
            never_used = group.generation_id == 0 and not group.persisted
            expired = now_ms - group.empty_since_ms >= self.config.empty_group_retention_ms
            if never_used or expired:
                self._store.delete_group(group)

    # ------------------------------------------------------------------ offsets

    def commit_offsets(
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
        """OffsetCommit, answered once replicated (see `OffsetCommits.commit`)."""
        return self._offset_commits.commit(
            now_ms,
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            entries=entries,
            timestamp_ms=timestamp_ms,
            group_instance_id=group_instance_id,
            api_version=api_version,
        )

    def txn_commit_offsets(
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
        """TxnOffsetCommit, held pending until the transaction's marker."""
        return self._offset_commits.txn_commit(
            now_ms,
            group_id=group_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            entries=entries,
            timestamp_ms=timestamp_ms,
        )

    def complete_txn(self, producer_id: int, committed: bool) -> None:
        """A COMMIT/ABORT marker of the producer reached this offsets partition."""
        self._store.complete_txn(producer_id, committed)

    def has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        return self._store.pending_txn.is_pending(group_id, tp)

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> list[tuple[str, int, CommittedOffset | None]]:
        """OffsetFetch: given partitions (None where nothing is committed), or all (None)."""
        return self.offsets.fetch(group_id, partitions)

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete (see `OffsetCommits.delete`)."""
        return self._offset_commits.delete(group_id, partitions)

    # ------------------------------------------------------------ groups as a whole

    def delete_groups(self, group_ids: Sequence[str]) -> list[ErrorCode]:
        """DeleteGroups: only groups without members; their offsets go too."""
        errors: list[ErrorCode] = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if self.consumer_groups.is_consumer_group(group_id):
                errors.append(self.consumer_groups.delete_group(group_id))
            elif group is None or group.state is GroupState.DEAD:
                errors.append(ErrorCode.group_id_not_found)
            elif group.state is not GroupState.EMPTY:
                errors.append(ErrorCode.non_empty_group)
            else:
                errors.append(self._store.delete_group(group))
        return errors

    def list_groups(
        self, states: Collection[str] | None = None, types: Collection[str] | None = None
    ) -> list[GroupListing]:
        """ListGroups; `states` (v4) and `types` (v5: classic, consumer) filter,
        case-insensitively."""
        wanted = {state.lower() for state in states} if states else None
        kinds = {kind.lower() for kind in types} if types else None
        listed = [
            GroupListing(group.group_id, group.protocol_type or "", group.state.value)
            for group in self._groups.values()
            if wanted is None or group.state.value.lower() in wanted
        ]
        listed.extend(
            GroupListing(group_id, "consumer", state, "consumer")
            for group_id, state in self.consumer_groups.listings()
            if wanted is None or state.lower() in wanted
        )
        return [g for g in listed if kinds is None or g.group_type in kinds]

    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups' view (Kafka's group summary); an unknown group is Dead."""
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, GroupState.DEAD.value, "", "", -1, None)
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name or ""
        return GroupDescription(
            group_id=group_id,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_name=protocol if stable else "",
            generation_id=group.generation_id,
            leader_id=group.leader_id,
            members=tuple(
                MemberDescription(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    metadata=m.metadata(protocol) if stable else b"",
                    assignment=(m.assignment or b"") if stable else b"",
                )
                for m in group.members.values()
            ),
        )

    def group(self, group_id: str) -> Group | None:
        """The live group object, for inspection (tests, invariants); do not mutate."""
        return self._groups.get(group_id)

    # -------------------------------------------------------------- durability

    def live_records(self) -> Iterator[LogEntry]:
        """The current state as records: what a compacted offsets log would hold."""
        return self._store.live_records()

    def load(self, entries: Iterable[ReplayItem], now_ms: int) -> None:
        """Apply replayed records, oldest first; may be called in steps, then `finish_load`."""
        self._store.load(entries, now_ms)

    def finish_load(self, now_ms: int) -> None:
        """Groups known only by their offsets appear; loaded members' sessions start now."""
        self._store.finish_load(now_ms)
        finish_consumer_group_load(
            self._store.consumer_groups, now_ms, self.consumer_groups.config.session_timeout_ms
        )

    def unload(self) -> None:
        """This broker stopped coordinating the partition: forget every group.

        Requests still waiting get NOT_COORDINATOR, so their clients look up
        the new coordinator (Kafka's onGroupUnloaded).
        """
        with self._answering():
            for group in self._groups.values():
                for member in group.members.values():
                    self._answer_blocked(member, ErrorCode.not_coordinator)
                group.transition_to(GroupState.DEAD)
            self._store.clear()

    # --------------------------------------------------------------- answering

    def _answering(self) -> _Answering:
        return _Answering(self)

    def _flush_completions(self) -> None:
        if self._answering_depth:
            return  # an enclosing operation answers when it is done
        while self._completions:
            completions, self._completions = self._completions, []
            for pending, result in completions:
                pending.complete(result)  # type: ignore[arg-type]


class _Answering:
    """Completes queued answers once an operation has finished changing state.

    Callbacks then see the group as it will stay, never half-updated.
    """

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self._coordinator = coordinator

    def __enter__(self) -> None:
        self._coordinator._answering_depth += 1

    def __exit__(self, *exc: object) -> None:
        self._coordinator._answering_depth -= 1
        self._coordinator._flush_completions()


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    supports_skip_assignment: bool

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


def _join_error(error: ErrorCode, member_id: str) -> JoinResult:
    return JoinResult(error=error, member_id=member_id)
