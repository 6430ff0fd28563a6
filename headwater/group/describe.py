"""What `headwater groups list|describe GROUP` shows, as pure values.

A report joins a group's description (members, client ids and hosts, decoded
assignments) with its committed offsets, and says which member owns each
committed partition. It is built either in-process from a `GroupCoordinator`
or, for a CLI talking to a running broker, from the DescribeGroups and
OffsetFetch answers (`description_from_response`). Lag needs the log end
offsets, which the CLI has and this module does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from headwater.group.coordinator import GroupCoordinator
from headwater.group.results import GroupDescription, GroupListing, MemberDescription
from headwater.group.storage import CommittedOffset
from headwater.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    decode_assignment,
)

Partitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class MemberReport:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    # Decoded consumer-protocol assignment; None when the bytes are not one.
    assignment: Partitions | None
    #: KIP-848 members only: the member epoch and the partitions it is heading to.
    member_epoch: int | None = None
    target_assignment: Partitions | None = None


@dataclass(frozen=True, slots=True)
class CommittedOffsetReport:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    owner: str | None  # member id the partition is assigned to, if any

    def lag(self, log_end_offset: int) -> int:
        """Records the group has yet to consume (never negative)."""
        return max(log_end_offset - self.offset, 0)


@dataclass(frozen=True, slots=True)
class GroupReport:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation_id: int
    leader_id: str | None
    members: tuple[MemberReport, ...]
    offsets: tuple[CommittedOffsetReport, ...]
    #: "classic" or "consumer" (KIP-848); a consumer group has epochs, not generations.
    group_type: str = "classic"
    group_epoch: int | None = None
    assignment_epoch: int | None = None


def list_groups(coordinator: GroupCoordinator) -> list[GroupListing]:
    """Every group, sorted by id."""
    return sorted(coordinator.list_groups(), key=lambda listing: listing.group_id)


def describe_group(coordinator: GroupCoordinator, group_id: str) -> GroupReport:
    """The report for one group of an in-process coordinator."""
    return group_report(
        coordinator.describe_group(group_id), coordinator.fetch_offsets(group_id, None)
    )


def group_report(
    description: GroupDescription,
    committed: Sequence[tuple[str, int, CommittedOffset | None]],
) -> GroupReport:
    members = tuple(_member_report(description.protocol_type, m) for m in description.members)
    owners = {
        (topic, partition): member.member_id
        for member in members
        for topic, partitions in member.assignment or ()
        for partition in partitions
    }
    offsets = tuple(
        CommittedOffsetReport(
            topic=topic,
            partition=partition,
            offset=value.offset,
            leader_epoch=value.leader_epoch,
            metadata=value.metadata,
            owner=owners.get((topic, partition)),
        )
        for topic, partition, value in sorted(committed, key=lambda row: (row[0], row[1]))
        if value is not None
    )
    return GroupReport(
        group_id=description.group_id,
        state=description.state,
        protocol_type=description.protocol_type,
        protocol=description.protocol_name,
        generation_id=description.generation_id,
        leader_id=description.leader_id,
        members=members,
        offsets=offsets,
    )


def consumer_group_report(
    group: object, committed: Sequence[tuple[str, int, CommittedOffset | None]]
) -> GroupReport:
    """A KIP-848 group from a ConsumerGroupDescribe response group (kio entity):
    epochs, the assignor, each member's epoch, assignment and target."""

    def partitions(assignment: object) -> Partitions:
        topics: Sequence[object] = getattr(assignment, "topic_partitions", ())
        return tuple(
            sorted(
                (str(getattr(t, "topic_name", "")), tuple(sorted(getattr(t, "partitions", ()))))
                for t in topics
            )
        )

    members: Sequence[object] = getattr(group, "members", ())
    description = GroupDescription(
        group_id=str(getattr(group, "group_id", "")),
        state=str(getattr(group, "group_state", "")),
        protocol_type="consumer",
        protocol_name=str(getattr(group, "assignor_name", "")),
        generation_id=int(getattr(group, "group_epoch", -1)),
        leader_id=None,
        members=(),
    )
    report = group_report(description, committed)
    reports = tuple(
        MemberReport(
            member_id=str(getattr(m, "member_id", "")),
            group_instance_id=getattr(m, "instance_id", None),
            client_id=str(getattr(m, "client_id", "")),
            client_host=str(getattr(m, "client_host", "")),
            assignment=partitions(getattr(m, "assignment", None)),
            member_epoch=int(getattr(m, "member_epoch", -1)),
            target_assignment=partitions(getattr(m, "target_assignment", None)),
        )
        for m in members
    )
    owners = {
        (topic, partition): m.member_id
        for m in reports
        for topic, parts in m.assignment or ()
        for partition in parts
    }
    offsets = tuple(replace(o, owner=owners.get((o.topic, o.partition))) for o in report.offsets)
    return replace(
        report,
        members=reports,
        offsets=offsets,
        group_type="consumer",
        group_epoch=int(getattr(group, "group_epoch", -1)),
        assignment_epoch=int(getattr(group, "assignment_epoch", -1)),
    )


def _member_report(protocol_type: str, member: MemberDescription) -> MemberReport:
    assignment: Partitions | None = None
    if protocol_type == CONSUMER_PROTOCOL_TYPE:
        try:
            assignment = decode_assignment(member.assignment).partitions
        except ConsumerProtocolError:
            assignment = None
    return MemberReport(
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
        client_id=member.client_id,
        client_host=member.client_host,
        assignment=assignment,
    )


def description_from_response(group: object) -> GroupDescription:
    """A DescribeGroups response group (kio entity) as a `GroupDescription`.

    The wire carries neither the generation nor the leader, so they read as
    -1 and None.
    """
    members: Sequence[object] = getattr(group, "members", ())
    return GroupDescription(
        group_id=str(getattr(group, "group_id", "")),
        state=str(getattr(group, "group_state", "")),
        protocol_type=str(getattr(group, "protocol_type", "")),
        protocol_name=str(getattr(group, "protocol_data", "")),
        generation_id=-1,
        leader_id=None,
        members=tuple(
            MemberDescription(
                member_id=str(getattr(m, "member_id", "")),
                group_instance_id=getattr(m, "group_instance_id", None),
                client_id=str(getattr(m, "client_id", "")),
                client_host=str(getattr(m, "client_host", "")),
                metadata=bytes(getattr(m, "member_metadata", b"")),
                assignment=bytes(getattr(m, "member_assignment", b"")),
            )
            for m in members
        ),
    )
