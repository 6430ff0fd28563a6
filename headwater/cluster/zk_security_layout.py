"""Kafka's ZooKeeper layout of security metadata: pure encoding, bytes in, values out.

Kafka (ZooKeeper mode) keeps, and so does Headwater:

* entity configs: ``/config/users/<user>``, ``/config/clients/<client id>`` and
  ``/config/users/<user>/clients/<client id>``, each ``{"version":1,"config":{..}}``.
  A user's znode holds both its SCRAM credentials (key = mechanism name, value
  ``salt=..,stored_key=..,server_key=..,iterations=..``) and its quotas
  (``producer_byte_rate`` ...). Names are URL-encoded (Kafka's ``Sanitizer``);
  ``<default>`` is the default entity.
* entity change notifications: ``/config/changes/config_change_<seq>``,
  ``{"version":2,"entity_path":"users/alice"}``.
* ACLs: ``/kafka-acl/<Type>/<name>`` for LITERAL patterns and
  ``/kafka-acl-extended/prefixed/<Type>/<name>`` for PREFIXED ones, each
  ``{"version":1,"acls":[{"principal":..,"permissionType":"Allow",
  "operation":"Read","host":"*"}]}``; changes are announced under
  ``/kafka-acl-changes/acl_changes_<seq>`` (``Topic:name``) and
  ``/kafka-acl-extended-changes/acl_changes_<seq>`` (JSON).

So ``zkCli`` and Kafka's own tooling read a Headwater cluster's security
metadata as they would Kafka's.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import Any

from headwater.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from headwater.security.scram import ScramCredential

CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DEFAULT_ENTITY = "<default>"

ACL_LITERAL = "/kafka-acl"
ACL_PREFIXED = "/kafka-acl-extended/prefixed"
ACL_LITERAL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"

PERSISTENT_PATHS = (
    CONFIG_USERS,
    CONFIG_CLIENTS,
    CONFIG_CHANGES,
    ACL_LITERAL,
    ACL_PREFIXED,
    ACL_LITERAL_CHANGES,
    ACL_EXTENDED_CHANGES,
)

#: Kafka's ``SecurityUtils.resourceTypeName`` spellings (path segments).
_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
_TYPES_BY_NAME = {v.lower(): k for k, v in _TYPE_NAMES.items()}
ACL_RESOURCE_TYPES = tuple(_TYPE_NAMES.values())


class ZkSecurityLayoutError(ValueError):
    """A security znode's content is malformed."""


def _load(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZkSecurityLayoutError(f"{what}: not JSON: {exc}") from None


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _camel(name: str) -> str:
    """READ -> Read, CLUSTER_ACTION -> ClusterAction (Kafka's operation names)."""
    return "".join(part.capitalize() for part in name.split("_"))


def _from_camel(text: str) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.upper())
    return "".join(out)


# --- entity configs ------------------------------------------------------------------


def sanitize(name: str | None) -> str:
    """Kafka's ``Sanitizer.sanitize`` (URL encoding, ``*`` as %2A); None is <default>."""
    if name is None:
        return DEFAULT_ENTITY
    return urllib.parse.quote(name, safe="-_.").replace("~", "%7E")


def desanitize(segment: str) -> str | None:
    if segment == DEFAULT_ENTITY:
        return None
    return urllib.parse.unquote(segment)


def entity_path(user: str | bool | None = False, client_id: str | bool | None = False) -> str:
    """``users/alice``, ``clients/c1``, ``users/alice/clients/c1``; None is <default>,
    False leaves the part out."""
    parts = []
    if user is not False:
        parts.append(f"users/{sanitize(None if user is True else user)}")  # type: ignore[arg-type]
    if client_id is not False:
        name = None if client_id is True else client_id
        parts.append(f"clients/{sanitize(name)}")  # type: ignore[arg-type]
    if not parts:
        raise ValueError("an entity names a user and/or a client id")
    return "/".join(parts)


def parse_entity_path(path: str) -> tuple[str | bool | None, str | bool | None]:
    """(user, client id) of an entity path: a name, None for <default>, False if absent."""
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] in ("users", "clients"):
        name = desanitize(parts[1])
        return (name, False) if parts[0] == "users" else (False, name)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return desanitize(parts[1]), desanitize(parts[3])
    raise ZkSecurityLayoutError(f"not an entity path: {path!r}")


def entity_znode(path: str) -> str:
    return f"/config/{path}"


def encode_entity_config(config: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(sorted(config.items()))})


def decode_entity_config(data: bytes) -> dict[str, str]:
    if not data:
        return {}  # a parent znode (``/config/users/<u>`` holding only ``clients``)
    value = _load(data, "entity config")
    try:
        return {str(k): str(v) for k, v in value["config"].items()}
    except (KeyError, AttributeError, TypeError) as exc:
        raise ZkSecurityLayoutError(f"entity config: {exc!r}") from None


