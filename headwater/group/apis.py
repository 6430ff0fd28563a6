"""The group APIs on the wire: kio request entities in, response dicts out.

Each handler reads a decoded kio request of any supported version and returns
a plain nested dict keyed by the kio field names of the response of the same
version; the broker builds the entity with
`headwater.protocol.messages.build_response(api_key, version, data)`, which
fills missing keys with defaults and drops keys a version lacks. So handlers
may include fields newer versions have; they only take care where a field's
type changes between versions (JoinGroup's protocol_name is nullable only
from v7).

JoinGroup and SyncGroup answers may be delayed, and OffsetCommit waits for
replication, so `GroupApis.handle` returns every response as a `Pending`;
`group/service.py` awaits it.

Each group is answered by the coordinator of its offsets partition
(`CoordinatorShards.route`); a group whose partition is not loaded here gets
NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while it loads, in the
error shape of each API.

Size: one adapter per group API (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit/Fetch/Delete, TxnOffsetCommit, Describe/List/DeleteGroups,
FindCoordinator), each a few dozen lines of wire-to-coordinator mapping; the
logic is in the coordinator.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.group.consumer_group_apis import consumer_group_describe, consumer_group_heartbeat
from headwater.group.coordinator import ALL_GROUP_OPERATIONS, GroupCoordinator
from headwater.group.offsets import OffsetCommitEntry, TopicPartition
from headwater.group.results import JoinResult, SyncResult
from headwater.group.shards import CoordinatorShards
from headwater.group.storage import CommittedOffset
from headwater.protocol.apis import ApiKey

Response = dict[str, object]
# Offsets partition -> (node id, host, port) of its leader, or None if it has none.
CoordinatorOf = Callable[[int], "tuple[int, str, int] | None"]
# Transactional id -> its transaction coordinator, or None if it has none now.
TxnCoordinatorOf = Callable[[str], "tuple[int, str, int] | None"]


# API key -> (min, max) version handled here, for the broker's ApiVersions table.
# OffsetCommit v0-1 and OffsetFetch v0 are gone from Kafka 4 and from kio; none
# of the supported clients sends them.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
}

_NO_AUTHORIZED_OPERATIONS = -(2**31)  # "not requested" in DescribeGroups v3+
_GROUP_KEY_TYPE = 0
_TRANSACTION_KEY_TYPE = 1


def api_key_of(request: object) -> int:
    return int(type(request).__api_key__)  # type: ignore[attr-defined]


def version_of(request: object) -> int:
    return int(type(request).__version__)  # type: ignore[attr-defined]


def _ms(value: datetime.timedelta) -> int:
    return value // datetime.timedelta(milliseconds=1)


# The fields the handlers read, common to every version of a request (kio has
# one class per version and no common base); fields that only some versions
# have are read with getattr and a default. Shared fields are said once, in
# the base shapes.


class GroupRequestLike(Protocol):
    @property
    def group_id(self) -> str: ...


class MemberRequestLike(GroupRequestLike, Protocol):
    @property
    def member_id(self) -> str: ...


class HeartbeatRequestLike(MemberRequestLike, Protocol):
    @property
    def generation_id(self) -> int: ...


LeaveGroupRequestLike = GroupRequestLike


class _JoinProtocol(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def metadata(self) -> bytes: ...


class JoinGroupRequestLike(MemberRequestLike, Protocol):
    @property
    def session_timeout(self) -> datetime.timedelta: ...
    @property
    def protocol_type(self) -> str: ...
    @property
    def protocols(self) -> Sequence[_JoinProtocol]: ...


class _SyncAssignment(Protocol):
    @property
    def member_id(self) -> str: ...
    @property
    def assignment(self) -> bytes: ...


class SyncGroupRequestLike(HeartbeatRequestLike, Protocol):
    @property
    def assignments(self) -> Sequence[_SyncAssignment]: ...


class _PartitionIndex(Protocol):
    @property
    def partition_index(self) -> int: ...


class _CommitPartition(_PartitionIndex, Protocol):
    @property
    def committed_offset(self) -> int: ...
    @property
    def committed_metadata(self) -> str | None: ...


class _TopicPartitions(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> Sequence[_PartitionIndex]: ...


class _CommitTopic(_TopicPartitions, Protocol):
    @property
    def partitions(self) -> Sequence[_CommitPartition]: ...


class OffsetCommitRequestLike(MemberRequestLike, Protocol):
    @property
    def generation_id_or_member_epoch(self) -> int: ...
    @property
    def topics(self) -> Sequence[_CommitTopic]: ...


class _FetchTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partition_indexes(self) -> Sequence[int]: ...


class OffsetDeleteRequestLike(GroupRequestLike, Protocol):
    @property
    def topics(self) -> Sequence[_TopicPartitions]: ...


class FindCoordinatorRequestLike(Protocol):
    @property
    def key_type(self) -> int: ...


class GroupApis:
    """Request handlers for the groups of the offsets partitions loaded on this broker."""

    def __init__(
        self,
        coordinator: GroupCoordinator | CoordinatorShards,
        *,
        node_id: int,
        host: str,
        port: int,
        coordinator_of: CoordinatorOf | None = None,
    ):
        """A single `GroupCoordinator` serves every group; `coordinator_of` defaults
        to this broker for every partition (a single broker)."""
        if isinstance(coordinator, GroupCoordinator):
            coordinator = CoordinatorShards.single(coordinator)
        self.shards = coordinator
        self._node_id = node_id
        self._host = host
        self._port = port
        self._coordinator_of = coordinator_of or self._this_broker
        #: Set by the broker once its transaction coordinator exists; until then
        #: FindCoordinator for a transactional id answers COORDINATOR_NOT_AVAILABLE.
        self.transaction_coordinator_of: TxnCoordinatorOf | None = None

    def _this_broker(self, partition: int) -> tuple[int, str, int]:
        return self._node_id, self._host, self._port

    def _route(self, group_id: str, *, allow_empty: bool = False) -> GroupCoordinator | ErrorCode:
        """Kafka's validateGroupStatus: an empty id is invalid where a member acts."""
        if not group_id and not allow_empty:
            return ErrorCode.invalid_group_id
        return self.shards.route(group_id)

    def handle(
        self,
        request: object,
        *,
        now_ms: int,
        timestamp_ms: int,
        client_id: str = "",
        client_host: str = "",
    ) -> Pending[Response]:
        """Answer any group API request; `timestamp_ms` is wall-clock time for commits."""
        api_key = api_key_of(request)
        if api_key == ApiKey.JOIN_GROUP:
            return self.join_group(
                cast(JoinGroupRequestLike, request),
                now_ms=now_ms,
                client_id=client_id,
                client_host=client_host,
            )
        if api_key == ApiKey.SYNC_GROUP:
            return self.sync_group(cast(SyncGroupRequestLike, request), now_ms=now_ms)
        if api_key == ApiKey.OFFSET_COMMIT:
            return self.offset_commit(
                cast(OffsetCommitRequestLike, request), now_ms=now_ms, timestamp_ms=timestamp_ms
            )
        if api_key == ApiKey.TXN_OFFSET_COMMIT:
            return self.txn_offset_commit(request, now_ms=now_ms, timestamp_ms=timestamp_ms)
        if api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
            return consumer_group_heartbeat(
                self.shards,
                request,
                now_ms=now_ms,
                client_id=client_id,
                client_host=client_host,
                version=version_of(request),
            )
        response: Response
        if api_key == ApiKey.FIND_COORDINATOR:
            response = self.find_coordinator(cast(FindCoordinatorRequestLike, request))
        elif api_key == ApiKey.HEARTBEAT:
            response = self.heartbeat(cast(HeartbeatRequestLike, request), now_ms=now_ms)
        elif api_key == ApiKey.LEAVE_GROUP:
            response = self.leave_group(cast(LeaveGroupRequestLike, request), now_ms=now_ms)
        elif api_key == ApiKey.OFFSET_FETCH:
            response = self.offset_fetch(request)
        elif api_key == ApiKey.DESCRIBE_GROUPS:
            response = self.describe_groups(request)
        elif api_key == ApiKey.LIST_GROUPS:
            response = self.list_groups(request)
        elif api_key == ApiKey.DELETE_GROUPS:
            response = self.delete_groups(request)
        elif api_key == ApiKey.OFFSET_DELETE:
            response = self.offset_delete(cast(OffsetDeleteRequestLike, request))
        elif api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
            response = consumer_group_describe(self.shards, request)
        else:
            raise ValueError(f"not a group API: key {api_key}")
        return Pending.completed(response)

    # -------------------------------------------------------------- coordinator

    def find_coordinator(self, request: FindCoordinatorRequestLike) -> Response:
        """A group's coordinator is the leader of its offsets partition.

        A transactional id's is the leader of its ``__transaction_state``
        partition (asked of `transaction_coordinator_of`). v4+ batches keys:
        one answer each.
        """
        version = version_of(request)
        key_type = request.key_type if version >= 1 else _GROUP_KEY_TYPE
        if version < 4:
            return self._coordinator_answer(key_type, getattr(request, "key", ""))
        keys: Sequence[str] = getattr(request, "coordinator_keys", ())
        return {
            "coordinators": [
                {"key": key, **self._coordinator_answer(key_type, key)} for key in keys
            ]
        }

    def _coordinator_answer(self, key_type: int, key: str) -> Response:
        if key_type == _GROUP_KEY_TYPE:
            found = self._coordinator_of(self.shards.partition_for(key))
            if found is None:
                return _no_coordinator(ErrorCode.coordinator_not_available, None)
        elif key_type == _TRANSACTION_KEY_TYPE:
            lookup = self.transaction_coordinator_of
            found = None if lookup is None else lookup(key)
            if found is None:
                return _no_coordinator(ErrorCode.coordinator_not_available, None)
        else:
            return _no_coordinator(ErrorCode.invalid_request, f"unsupported key type {key_type}")
        node_id, host, port = found
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "node_id": node_id,
            "host": host,
            "port": port,
        }

    # ------------------------------------------------------------- membership

    def join_group(
        self,
        request: JoinGroupRequestLike,
        *,
        now_ms: int,
        client_id: str = "",
        client_host: str = "",
    ) -> Pending[Response]:
        version = version_of(request)
        coordinator = self._route(request.group_id)
        if isinstance(coordinator, ErrorCode):
            failed = JoinResult(error=coordinator, member_id=request.member_id)
            return Pending.completed(join_group_response(failed, version))
        rebalance_timeout: datetime.timedelta | None = getattr(request, "rebalance_timeout", None)
        pending = coordinator.join_group(
            now_ms,
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=_ms(request.session_timeout),
            rebalance_timeout_ms=-1 if rebalance_timeout is None else _ms(rebalance_timeout),
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        return pending.map(lambda result: join_group_response(result, version))

    def sync_group(self, request: SyncGroupRequestLike, *, now_ms: int) -> Pending[Response]:
        coordinator = self._route(request.group_id)
        if isinstance(coordinator, ErrorCode):
            return Pending.completed(sync_group_response(SyncResult(coordinator)))
        pending = coordinator.sync_group(
            now_ms,
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            protocol_type=getattr(request, "protocol_type", None),
            protocol_name=getattr(request, "protocol_name", None),
            assignments=[(a.member_id, a.assignment) for a in request.assignments],
        )
        return pending.map(sync_group_response)

    def heartbeat(self, request: HeartbeatRequestLike, *, now_ms: int) -> Response:
        coordinator = self._route(request.group_id)
        if isinstance(coordinator, ErrorCode):
            return {"error_code": coordinator}
        error = coordinator.heartbeat(
            now_ms,
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
        )
        return {"error_code": error}

    def leave_group(self, request: LeaveGroupRequestLike, *, now_ms: int) -> Response:
        coordinator = self._route(request.group_id)
        if isinstance(coordinator, ErrorCode):
            return {"error_code": coordinator, "members": []}
        if version_of(request) < 3:
            member_id: str = getattr(request, "member_id", "")
            result = coordinator.leave_group(
                now_ms, group_id=request.group_id, members=[(member_id, None)]
            )
            error = result.error
            if error is ErrorCode.none and result.members:
                error = result.members[0].error
            return {"error_code": error}
        leaving: Sequence[object] = getattr(request, "members", ())
        result = coordinator.leave_group(
            now_ms,
            group_id=request.group_id,
            members=[
                (getattr(m, "member_id", ""), getattr(m, "group_instance_id", None))
                for m in leaving
            ],
        )
        return {
            "error_code": result.error,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "error_code": m.error,
                }
                for m in result.members
            ],
        }

    # ----------------------------------------------------------------- offsets

    def offset_commit(
        self, request: OffsetCommitRequestLike, *, now_ms: int, timestamp_ms: int
    ) -> Pending[Response]:
        coordinator = self._route(request.group_id, allow_empty=True)
        if isinstance(coordinator, ErrorCode):
            error = coordinator
            return Pending.completed(
                _commit_response(request, [error] * sum(len(t.partitions) for t in request.topics))
            )
        entries = [
            OffsetCommitEntry(
                topic=topic.name,
                partition=partition.partition_index,
                offset=partition.committed_offset,
                leader_epoch=getattr(partition, "committed_leader_epoch", -1),
                metadata=partition.committed_metadata,
            )
            for topic in request.topics
            for partition in topic.partitions
        ]
        committed = coordinator.commit_offsets(
            now_ms,
            group_id=request.group_id,
            generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            entries=entries,
            timestamp_ms=timestamp_ms,
            api_version=version_of(request),
        )
        return committed.map(lambda errors: _commit_response(request, errors))

    def txn_offset_commit(
        self, request: object, *, now_ms: int, timestamp_ms: int
    ) -> Pending[Response]:
        """TxnOffsetCommit v0-v3 (KIP-447 group metadata from v3)."""
        req = cast(Any, request)
        topics: Sequence[_CommitTopic] = req.topics
        coordinator = self._route(req.group_id)
        if isinstance(coordinator, ErrorCode):
            error = coordinator
            count = sum(len(t.partitions) for t in topics)
            return Pending.completed({"topics": _partition_errors(topics, [error] * count)})
        entries = [
            OffsetCommitEntry(
                topic=topic.name,
                partition=partition.partition_index,
                offset=partition.committed_offset,
                leader_epoch=getattr(partition, "committed_leader_epoch", -1),
                metadata=partition.committed_metadata,
            )
            for topic in topics
            for partition in topic.partitions
        ]
        committed = coordinator.txn_commit_offsets(
            now_ms,
            group_id=req.group_id,
            producer_id=int(req.producer_id),
            producer_epoch=int(req.producer_epoch),
            generation_id=int(getattr(req, "generation_id", -1)),
            member_id=getattr(req, "member_id", ""),
            group_instance_id=getattr(req, "group_instance_id", None),
            entries=entries,
            timestamp_ms=timestamp_ms,
        )
        return committed.map(lambda errors: {"topics": _partition_errors(topics, errors)})

    def complete_txn(self, producer_id: int, partition: int, committed: bool) -> None:
        """A marker reached offsets partition ``partition`` (the broker's
        TxnCompletionListener): settle that producer's pending TxnOffsetCommits."""
        coordinator = self.shards.coordinator_for_partition(partition)
        if coordinator is not None:
            coordinator.complete_txn(producer_id, committed)

    def offset_fetch(self, request: object) -> Response:
        version = version_of(request)
        stable = bool(getattr(request, "require_stable", False))
        if version >= 8:
            groups: Sequence[object] = getattr(request, "groups", ())
            answers: list[Response] = []
            for group in groups:
                group_id: str = getattr(group, "group_id", "")
                error = self._member_may_fetch(
                    group_id,
                    getattr(request, "member_id", None),
                    int(getattr(request, "member_epoch", -1)),
                )
                if error is not ErrorCode.none:
                    answers.append({"group_id": group_id, "topics": [], "error_code": error})
                    continue
                error, topics = self._fetched_topics(
                    group_id, getattr(group, "topics", None), stable
                )
                answers.append({"group_id": group_id, "topics": topics, "error_code": error})
            return {"groups": answers}
        requested: Sequence[_FetchTopic] | None = getattr(request, "topics", None)
        error, topics = self._fetched_topics(getattr(request, "group_id", ""), requested, stable)
        if error is not ErrorCode.none and version < 2:
            # v1 has no group-level error: Kafka puts it on every requested partition.
            topics = [
                {
                    "name": t.name,
                    "partitions": [_fetched_partition(p, None, error) for p in t.partition_indexes],
                }
                for t in requested or ()
            ]
        return {"topics": topics, "error_code": error}

    def _member_may_fetch(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode:
        """OffsetFetch v9+ from a KIP-848 member names its epoch (STALE_MEMBER_EPOCH)."""
        coordinator = self.shards.coordinator_for(group_id)
        group = None if coordinator is None else coordinator.consumer_groups.group(group_id)
        if group is None:
            return ErrorCode.none
        return group.validate_offset_fetch(member_id, epoch)

    def _fetched_topics(
        self, group_id: str, topics: Sequence[_FetchTopic] | None, require_stable: bool = False
    ) -> tuple[ErrorCode, list[Response]]:
        """Committed offsets grouped by topic; -1 and "" where nothing is committed.

        With ``require_stable`` (KIP-447), a partition with a TxnOffsetCommit
        still waiting for its marker answers UNSTABLE_OFFSET_COMMIT instead."""
        coordinator = self._route(group_id, allow_empty=True)
        if isinstance(coordinator, ErrorCode):
            return coordinator, []
        requested: list[TopicPartition] | None = None
        if topics is not None:
            requested = [(t.name, p) for t in topics for p in t.partition_indexes]
        by_topic: dict[str, list[Response]] = {}
        for topic, partition, committed in coordinator.fetch_offsets(group_id, requested):
            if require_stable and coordinator.has_pending_txn_offset(group_id, (topic, partition)):
                answer = _fetched_partition(partition, None, ErrorCode.unstable_offset_commit)
            else:
                answer = _fetched_partition(partition, committed)
            by_topic.setdefault(topic, []).append(answer)
        return ErrorCode.none, [
            {"name": name, "partitions": parts} for name, parts in by_topic.items()
        ]

    def offset_delete(self, request: OffsetDeleteRequestLike) -> Response:
        coordinator = self._route(request.group_id)
        if isinstance(coordinator, ErrorCode):
            return {"error_code": coordinator, "topics": []}
        requested = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        error, errors = coordinator.delete_offsets(request.group_id, requested)
        if error is not ErrorCode.none:
            return {"error_code": error, "topics": []}
        return {"error_code": ErrorCode.none, "topics": _partition_errors(request.topics, errors)}

    # ------------------------------------------------------------------ groups

    def describe_groups(self, request: object) -> Response:
        include_operations: bool = getattr(request, "include_authorized_operations", False)
        group_ids: Sequence[str] = getattr(request, "groups", ())
        described = []
        for group_id in group_ids:
            coordinator = self._route(group_id, allow_empty=True)
            if isinstance(coordinator, ErrorCode):
                described.append(
                    {
                        "error_code": coordinator,
                        "group_id": group_id,
                        "group_state": "",
                        "protocol_type": "",
                        "protocol_data": "",
                        "members": [],
                        "authorized_operations": _NO_AUTHORIZED_OPERATIONS,
                    }
                )
                continue
            group = coordinator.describe_group(group_id)
            described.append(
                {
                    "error_code": ErrorCode.none,
                    "group_id": group.group_id,
                    "group_state": group.state,
                    "protocol_type": group.protocol_type,
                    "protocol_data": group.protocol_name,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata,
                            "member_assignment": m.assignment,
                        }
                        for m in group.members
                    ],
                    "authorized_operations": (
                        ALL_GROUP_OPERATIONS if include_operations else _NO_AUTHORIZED_OPERATIONS
                    ),
                }
            )
        return {"groups": described}

    def list_groups(self, request: object) -> Response:
        states: Sequence[str] = getattr(request, "states_filter", ())
        types: Sequence[str] = getattr(request, "types_filter", ())
        error, listed = self.shards.list_groups(list(states) or None, list(types) or None)
        return {
            "error_code": error,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.state,
                    "group_type": g.group_type,
                }
                for g in listed
            ],
        }

    def delete_groups(self, request: object) -> Response:
        group_ids: Sequence[str] = getattr(request, "groups_names", ())
        results = []
        for group_id in group_ids:
            coordinator = self._route(group_id, allow_empty=True)
            if isinstance(coordinator, ErrorCode):
                error = coordinator
            else:
                (error,) = coordinator.delete_groups([group_id])
            results.append({"group_id": group_id, "error_code": error})
        return {"results": results}


