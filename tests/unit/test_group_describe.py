"""Group reports for the CLI, and the consumer-protocol decoding behind them."""

from __future__ import annotations

import io
import itertools
import struct

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from kio.schema.consumer_protocol_subscription.v3 import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition
from kio.serial import entity_writer

from headwater.coordinator.state_log import InMemoryStateLog
from headwater.group.apis import GroupApis
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.group.describe import (
    describe_group,
    description_from_response,
    group_report,
    list_groups,
)
from headwater.group.offsets import OffsetCommitEntry
from headwater.protocol.apis import ApiKey
from headwater.protocol.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
)
from headwater.protocol.messages import build_request, build_response


def aiokafka_assignment(topic: str, *partitions: int) -> bytes:
    """Assignment bytes from an independent encoder (aiokafka's)."""
    return ConsumerProtocolMemberAssignment(0, [(topic, list(partitions))], b"").encode()


def test_decodes_what_aiokafka_encodes() -> None:
    metadata = ConsumerProtocolMemberMetadata(0, ["orders", "audit"], b"ud").encode()
    subscription = decode_subscription(metadata)
    assert subscription.topics == ("orders", "audit")
    assert subscription.user_data == b"ud"
    assignment = decode_assignment(aiokafka_assignment("orders", 0, 2))
    assert assignment.partitions == (("orders", (0, 2)),)


def test_reads_newer_versions_with_the_newest_schema_it_knows() -> None:
    buffer = io.BytesIO()
    entity_writer(ConsumerProtocolSubscription)(
        buffer,
        ConsumerProtocolSubscription(
            topics=("t",),
            owned_partitions=(TopicPartition(topic="t", partitions=(1,)),),
            generation_id=4,
            rack_id="r1",
        ),
    )
    future_version = struct.pack(">h", 9) + buffer.getvalue() + b"future fields"
    subscription = decode_subscription(future_version)
    assert subscription.version == 9
    assert subscription.owned_partitions == (("t", (1,)),)


def test_garbage_is_reported_not_guessed() -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(b"\x00")
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(b"\x00\x00\x00\x00\x00\x09ab")
    assert decode_assignment(b"").partitions == ()


def make_stable_group() -> GroupCoordinator:
    counter = itertools.count(1)
    coordinator = GroupCoordinator(
        InMemoryStateLog(),
        lambda topic, partition: True,
        now_ms=0,
        config=GroupConfig(initial_rebalance_delay_ms=0),
        member_id_factory=lambda prefix: f"{prefix}-{next(counter)}",
    )
    joined = coordinator.join_group(
        0,
        group_id="g",
        member_id="",
        client_id="app",
        client_host="/10.1.1.1",
        protocol_type="consumer",
        protocols=[("range", ConsumerProtocolMemberMetadata(0, ["orders"], b"").encode())],
        session_timeout_ms=10_000,
        require_known_member_id=False,
    ).result()
    coordinator.sync_group(
        0,
        group_id="g",
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        assignments=[(joined.member_id, aiokafka_assignment("orders", 0, 1))],
    )
    coordinator.commit_offsets(
        0,
        group_id="g",
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        entries=[OffsetCommitEntry("orders", 1, 30), OffsetCommitEntry("orders", 5, 7)],
        timestamp_ms=0,
    )
    return coordinator


def test_report_shows_members_assignments_and_who_owns_each_offset() -> None:
    coordinator = make_stable_group()
    report = describe_group(coordinator, "g")
    assert (report.state, report.protocol, report.generation_id) == ("Stable", "range", 1)
    (member,) = report.members
    assert (member.member_id, member.client_id, member.client_host) == (
        "app-1",
        "app",
        "/10.1.1.1",
    )
    assert member.assignment == (("orders", (0, 1)),)
    assert [(o.partition, o.offset, o.owner) for o in report.offsets] == [
        (1, 30, "app-1"),
        (5, 7, None),
    ]
    assert report.offsets[0].lag(log_end_offset=42) == 12
    assert report.offsets[0].lag(log_end_offset=10) == 0
    assert [g.group_id for g in list_groups(coordinator)] == ["g"]


def test_report_from_the_wire_matches_the_in_process_one() -> None:
    coordinator = make_stable_group()
    handlers = GroupApis(coordinator, node_id=0, host="h", port=1)
    request = build_request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g"]})
    response = build_response(ApiKey.DESCRIBE_GROUPS, 5, handlers.describe_groups(request))
    (group,) = response.groups  # type: ignore[attr-defined]
    wire = group_report(description_from_response(group), coordinator.fetch_offsets("g", None))
    local = describe_group(coordinator, "g")
    assert wire.members == local.members
    assert wire.offsets == local.offsets
