"""The house's one ConsumerProtocol codec (headwater.protocol.consumer_protocol): what
the client writes, the coordinator and the console read, at every version kio has."""

from __future__ import annotations

import pytest

from headwater.protocol.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscriptions_round_trip_at_every_version(version: int) -> None:
    data = encode_subscription(["b", "a", "b"], version, [("a", [2, 1])], b"u")
    sub = decode_subscription(data)
    assert sub.version == version and sub.topics == ("a", "b") and sub.user_data == b"u"
    assert sub.owned_partitions == ((("a", (1, 2)),) if version >= 1 else ())


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignments_round_trip_at_every_version(version: int) -> None:
    data = encode_assignment([("t", [1, 0]), ("s", [3])], version)
    assignment = decode_assignment(data)
    assert assignment.version == version
    assert assignment.partitions == (("s", (3,)), ("t", (0, 1)))


def test_junk_is_an_error_and_no_bytes_no_assignment() -> None:
    assert decode_assignment(b"").partitions == ()
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(b"\x00")
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(b"\x00\x00\x7f\xff\xff\xff")
