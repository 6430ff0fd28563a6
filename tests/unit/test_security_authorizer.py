"""Kafka's ACL semantics in AclAuthorizer, without a broker."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from headwater.security.acl_store import FileAclStore, InMemoryAclStore
from headwater.security.authorizer import AclAuthorizer, AllowAllAuthorizer, parse_super_users
from headwater.security.principal import KafkaPrincipal, user

ALICE, BOB = user("alice"), user("bob")
Op, Perm, RT, PT = AclOperation, AclPermissionType, ResourceType, PatternType


def acl(
    principal: str,
    op: AclOperation,
    name: str = "orders",
    *,
    rt: ResourceType = RT.TOPIC,
    pattern: PatternType = PT.LITERAL,
    perm: AclPermissionType = Perm.ALLOW,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rt, name, pattern), AccessControlEntry(principal, host, op, perm)
    )


def authorizer(*bindings: AclBinding, **kw: object) -> AclAuthorizer:
    a = AclAuthorizer(InMemoryAclStore(), **kw)  # type: ignore[arg-type]
    a.create_acls(list(bindings))
    return a


def can(a: AclAuthorizer, who: KafkaPrincipal, op: AclOperation, name: str = "orders",
        rt: ResourceType = RT.TOPIC, host: str = "10.0.0.1") -> bool:  # fmt: skip
    return a.authorize(who, host, op, rt, name)


def test_no_acls_denies_unless_allow_everyone() -> None:
    assert not can(authorizer(), ALICE, Op.READ)
    assert can(authorizer(allow_everyone_if_no_acl_found=True), ALICE, Op.READ)
    # An ACL for someone else on the resource means "ACLs found": denied.
    a = authorizer(acl("User:bob", Op.READ), allow_everyone_if_no_acl_found=True)
    assert not can(a, ALICE, Op.READ) and can(a, BOB, Op.READ)


def test_deny_wins_over_allow() -> None:
    a = authorizer(acl("User:alice", Op.ALL), acl("User:alice", Op.WRITE, perm=Perm.DENY))
    assert can(a, ALICE, Op.READ) and not can(a, ALICE, Op.WRITE)


def test_wildcard_principal_deny_applies_to_everyone() -> None:
    a = authorizer(acl("User:alice", Op.READ), acl("User:*", Op.READ, perm=Perm.DENY))
    assert not can(a, ALICE, Op.READ)


def test_read_write_delete_alter_imply_describe_but_deny_does_not() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert can(authorizer(acl("User:alice", op)), ALICE, Op.DESCRIBE)
    assert not can(authorizer(acl("User:alice", Op.CREATE)), ALICE, Op.DESCRIBE)
    assert can(authorizer(acl("User:alice", Op.ALTER_CONFIGS)), ALICE, Op.DESCRIBE_CONFIGS)
    a = authorizer(acl("User:alice", Op.DESCRIBE), acl("User:alice", Op.READ, perm=Perm.DENY))
    assert can(a, ALICE, Op.DESCRIBE) and not can(a, ALICE, Op.READ)


def test_prefixed_and_wildcard_resources() -> None:
    a = authorizer(
        acl("User:alice", Op.READ, "sales-", pattern=PT.PREFIXED),
        acl("User:bob", Op.WRITE, "*"),
    )
    assert can(a, ALICE, Op.READ, "sales-eu") and can(a, ALICE, Op.READ, "sales-")
    assert not can(a, ALICE, Op.READ, "sale") and not can(a, ALICE, Op.READ, "xsales-eu")
    assert can(a, BOB, Op.WRITE, "anything") and not can(a, BOB, Op.WRITE, "g", rt=RT.GROUP)


def test_host_matching() -> None:
    a = authorizer(acl("User:alice", Op.READ, host="10.0.0.1"))
    assert can(a, ALICE, Op.READ, host="10.0.0.1") and not can(a, ALICE, Op.READ, host="10.0.0.2")


def test_super_users_skip_acls() -> None:
    a = authorizer(acl("User:*", Op.ALL, perm=Perm.DENY), super_users=["User:admin"])
    assert can(a, user("admin"), Op.WRITE) and not can(a, ALICE, Op.WRITE)
    assert parse_super_users("User:a; User:b;") == ["User:a", "User:b"]
    with pytest.raises(ValueError):
        parse_super_users("alice")


def test_resource_types_are_separate() -> None:
    a = authorizer(acl("User:alice", Op.READ, "x", rt=RT.GROUP))
    assert can(a, ALICE, Op.READ, "x", rt=RT.GROUP) and not can(a, ALICE, Op.READ, "x")


def test_filters_match_describe_and_delete() -> None:
    lit = acl("User:alice", Op.READ, "sales-eu")
    pre = acl("User:alice", Op.READ, "sales-", pattern=PT.PREFIXED)
    star = acl("User:bob", Op.WRITE, "*")
    other = acl("User:bob", Op.READ, "g", rt=RT.GROUP)
    a = authorizer(lit, pre, star, other)
    match = AclBindingFilter(RT.TOPIC, "sales-eu", PT.MATCH)
    assert set(a.acls(match)) == {lit, pre, star}
    assert a.acls(AclBindingFilter(RT.TOPIC, "sales-eu", PT.LITERAL)) == [lit]
    assert set(a.acls(AclBindingFilter(principal="User:bob"))) == {star, other}
    removed = a.delete_acls([AclBindingFilter(pattern_type=PT.PREFIXED), AclBindingFilter()])
    assert removed == [[pre], [lit, star, other]]
    assert a.acls() == [] and not can(a, ALICE, Op.READ, "sales-eu")


def test_creating_an_existing_acl_is_a_no_op() -> None:
    a = authorizer(acl("User:alice", Op.READ))
    a.create_acls([acl("User:alice", Op.READ), acl("User:alice", Op.READ)])
    assert len(a.acls()) == 1


def test_invalid_bindings_are_refused() -> None:
    with pytest.raises(ValueError):
        acl("alice", Op.READ)
    with pytest.raises(ValueError):
        acl("User:alice", Op.ANY)
    with pytest.raises(ValueError):
        acl("User:alice", Op.READ, "*", pattern=PT.PREFIXED)
    with pytest.raises(ValueError):
        acl("User:alice", Op.READ, pattern=PT.MATCH)


def test_acls_survive_a_restart(tmp_path: Path) -> None:
    store = FileAclStore.in_dir(tmp_path)
    a = AclAuthorizer(store)
    a.create_acls([acl("User:alice", Op.READ, "sales-", pattern=PT.PREFIXED)])
    again = AclAuthorizer(FileAclStore.in_dir(tmp_path))
    assert can(again, ALICE, Op.READ, "sales-1") and not can(again, BOB, Op.READ, "sales-1")


def test_denials_are_audited_at_info_and_allows_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    a = authorizer(acl("User:alice", Op.READ))
    with caplog.at_level(logging.DEBUG, logger="headwater.security.audit"):
        can(a, ALICE, Op.READ)
        can(a, BOB, Op.READ)
    levels = [(r.levelno, "Allowed" in r.getMessage()) for r in caplog.records]
    assert levels == [(logging.DEBUG, True), (logging.INFO, False)]


def test_allow_all_is_off_and_allows() -> None:
    a = AllowAllAuthorizer()
    assert not a.enabled and a.authorize(ALICE, "h", Op.ALTER, RT.CLUSTER, "kafka-cluster")


# A brute-force reference of Kafka's rule, to check the index against.
def reference(bindings: list[AclBinding], who: str, host: str, op: AclOperation, name: str) -> bool:
    def applies(b: AclBinding) -> bool:
        p = b.pattern
        if p.resource_type is not RT.TOPIC:
            return False
        if p.pattern_type is PT.PREFIXED:
            return name.startswith(p.name)
        return p.name in (name, "*")

    acls = [b.entry for b in bindings if applies(b)]
    if not acls:
        return False
    mine = [e for e in acls if e.principal in (who, "User:*") and e.host in (host, "*")]
    if any(e.permission is Perm.DENY and e.operation in (op, Op.ALL) for e in mine):
        return False
    implied = {
        Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
        Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
    }.get(op, {op})
    return any(e.permission is Perm.ALLOW and (e.operation in implied or e.operation is Op.ALL)
               for e in mine)  # fmt: skip


_names = st.sampled_from(["a", "ab", "abc", "b", "*"])
_ops = st.sampled_from(
    [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]
)
_binding = st.builds(
    lambda who, op, name, prefixed, deny, host: acl(
        who, op, name,
        pattern=PT.PREFIXED if prefixed and name != "*" else PT.LITERAL,
        perm=Perm.DENY if deny else Perm.ALLOW, host=host,
    ),
    st.sampled_from(["User:alice", "User:bob", "User:*"]), _ops, _names,
    st.booleans(), st.booleans(), st.sampled_from(["*", "h1"]),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_binding, max_size=8),
    st.sampled_from(["User:alice", "User:bob"]),
    st.sampled_from(["h1", "h2"]),
    _ops.filter(lambda o: o is not Op.ALL),
    st.sampled_from(["a", "ab", "abc", "b", "c"]),
)
def test_index_agrees_with_brute_force(
    bindings: list[AclBinding], who: str, host: str, op: AclOperation, name: str
) -> None:
    a = authorizer(*bindings)
    got = a.authorize(KafkaPrincipal.parse(who), host, op, RT.TOPIC, name)
    assert got == reference(bindings, who, host, op, name)
