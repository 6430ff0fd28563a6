"""The offsets log's key/value encodings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.group.storage import (
    CommittedOffset,
    CorruptRecordError,
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
)

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=20)

offset_keys = st.builds(OffsetKey, names, names, int32)
group_keys = st.builds(GroupKey, names)
offset_values = st.builds(CommittedOffset, int64, int32, st.text(max_size=50), int64)
member_records = st.builds(
    MemberRecord,
    names,
    st.none() | names,
    names,
    names,
    int32,
    int32,
    st.binary(max_size=40),
    st.binary(max_size=40),
)
group_records = st.builds(
    GroupRecord,
    names,
    int32,
    st.none() | names,
    st.none() | names,
    st.lists(member_records, max_size=4).map(tuple),
)


@given(offset_keys | group_keys)
def test_keys_round_trip(key: OffsetKey | GroupKey) -> None:
    assert decode_key(encode_key(key)) == key


@given(offset_values)
def test_offset_values_round_trip(value: CommittedOffset) -> None:
    assert decode_offset_value(encode_offset_value(value)) == value


@given(group_records)
def test_group_values_round_trip(value: GroupRecord) -> None:
    assert decode_group_value(encode_group_value(value)) == value


def test_offset_and_group_keys_of_one_group_differ() -> None:
    assert encode_key(GroupKey("g")) != encode_key(OffsetKey("g", "", 0))


@given(group_records, st.data())
def test_truncated_records_are_refused_not_guessed(value: GroupRecord, data: st.DataObject) -> None:
    raw = encode_group_value(value)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(CorruptRecordError):
        decode_group_value(raw[:cut])


def test_unknown_versions_and_trailing_bytes_are_refused() -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x07")
    with pytest.raises(CorruptRecordError):
        decode_key(encode_key(GroupKey("g")) + b"\x00")
    with pytest.raises(CorruptRecordError):
        decode_offset_value(b"\x00\x09" + encode_offset_value(CommittedOffset(1, 1, "", 1))[2:])