def join_group_response(result: JoinResult, version: int) -> Response:
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""  # not nullable before v7
    return {
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in result.members
        ],
    }


def sync_group_response(result: SyncResult) -> Response:
    return {
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


def _fetched_partition(
    partition: int, committed: CommittedOffset | None, error: ErrorCode = ErrorCode.none
) -> Response:
    return {
        "partition_index": partition,
        "committed_offset": committed.offset if committed else -1,
        "committed_leader_epoch": committed.leader_epoch if committed else -1,
        "metadata": committed.metadata if committed else "",
        "error_code": error,
    }


def _commit_response(request: OffsetCommitRequestLike, errors: Sequence[ErrorCode]) -> Response:
    return {"topics": _partition_errors(request.topics, errors)}


def _partition_errors(
    topics: Sequence[_TopicPartitions], errors: Sequence[ErrorCode]
) -> list[Response]:
    """The requested topics and partitions, each with its error, in request order."""
    per_partition = iter(errors)
    return [
        {
            "name": topic.name,
            "partitions": [
                {"partition_index": p.partition_index, "error_code": next(per_partition)}
                for p in topic.partitions
            ],
        }
        for topic in topics
    ]


def _no_coordinator(error: ErrorCode, message: str | None) -> Response:
    return {"error_code": error, "error_message": message, "node_id": -1, "host": "", "port": -1}