def encode_config_change(path: str) -> bytes:
    return _dump({"version": 2, "entity_path": path})


def decode_config_change(data: bytes) -> str:
    value = _load(data, "config change")
    try:
        if int(value["version"]) == 2:
            return str(value["entity_path"])
        # version 1: {"entity_type": "users", "entity_name": "alice"}
        return f"{value['entity_type']}/{value['entity_name']}"
    except (KeyError, ValueError, TypeError) as exc:
        raise ZkSecurityLayoutError(f"config change: {exc!r}") from None


def sequence_number(child: str) -> int:
    """The 10-digit suffix ZooKeeper gives a sequential znode."""
    digits = child[-10:]
    if not digits.isdigit():
        raise ZkSecurityLayoutError(f"not a sequential znode: {child!r}")
    return int(digits)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_scram(credential: ScramCredential) -> str:
    """Kafka's ``ScramCredentialUtils.credentialToString``."""
    return (
        f"salt={_b64(credential.salt)},stored_key={_b64(credential.stored_key)},"
        f"server_key={_b64(credential.server_key)},iterations={credential.iterations}"
    )


def decode_scram(text: str) -> ScramCredential:
    try:
        fields = dict(item.split("=", 1) for item in text.split(","))
        return ScramCredential(
            salt=base64.b64decode(fields["salt"], validate=True),
            stored_key=base64.b64decode(fields["stored_key"], validate=True),
            server_key=base64.b64decode(fields["server_key"], validate=True),
            iterations=int(fields["iterations"]),
        )
    except (KeyError, ValueError) as exc:
        raise ZkSecurityLayoutError(f"SCRAM credential: {exc!r}") from None


# --- ACLs ----------------------------------------------------------------------------


def acl_znode(pattern: ResourcePattern) -> str:
    if pattern.pattern_type is PatternType.LITERAL:
        root = ACL_LITERAL
    elif pattern.pattern_type is PatternType.PREFIXED:
        root = ACL_PREFIXED
    else:
        raise ValueError(f"ACLs are stored for LITERAL or PREFIXED patterns, not {pattern}")
    return f"{root}/{_TYPE_NAMES[pattern.resource_type]}/{pattern.name}"


def resource_type_of(segment: str) -> ResourceType:
    try:
        return _TYPES_BY_NAME[segment.lower()]
    except KeyError:
        raise ZkSecurityLayoutError(f"unknown ACL resource type {segment!r}") from None


def encode_acls(entries: list[AccessControlEntry]) -> bytes:
    return _dump(
        {
            "version": 1,
            "acls": [
                {
                    "principal": e.principal,
                    "permissionType": _camel(e.permission.name),
                    "operation": _camel(e.operation.name),
                    "host": e.host,
                }
                for e in sorted(
                    entries, key=lambda e: (e.principal, e.host, e.operation, e.permission)
                )
            ],
        }
    )


def decode_acls(data: bytes) -> list[AccessControlEntry]:
    if not data:
        return []
    value = _load(data, "ACLs")
    try:
        return [
            AccessControlEntry(
                str(a["principal"]),
                str(a["host"]),
                AclOperation[_from_camel(str(a["operation"]))],
                AclPermissionType[_from_camel(str(a["permissionType"]))],
            )
            for a in value["acls"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkSecurityLayoutError(f"ACLs: {exc!r}") from None


def encode_acl_change(pattern: ResourcePattern) -> tuple[bool, bytes]:
    """(extended?, data) announcing a change of ``pattern``'s ACLs: LITERAL ones go
    to ``/kafka-acl-changes`` as ``Type:name``, the others to the extended path."""
    if pattern.pattern_type is PatternType.LITERAL:
        return False, f"{_TYPE_NAMES[pattern.resource_type]}:{pattern.name}".encode()
    return True, _dump(
        {
            "version": 1,
            "resourceType": pattern.resource_type.name,
            "name": pattern.name,
            "patternType": pattern.pattern_type.name,
        }
    )


def decode_acl_change(extended: bool, data: bytes) -> ResourcePattern:
    if not extended:
        kind, sep, name = data.decode("utf-8", "replace").partition(":")
        if not sep:
            raise ZkSecurityLayoutError(f"ACL change {data!r} is not ResourceType:name")
        return ResourcePattern(resource_type_of(kind), name, PatternType.LITERAL)
    value = _load(data, "ACL change")
    try:
        return ResourcePattern(
            ResourceType[str(value["resourceType"]).upper()],
            str(value["name"]),
            PatternType[str(value["patternType"]).upper()],
        )
    except (KeyError, TypeError) as exc:
        raise ZkSecurityLayoutError(f"ACL change: {exc!r}") from None
