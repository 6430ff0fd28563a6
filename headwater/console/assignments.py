"""A consumer group member's assignment, read from DescribeGroups' bytes.

The bytes are the "consumer" protocol's ConsumerProtocolAssignment: an
int16 version, then the body, which kio's generated schemas read. The
broker's group coordinator has the same decoder, but the console keeps to
the client side of the house (it must work against any Kafka-compatible
cluster), so it reads the bytes itself through kio, as any client would.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.schema.consumer_protocol_assignment import v0, v1, v2, v3
from kio.serial import entity_reader

_READERS: list[Any] = [
    entity_reader(v0.ConsumerProtocolAssignment),
    entity_reader(v1.ConsumerProtocolAssignment),
    entity_reader(v2.ConsumerProtocolAssignment),
    entity_reader(v3.ConsumerProtocolAssignment),
]


def decode_assignment(data: bytes) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(topic, partitions) pairs; empty or undecodable bytes read as no assignment."""
    if len(data) < 2:
        return ()
    (version,) = struct.unpack_from(">h", data)
    if version < 0:
        return ()
    reader = _READERS[min(version, len(_READERS) - 1)]
    try:
        entity, _ = reader(data, 2)
    except Exception:  # kio raises assorted errors on malformed input
        return ()
    return tuple(
        (str(tp.topic), tuple(int(p) for p in tp.partitions)) for tp in entity.assigned_partitions
    )
