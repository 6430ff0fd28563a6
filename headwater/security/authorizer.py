"""Authorization: one interface, an allow-all default and Kafka's ACL authorizer.

Handlers make one call per check point, ``authorizer.authorize(principal,
host, operation, resource_type, name)``; with ACLs off that call is the
allow-all ``AllowAllAuthorizer`` and costs a method call.

``AclAuthorizer`` decides as Kafka's ``AclAuthorizer`` does:

1. a super user is allowed everything;
2. the ACLs that apply to the resource are the LITERAL ones on its name, the
   LITERAL wildcard ``*`` and every PREFIXED one that is a prefix of its name;
3. none at all: ``allow.everyone.if.no.acl.found`` decides;
4. a matching DENY (same operation or ALL) wins;
5. else a matching ALLOW is needed; ALLOW of READ, WRITE, DELETE or ALTER
   implies DESCRIBE, and ALTER_CONFIGS implies DESCRIBE_CONFIGS.

"Matching" means the entry's principal is the caller's or ``User:*`` and its
host is the caller's or ``*``. The index is keyed by (type, name), and
prefixed entries are found by looking up only the prefix lengths that exist,
so a check costs a few dict lookups however many ACLs there are.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Protocol

from headwater.security.acl import (
    IMPLIED_BY,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from headwater.security.acl_store import AclStore
from headwater.security.principal import KafkaPrincipal

audit = logging.getLogger("headwater.security.audit")
_AUDIT_LINE = "Principal = %s is Allowed Operation = %s from host = %s on resource = %s:%s (%s)"

#: ``authorizer.class.name`` values that switch ACLs on (Kafka's and ours).
KNOWN_AUTHORIZERS = frozenset(
    {
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "headwater.security.authorizer.AclAuthorizer",
    }
)


class Authorizer(Protocol):
    """What handlers call. ``enabled`` is False only for the allow-all default."""

    @property
    def enabled(self) -> bool: ...

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool: ...

    def authorize_any(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """Kafka's ``authorizeByResourceType``: allowed on some resource of the type."""
        ...


