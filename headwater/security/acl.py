"""Kafka's ACL model: resource patterns, access control entries and filters.

Enum values are Kafka's wire codes (CreateAcls/DescribeAcls/DeleteAcls carry
them as int8), so a value read off the wire converts with ``Enum(code)``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


CLUSTER_NAME = "kafka-cluster"

#: Kafka's AclAuthorizer: an ALLOW of any of these also allows DESCRIBE
#: (and of ALTER_CONFIGS, DESCRIBE_CONFIGS). DENY implies nothing.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(
                f"a resource pattern needs a concrete type, got {self.resource_type.name}"
            )
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(
                f"a stored pattern is LITERAL or PREFIXED, got {self.pattern_type.name}"
            )
        if not self.name:
            raise ValueError("resource name must not be empty")
        if self.pattern_type is PatternType.PREFIXED and self.name == WILDCARD_RESOURCE:
            raise ValueError("a PREFIXED pattern cannot be the wildcard '*'")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __post_init__(self) -> None:
        if ":" not in self.principal:
            raise ValueError(f"principal must be TYPE:NAME, got {self.principal!r}")
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"an ACL needs a concrete operation, got {self.operation.name}")
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise ValueError(f"permission must be ALLOW or DENY, got {self.permission.name}")
        if not self.host:
            raise ValueError("host must not be empty (use '*')")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        p, e = self.pattern, self.entry
        return (
            f"{e.permission.name} {e.principal} {e.operation.name} from {e.host} "
            f"on {p.resource_type.name}:{p.pattern_type.name}:{p.name}"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls/DeleteAcls filters: None means "any" for the nullable fields."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        if self.resource_type is not ResourceType.ANY and p.resource_type is not self.resource_type:
            return False
        if not self._pattern_matches(p):
            return False
        if self.principal is not None and e.principal != self.principal:
            return False
        if self.host is not None and e.host != self.host:
            return False
        if self.operation is not AclOperation.ANY and e.operation is not self.operation:
            return False
        return self.permission is AclPermissionType.ANY or e.permission is self.permission

    def _pattern_matches(self, p: ResourcePattern) -> bool:
        kind = self.pattern_type
        if kind is PatternType.MATCH:
            # Every stored pattern that would apply to a resource of this name.
            if self.name is None:
                return True
            if p.pattern_type is PatternType.LITERAL:
                return p.name in (self.name, WILDCARD_RESOURCE)
            return self.name.startswith(p.name)
        if kind is not PatternType.ANY and p.pattern_type is not kind:
            return False
        return self.name is None or p.name == self.name

    def validate(self) -> None:
        """Kafka refuses filters containing UNKNOWN values."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value.name == "UNKNOWN":
                raise ValueError(f"filter contains UNKNOWN {type(value).__name__}")
