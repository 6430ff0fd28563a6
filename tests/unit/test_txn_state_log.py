"""``__transaction_state`` records: Kafka's TransactionLogKey/Value layouts.

kio has no schema for these internal records, so the expected bytes are built
here field by field from Kafka's JSON schemas, independently of the codec."""

from __future__ import annotations

import struct

import pytest

from headwater.txn.metadata import TxnState, TxnTransit
from headwater.txn.state_log import (
    CorruptTxnRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def transit(
    state: TxnState, partitions: frozenset[tuple[str, int]], previous: int = -1
) -> TxnTransit:
    return TxnTransit(
        producer_id=4242,
        previous_producer_id=previous,
        producer_epoch=3,
        last_producer_epoch=-1,
        timeout_ms=60_000,
        state=state,
        partitions=partitions,
        start_ms=1_700_000_000_000,
        update_ms=1_700_000_000_500,
    )


def test_key_layout() -> None:
    assert encode_key("tx-1") == struct.pack(">hh", 0, 4) + b"tx-1"
    assert decode_key(encode_key("tx-é")) == "tx-é"


def test_value_v0_layout_matches_kafka() -> None:
    value = encode_value(transit(TxnState.ONGOING, frozenset({("a", 1), ("a", 0)})), version=0)
    expected = (
        struct.pack(">hqhib", 0, 4242, 3, 60_000, 1)
        + struct.pack(">i", 1)  # one topic
        + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000)
    )  # fmt: skip
    assert value == expected


def test_value_v1_layout_matches_kafka() -> None:
    value = encode_value(transit(TxnState.PREPARE_COMMIT, frozenset({("b", 7)}), previous=9))
    expected = (
        struct.pack(">hqhib", 1, 4242, 3, 60_000, 2)
        + bytes([2])  # compact array: 1 topic
        + bytes([2]) + b"b" + bytes([2]) + struct.pack(">i", 7) + bytes([0])
        + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000)
        + bytes([1, 0, 8]) + struct.pack(">q", 9)  # tag 0: PreviousProducerId
    )  # fmt: skip
    assert value == expected


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize(
    "state", [s for s in TxnState if s not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE)]
)
def test_round_trip(version: int, state: TxnState) -> None:
    parts = frozenset() if state is TxnState.EMPTY else frozenset({("x", 0), ("y", 3), ("x", 2)})
    original = transit(state, parts, previous=77 if version == 1 else -1)
    raw = encode_value(original, version)
    assert raw is not None
    assert decode_value(raw) == original


def test_empty_is_written_with_a_null_partition_array() -> None:
    raw = encode_value(transit(TxnState.EMPTY, frozenset()), version=0)
    assert raw is not None
    assert raw[17:21] == struct.pack(">i", -1)  # after version, id, epoch, timeout, status


def test_dead_is_a_tombstone_and_epoch_fence_is_never_written() -> None:
    assert encode_value(transit(TxnState.DEAD, frozenset())) is None
    with pytest.raises(ValueError):
        encode_value(transit(TxnState.PREPARE_EPOCH_FENCE, frozenset()))


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x00\x05", struct.pack(">hqhib", 0, 1, 0, 1, 42), struct.pack(">hqhib", 0, 1, 0, 1, 1)],
)
def test_corrupt_values_are_refused(raw: bytes) -> None:
    with pytest.raises(CorruptTxnRecord):
        decode_value(raw)


def test_trailing_bytes_are_refused() -> None:
    raw = encode_value(transit(TxnState.ONGOING, frozenset({("a", 0)})))
    assert raw is not None
    with pytest.raises(CorruptTxnRecord):
        decode_value(raw + b"\x00")
    with pytest.raises(CorruptTxnRecord):
        decode_key(encode_key("t") + b"x")