class AllowAllAuthorizer:
    """No ``authorizer.class.name``: everyone may do everything (Kafka's default)."""

    enabled = False

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        return True

    def authorize_any(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        return True


class AclAuthorizer:
    """Kafka's ACL semantics over an in-memory index persisted by an ``AclStore``."""

    enabled = True

    def __init__(
        self,
        store: AclStore,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._bindings: list[AclBinding] = []
        self._literal: dict[tuple[ResourceType, str], list[AccessControlEntry]] = {}
        self._prefixed: dict[tuple[ResourceType, str], list[AccessControlEntry]] = {}
        self._prefix_lengths: dict[ResourceType, list[int]] = {}
        self._reindex(store.load())

    def reload(self) -> None:
        """Rebuild the index from the store (another broker changed the ACLs)."""
        self._reindex(self.store.load())

    # -- the decision --------------------------------------------------------------

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        who = str(principal)
        if who in self.super_users:
            self._log(True, who, host, operation, resource_type, name, "super user")
            return True
        entries = self.matching_entries(resource_type, name)
        if not entries:
            allowed = self.allow_everyone_if_no_acl_found
            self._log(allowed, who, host, operation, resource_type, name, "no ACLs")
            return allowed
        allow_ops = IMPLIED_BY.get(operation, frozenset((operation,)))
        allowed = False
        for e in entries:
            if e.principal != who and e.principal != WILDCARD_PRINCIPAL:
                continue
            if e.host != host and e.host != WILDCARD_HOST:
                continue
            if e.permission is AclPermissionType.DENY:
                if e.operation is operation or e.operation is AclOperation.ALL:
                    self._log(False, who, host, operation, resource_type, name, f"DENY {e}")
                    return False
            elif e.operation is AclOperation.ALL or e.operation in allow_ops:
                allowed = True
        self._log(allowed, who, host, operation, resource_type, name, "ACLs")
        return allowed

    def authorize_any(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """Some resource of the type allows it: an ALLOW no DENY pattern covers.

        Used where Kafka asks "may this principal WRITE to any topic?"
        (idempotent producers, KIP-679). Walks the bindings of the type;
        this is rare (once per InitProducerId), so no index.
        """
        who = str(principal)
        if who in self.super_users:
            return True
        bindings = [b for b in self._bindings if b.pattern.resource_type is resource_type]
        if not bindings:
            return self.allow_everyone_if_no_acl_found
        allow_ops = IMPLIED_BY.get(operation, frozenset((operation,)))
        denied_literal: set[str] = set()
        denied_prefixes: list[str] = []
        allowed: list[tuple[str, PatternType]] = []
        for b in bindings:
            e = b.entry
            if e.principal not in (who, WILDCARD_PRINCIPAL) or e.host not in (host, WILDCARD_HOST):
                continue
            if e.permission is AclPermissionType.DENY:
                if e.operation is operation or e.operation is AclOperation.ALL:
                    if b.pattern.pattern_type is PatternType.PREFIXED:
                        denied_prefixes.append(b.pattern.name)
                    else:
                        denied_literal.add(b.pattern.name)
            elif e.operation is AclOperation.ALL or e.operation in allow_ops:
                allowed.append((b.pattern.name, b.pattern.pattern_type))
        if WILDCARD_RESOURCE in denied_literal:
            return False
        for name, kind in allowed:
            if any(name.startswith(p) for p in denied_prefixes):
                continue
            if kind is PatternType.LITERAL and name in denied_literal:
                continue
            return True
        return False

    def matching_entries(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        out: list[AccessControlEntry] = []
        literal = self._literal
        found = literal.get((resource_type, name))
        if found:
            out.extend(found)
        if name != WILDCARD_RESOURCE:
            found = literal.get((resource_type, WILDCARD_RESOURCE))
            if found:
                out.extend(found)
        prefixed = self._prefixed
        for n in self._prefix_lengths.get(resource_type, ()):
            if n > len(name):
                break
            found = prefixed.get((resource_type, name[:n]))
            if found:
                out.extend(found)
        return out

    @staticmethod
    def _log(
        allowed: bool,
        who: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        why: str,
    ) -> None:
        if allowed:
            if audit.isEnabledFor(logging.DEBUG):
                audit.debug(
                    _AUDIT_LINE,
                    who,
                    operation.name,
                    host,
                    resource_type.name,
                    name,
                    why,
                )
        else:
            audit.info(
                _AUDIT_LINE.replace("Allowed", "Denied"),
                who,
                operation.name,
                host,
                resource_type.name,
                name,
                why,
            )

    # -- ACL administration (CreateAcls, DescribeAcls, DeleteAcls) --------------------

    def acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        if acl_filter is None:
            return list(self._bindings)
        return [b for b in self._bindings if acl_filter.matches(b)]

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Adds what is new (adding an existing ACL is not an error, as in Kafka)."""
        self.reload()  # a shared store may have changed since the index was built
        known = set(self._bindings)
        new: list[AclBinding] = []
        for b in bindings:
            if b not in known:
                known.add(b)
                new.append(b)
        if new:
            updated = [*self._bindings, *new]
            self.store.save(updated)
            self._reindex(updated)

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """For each filter, the bindings it removed (a binding goes to the first match)."""
        self.reload()
        removed: list[list[AclBinding]] = [[] for _ in filters]
        keep: list[AclBinding] = []
        for b in self._bindings:
            for i, f in enumerate(filters):
                if f.matches(b):
                    removed[i].append(b)
                    break
            else:
                keep.append(b)
        if len(keep) != len(self._bindings):
            self.store.save(keep)
            self._reindex(keep)
        return removed

    def _reindex(self, bindings: list[AclBinding]) -> None:
        literal: dict[tuple[ResourceType, str], list[AccessControlEntry]] = defaultdict(list)
        prefixed: dict[tuple[ResourceType, str], list[AccessControlEntry]] = defaultdict(list)
        lengths: dict[ResourceType, set[int]] = defaultdict(set)
        for b in bindings:
            key = (b.pattern.resource_type, b.pattern.name)
            if b.pattern.pattern_type is PatternType.PREFIXED:
                prefixed[key].append(b.entry)
                lengths[b.pattern.resource_type].add(len(b.pattern.name))
            else:
                literal[key].append(b.entry)
        self._bindings = list(bindings)
        self._literal = dict(literal)
        self._prefixed = dict(prefixed)
        self._prefix_lengths = {t: sorted(ls) for t, ls in lengths.items()}


def parse_super_users(value: str | None) -> list[str]:
    """``super.users=User:alice;User:bob`` (semicolons, as Kafka)."""
    if not value:
        return []
    out = []
    for item in value.split(";"):
        item = item.strip()
        if item:
            KafkaPrincipal.parse(item)
            out.append(item)
    return out
