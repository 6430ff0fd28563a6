"""``headwater acls add|list|remove``: ACLs through CreateAcls, DescribeAcls and DeleteAcls.

Options follow Kafka's ``kafka-acls.sh``: ``--allow-principal User:alice
--operation READ --topic orders``, ``--resource-pattern-type prefixed``,
``--group``, ``--cluster``, ``--transactional-id``, ``--allow-host``.
``acls add --zookeeper HOST:PORT/CHROOT`` writes a cluster's ACLs straight
into ZooKeeper (Kafka's ``kafka-acls --authorizer-properties
zookeeper.connect=...``): the first ACLs, before any principal may create them.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from headwater.cli.common import (
    add_bootstrap_arg,
    add_connection_args,
    admin_request,
    command_security,
    guarded,
    print_json,
)
from headwater.client.errors import KafkaError
from headwater.protocol.apis import ApiKey
from headwater.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

_OPERATION_NAMES = [
    op.name for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)
]


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic or ()]
    out += [(ResourceType.GROUP, g) for g in args.group or ()]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id or ()]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _principals(args: argparse.Namespace) -> list[tuple[str, AclPermissionType, list[str]]]:
    out = [(p, AclPermissionType.ALLOW, args.allow_host or ["*"]) for p in args.allow_principal]
    out += [(p, AclPermissionType.DENY, args.deny_host or ["*"]) for p in args.deny_principal]
    return out


def _operations(args: argparse.Namespace, default: AclOperation) -> list[AclOperation]:
    try:
        return [AclOperation[o.upper().replace("-", "_")] for o in args.operation] or [default]
    except KeyError as exc:
        raise SystemExit(f"error: unknown operation {exc.args[0]}") from None


def _pattern(args: argparse.Namespace, default: PatternType) -> PatternType:
    if args.resource_pattern_type is None:
        return default
    return PatternType[args.resource_pattern_type.upper()]


def _add_in_zookeeper(connect: str, creations: list[dict[str, Any]]) -> None:
    from headwater.cluster.store import ZkClusterStore
    from headwater.cluster.zk_security import ZkSecurityStores
    from headwater.security.acl import AccessControlEntry, AclBinding, ResourcePattern
    from headwater.security.authorizer import AclAuthorizer

    bindings = [
        AclBinding(
            ResourcePattern(
                ResourceType(c["resource_type"]),
                c["resource_name"],
                PatternType(c["resource_pattern_type"]),
            ),
            AccessControlEntry(
                c["principal"],
                c["host"],
                AclOperation(c["operation"]),
                AclPermissionType(c["permission_type"]),
            ),
        )
        for c in creations
    ]
    store = ZkClusterStore(connect)
    store.start(timeout=15)
    try:
        stores = ZkSecurityStores(store)
        stores.start()
        AclAuthorizer(stores.acls).create_acls(bindings)
        stores.stop()
    finally:
        store.close()


def cmd_add(args: argparse.Namespace) -> int:
    resources, principals = _resources(args), _principals(args)
    if not resources or not principals:
        raise SystemExit("error: add needs a resource and --allow-principal or --deny-principal")
    pattern = _pattern(args, PatternType.LITERAL)
    creations: list[dict[str, Any]] = [
        {
            "resource_type": int(rt),
            "resource_name": name,
            "resource_pattern_type": int(pattern),
            "principal": principal,
            "host": host,
            "operation": int(op),
            "permission_type": int(perm),
        }
        for rt, name in resources
        for principal, perm, hosts in principals
        for host in hosts
        for op in _operations(args, AclOperation.ALL)
    ]
    if args.zookeeper:
        _add_in_zookeeper(args.zookeeper, creations)
        for c in creations:
            print("added\t" + _describe_line(
                c["resource_type"], c["resource_name"], c["resource_pattern_type"],
                argparse.Namespace(**c),
            ))  # fmt: skip
        return 0
    resp = asyncio.run(
        admin_request(
            args.bootstrap, ApiKey.CREATE_ACLS, {"creations": creations}, command_security(args)
        )
    )
    for c, r in zip(creations, resp.results, strict=True):
        if int(r.error_code):
            acl = _describe_line(
                c["resource_type"], c["resource_name"], c["resource_pattern_type"],
                argparse.Namespace(**c),
            )  # fmt: skip
            acl = acl.replace("\t", " ")
            raise KafkaError(int(r.error_code), r.error_message or f"creating ACL {acl}")
    print(f"added {len(creations)} ACL(s)")
    return 0


def _filters(args: argparse.Namespace) -> list[dict[str, Any]]:
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args))
    if not resources:
        resources = [(ResourceType.ANY, None)]
    principals: list[tuple[str | None, AclPermissionType]] = [
        (p, perm) for p, perm, _ in _principals(args)
    ] or [(args.principal, AclPermissionType.ANY)]
    ops = _operations(args, AclOperation.ANY)
    pattern = _pattern(args, PatternType.ANY)
    return [
        {
            "resource_type_filter": int(rt),
            "resource_name_filter": name,
            "pattern_type_filter": int(pattern),
            "principal_filter": principal,
            "host_filter": None,
            "operation": int(op),
            "permission_type": int(perm),
        }
        for rt, name in resources
        for principal, perm in principals
        for op in ops
    ]


def _describe_line(rt: int, name: str, pattern: int, a: Any) -> str:
    binding = (
        f"{AclPermissionType(a.permission_type).name}\t{a.principal}\t"
        f"{AclOperation(a.operation).name}\thost={a.host}\t"
        f"{ResourceType(rt).name}:{PatternType(pattern).name}:{name}"
    )
    return binding


def cmd_list(args: argparse.Namespace) -> int:
    lines: set[str] = set()
    bindings: dict[tuple[Any, ...], dict[str, Any]] = {}
    for f in _filters(args):
        resp = asyncio.run(
            admin_request(args.bootstrap, ApiKey.DESCRIBE_ACLS, f, command_security(args))
        )
        if int(resp.error_code):
            raise KafkaError(int(resp.error_code), resp.error_message or "DescribeAcls")
        for res in resp.resources:
            for a in res.acls:
                lines.add(_describe_line(res.resource_type, res.resource_name, res.pattern_type, a))
                binding = {
                    "resource_type": ResourceType(res.resource_type).name,
                    "resource_name": res.resource_name,
                    "pattern_type": PatternType(res.pattern_type).name,
                    "principal": a.principal,
                    "host": a.host,
                    "operation": AclOperation(a.operation).name,
                    "permission_type": AclPermissionType(a.permission_type).name,
                }
                bindings[tuple(binding.values())] = binding
    if args.json:
        print_json([bindings[key] for key in sorted(bindings)])
        return 0
    for line in sorted(lines):
        print(line)
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    if not _resources(args) and not _principals(args) and not args.principal:
        raise SystemExit("error: remove needs a resource or a principal (refusing to remove all)")
    resp = asyncio.run(
        admin_request(
            args.bootstrap, ApiKey.DELETE_ACLS, {"filters": _filters(args)}, command_security(args)
        )
    )
    removed = 0
    for r in resp.filter_results:
        if int(r.error_code):
            raise KafkaError(int(r.error_code), r.error_message or "DeleteAcls")
        for m in r.matching_acls:
            removed += 1
            print("removed\t" + _describe_line(m.resource_type, m.resource_name, m.pattern_type, m))
    print(f"removed {removed} ACL(s)")
    return 0


def add_acl_commands(sub: Any) -> None:
    acls = sub.add_parser("acls", help="add, list or remove ACLs")
    asub = acls.add_subparsers(dest="acls_command", required=True)
    add = asub.add_parser("add", help="add ACLs (every principal x host x operation x resource)")
    lst = asub.add_parser("list", help="list ACLs matching the filters")
    lst.add_argument("--json", action="store_true", help="print JSON instead of lines")
    remove = asub.add_parser("remove", help="remove ACLs matching the filters")
    for p in (add, lst, remove):
        add_bootstrap_arg(p)
        p.add_argument("--topic", action="append", metavar="NAME", help="a topic (repeatable)")
        p.add_argument(
            "--group", action="append", metavar="NAME", help="a consumer group (repeatable)"
        )
        p.add_argument(
            "--transactional-id", action="append", metavar="ID",
            help="a transactional id (repeatable)",
        )  # fmt: skip
        p.add_argument("--cluster", action="store_true", help="the cluster resource")
        p.add_argument(
            "--resource-pattern-type", choices=["literal", "prefixed", "match", "any"],
            help="how resource names match: literal (the default for add), prefixed; "
            "match and any for list and remove",
        )  # fmt: skip
        p.add_argument(
            "--allow-principal", action="append", default=[], metavar="User:NAME",
            help="an ALLOW entry for this principal (repeatable)",
        )  # fmt: skip
        p.add_argument(
            "--deny-principal", action="append", default=[], metavar="User:NAME",
            help="a DENY entry for this principal (repeatable)",
        )  # fmt: skip
        p.add_argument(
            "--allow-host", action="append", metavar="HOST",
            help="hosts the ALLOW entries apply to (default *)",
        )  # fmt: skip
        p.add_argument(
            "--deny-host", action="append", metavar="HOST",
            help="hosts the DENY entries apply to (default *)",
        )  # fmt: skip
        p.add_argument(
            "--operation", action="append", default=[], metavar="OPERATION",
            help=f"one of {', '.join(_OPERATION_NAMES)} (repeatable; add: default ALL)",
        )  # fmt: skip
        p.add_argument("--principal", help="filter by principal (list, remove)")
        add_connection_args(p)
    add.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="write a cluster's ACLs straight into ZooKeeper (zookeeper.connect)",
    )
    add.set_defaults(func=guarded(cmd_add))
    lst.set_defaults(func=guarded(cmd_list))
    remove.set_defaults(func=guarded(cmd_remove))
