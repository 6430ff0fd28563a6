"""Values the group coordinator answers with, independent of any wire version.

`group/apis.py` turns them into response dicts per API version; tests and the
CLI read them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One member as the leader sees it: the metadata of the selected protocol."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A JoinGroup answer; only the leader's carries the members' metadata."""

    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    """A SyncGroup answer: this member's assignment, opaque to the coordinator."""

    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class MemberLeaveResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveResult:
    """LeaveGroup: a group-level error and, for batched (v3+) leaves, one per member."""

    error: ErrorCode
    members: tuple[MemberLeaveResult, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer" (KIP-848), as ListGroups v5 says


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """DescribeGroups' view of one group.

    As in Kafka, `protocol_name`, metadata and assignments are only filled in
    while the group is Stable; an unknown group is described as Dead.
    """

    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    generation_id: int
    leader_id: str | None
    members: tuple[MemberDescription, ...] = field(default=())
