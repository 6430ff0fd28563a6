"""A consumer group member's assignment, read from DescribeGroups' bytes.

The bytes are the "consumer" protocol's ConsumerProtocolAssignment, read with
the house's one codec (``headwater.protocol.consumer_protocol``); the console
keeps to the client side of the house otherwise (it must work against any
Kafka-compatible cluster).
"""

from __future__ import annotations

from headwater.protocol.consumer_protocol import ConsumerProtocolError
from headwater.protocol.consumer_protocol import decode_assignment as decode


def decode_assignment(data: bytes) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(topic, partitions) pairs; empty or undecodable bytes read as no assignment."""
    try:
        return decode(data).partitions
    except ConsumerProtocolError:
        return ()
