"""Durable ACL storage behind a small interface.

The authorizer keeps its own in-memory index; the store only persists the
set of bindings. ``FileAclStore`` writes one JSON file in the data
directory; in a cluster ACLs must live in ZooKeeper (Kafka's
``/kafka-acl/<type>/<name>``) behind this same interface, with a watch that
reloads the index on change.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from headwater.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from headwater.security.durable_json import read_json, write_json

FILE_NAME = "acls.json"
_VERSION = 1


class AclStore(Protocol):
    def load(self) -> list[AclBinding]: ...

    def save(self, bindings: Iterable[AclBinding]) -> None: ...


class InMemoryAclStore:
    def __init__(self) -> None:
        self.bindings: list[AclBinding] = []

    def load(self) -> list[AclBinding]:
        return list(self.bindings)

    def save(self, bindings: Iterable[AclBinding]) -> None:
        self.bindings = list(bindings)


class FileAclStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def in_dir(cls, data_dir: Path) -> FileAclStore:
        return cls(data_dir / FILE_NAME)

    def load(self) -> list[AclBinding]:
        doc = read_json(self.path, {"version": _VERSION, "acls": []})
        if doc.get("version") != _VERSION:
            raise ValueError(f"{self.path}: unknown ACL file version {doc.get('version')}")
        return [
            AclBinding(
                ResourcePattern(
                    ResourceType[a["resource_type"]], a["name"], PatternType[a["pattern_type"]]
                ),
                AccessControlEntry(
                    a["principal"],
                    a["host"],
                    AclOperation[a["operation"]],
                    AclPermissionType[a["permission"]],
                ),
            )
            for a in doc["acls"]
        ]

    def save(self, bindings: Iterable[AclBinding]) -> None:
        acls = [
            {
                "resource_type": b.pattern.resource_type.name,
                "name": b.pattern.name,
                "pattern_type": b.pattern.pattern_type.name,
                "principal": b.entry.principal,
                "host": b.entry.host,
                "operation": b.entry.operation.name,
                "permission": b.entry.permission.name,
            }
            for b in bindings
        ]
        write_json(self.path, {"version": _VERSION, "acls": acls})
