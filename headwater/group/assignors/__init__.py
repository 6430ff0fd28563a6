"""Server-side partition assignors for KIP-848 consumer groups.

The coordinator computes a group's target assignment itself (Kafka's
``group.consumer.assignors``); a member picks one by name with
``group.remote.assignor``. An assignor is pure logic: members and topics in,
a target assignment out, no sockets and no clock, so every rule is testable by
calling it.

spec.py      MemberSpec, TopicSpec, Assignment and the ServerAssignor protocol
uniform.py   UniformAssignor: balanced, sticky, rack-aware (the default)
range.py     RangeAssignor: co-partitioned ranges per sorted member id
"""

from __future__ import annotations

from headwater.group.assignors.range import RangeAssignor
from headwater.group.assignors.spec import Assignment, MemberSpec, ServerAssignor, TopicSpec
from headwater.group.assignors.uniform import UniformAssignor

ASSIGNORS: dict[str, ServerAssignor] = {
    UniformAssignor.name: UniformAssignor(),
    RangeAssignor.name: RangeAssignor(),
}
DEFAULT_ASSIGNOR = UniformAssignor.name

__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNOR",
    "Assignment",
    "MemberSpec",
    "RangeAssignor",
    "ServerAssignor",
    "TopicSpec",
    "UniformAssignor",
]
