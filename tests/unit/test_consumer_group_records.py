"""The consumer group records in __consumer_offsets, byte for byte as Kafka writes them."""

from __future__ import annotations

import struct
import uuid
from dataclasses import replace

import pytest

from headwater.group.consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ClassicMemberMetadata,
    ConsumerGroupKey,
    CurrentMemberAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    member_tombstones,
    record_type,
)
from headwater.group.storage import CorruptRecordError

TOPIC = uuid.UUID("12345678-1234-5678-1234-567812345678")


def test_keys_are_kafkas_non_flexible_layout() -> None:
    key = ConsumerGroupKey(MEMBER_METADATA, "g", "m1")
    assert encode_key(key) == struct.pack(">hh", 5, 1) + b"g" + struct.pack(">h", 2) + b"m1"
    assert encode_key(ConsumerGroupKey(GROUP_METADATA, "g")) == struct.pack(">hh", 3, 1) + b"g"
    assert decode_key(encode_key(key)) == key
    assert record_type(encode_key(key)) == MEMBER_METADATA


def test_the_group_epoch_value_is_version_0_then_int32_then_no_tags() -> None:
    assert encode_value(GroupMetadataValue(7)) == b"\x00\x00" + struct.pack(">i", 7) + b"\x00"


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (GROUP_METADATA, GroupMetadataValue(3)),
        (TARGET_ASSIGNMENT_METADATA, TargetAssignmentMetadataValue(9)),
        (
            PARTITION_METADATA,
            PartitionMetadataValue(
                (TopicMetadata(TOPIC, "orders", 3, {0: frozenset({"a", "b"}), 2: frozenset()}),)
            ),
        ),
        (
            MEMBER_METADATA,
            MemberMetadataValue("i", None, "client", "/127.0.0.1", ("a", "b"), "x.*", 300, "range"),
        ),
        (TARGET_ASSIGNMENT_MEMBER, TargetAssignmentMemberValue({TOPIC: frozenset({0, 2})})),
        (
            CURRENT_MEMBER_ASSIGNMENT,
            CurrentMemberAssignmentValue(4, 3, 1, {TOPIC: frozenset({1})}, {TOPIC: frozenset({2})}),
        ),
    ],
)
def test_every_value_round_trips(kind: int, value: object) -> None:
    assert decode_value(kind, encode_value(value)) == value  # type: ignore[arg-type]


def test_unknown_tagged_fields_are_skipped() -> None:
    """Tag 0 is ClassicMemberMetadata; a tag this broker does not know is skipped."""
    plain = encode_value(MemberMetadataValue(None, None, "c", "h", (), None, -1, None))
    tagged = plain[:-1] + b"\x01" + b"\x05" + b"\x03" + b"abc"
    assert decode_value(MEMBER_METADATA, tagged) == decode_value(MEMBER_METADATA, plain)


def test_classic_member_metadata_is_tagged_field_0_and_round_trips() -> None:
    classic = ClassicMemberMetadata(45000, (("cooperative-sticky", b"\x00\x01sub"), ("range", b"")))
    value = MemberMetadataValue("i", None, "c", "h", ("t",), None, 300, None, classic)
    data = encode_value(value)
    plain = encode_value(replace(value, classic=None))
    # Kafka's layout: the fields, then one tagged field (tag 0, its size, its body).
    assert data[: len(plain) - 1] == plain[:-1]
    assert data[len(plain) - 1 : len(plain) + 1] == b"\x01\x00"
    assert decode_value(MEMBER_METADATA, data) == value


def test_truncated_records_are_corrupt_not_guessed() -> None:
    data = encode_value(TargetAssignmentMemberValue({TOPIC: frozenset({0})}))
    with pytest.raises(CorruptRecordError):
        decode_value(TARGET_ASSIGNMENT_MEMBER, data[:-3])


def test_a_leaving_member_tombstones_its_three_records() -> None:
    keys = [decode_key(k).record_type for k, v in member_tombstones("g", "m") if v is None]
    assert keys == [CURRENT_MEMBER_ASSIGNMENT, TARGET_ASSIGNMENT_MEMBER, MEMBER_METADATA]
