"""``headwater users add|delete|list``: SCRAM users (Kafka: ``kafka-configs --entity-type users``).

Through a running broker (``--bootstrap``) the commands use
AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554): the
password is salted and iterated here, only the salted password travels.
``--data-dir`` edits the credential file of a *stopped* broker instead, to
create the first (super) user before any listener requires SASL;
``--zookeeper`` does the same for a cluster (Kafka's ``kafka-configs
--zookeeper``), e.g. the broker user of a SASL inter-broker listener, which
must exist before the brokers start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
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
from headwater.security.client_security import ClientSecurity
from headwater.security.credentials import CredentialStore, FileCredentialStore
from headwater.security.scram import (
    DEFAULT_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    ScramMechanisms,
    check_iterations,
    normalize_password,
)

_ALL = [m.value for m in ScramMechanisms]


def _mechanisms(names: list[str] | None) -> list[ScramMechanism]:
    if not names:
        return _ALL
    out = []
    for name in names:
        mech = ScramMechanisms.by_name(name.upper())
        if mech is None:
            raise SystemExit(f"error: unknown mechanism {name} (SCRAM-SHA-256 or SCRAM-SHA-512)")
        out.append(mech)
    return out


def _password(args: argparse.Namespace) -> str:
    password = args.password or os.environ.get("HEADWATER_PASSWORD")
    if not password:
        password = getpass.getpass(f"password for {args.user}: ")
    if not password:
        raise SystemExit("error: empty password")
    return str(password)


@contextlib.contextmanager
def _direct_store(args: argparse.Namespace) -> Iterator[CredentialStore | None]:
    """The credential store itself (``--data-dir`` or ``--zookeeper``), else None."""
    if args.data_dir:
        yield FileCredentialStore.in_dir(Path(args.data_dir))
        return
    if not getattr(args, "zookeeper", None):
        yield None
        return
    from headwater.cluster.store import ZkClusterStore
    from headwater.cluster.zk_security import ZkSecurityStores

    store = ZkClusterStore(args.zookeeper)
    store.start(timeout=15)
    try:
        stores = ZkSecurityStores(store)
        stores.start()
        yield stores.credentials
        stores.stop()
    finally:
        store.close()


def _check(results: Any) -> None:
    for r in results:
        if int(r.error_code):
            raise KafkaError(int(r.error_code), r.error_message or f"user {r.user}")


def cmd_add(args: argparse.Namespace) -> int:
    password = _password(args)
    check_iterations(args.iterations)
    mechs = _mechanisms(args.mechanism)
    with _direct_store(args) as store:
        if store is not None:
            for m in mechs:
                cred = ScramCredential.from_password(m, password, args.iterations)
                store.upsert(args.user, m, cred)
    if store is None:
        upsertions = []
        for m in mechs:
            salt = secrets.token_bytes(32)
            salted = m.hi(normalize_password(password), salt, args.iterations)
            upsertions.append(
                {
                    "name": args.user,
                    "mechanism": m.kafka_type,
                    "iterations": args.iterations,
                    "salt": salt,
                    "salted_password": salted,
                }
            )
        body = {"deletions": [], "upsertions": upsertions}
        resp = asyncio.run(
            admin_request(
                args.bootstrap, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body, command_security(args)
            )
        )
        _check(resp.results)
    print(f"set {', '.join(m.mechanism_name for m in mechs)} for {args.user}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    mechs = _mechanisms(args.mechanism)
    with _direct_store(args) as store:
        if store is not None and not [m for m in mechs if store.delete(args.user, m)]:
            print(f"error: {args.user} has no such credential", file=sys.stderr)
            return 1
    if store is None:
        known = asyncio.run(_describe(args.bootstrap, command_security(args))).get(args.user, {})
        targets = [m for m in mechs if m.mechanism_name in known] if not args.mechanism else mechs
        if not targets:
            print(f"error: {args.user} has no such credential", file=sys.stderr)
            return 1
        body = {
            "deletions": [{"name": args.user, "mechanism": m.kafka_type} for m in targets],
            "upsertions": [],
        }
        resp = asyncio.run(
            admin_request(
                args.bootstrap, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body, command_security(args)
            )
        )
        _check(resp.results)
    print(f"deleted {args.user}")
    return 0


async def _describe(bootstrap: str, security: ClientSecurity | None) -> dict[str, dict[str, int]]:
    body = {"users": None}
    resp = await admin_request(bootstrap, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body, security)
    if int(resp.error_code):
        raise KafkaError(int(resp.error_code), resp.error_message or "DescribeUserScramCredentials")
    out: dict[str, dict[str, int]] = {}
    for r in resp.results:
        if int(r.error_code):
            raise KafkaError(int(r.error_code), r.error_message or r.user)
        for info in r.credential_infos:
            mech = ScramMechanisms.by_kafka_type(int(info.mechanism))
            name = mech.mechanism_name if mech else f"mechanism {info.mechanism}"
            out.setdefault(r.user, {})[name] = int(info.iterations)
    return out


def cmd_list(args: argparse.Namespace) -> int:
    with _direct_store(args) as store:
        users = store.describe() if store is not None else None
    if users is None:
        users = asyncio.run(_describe(args.bootstrap, command_security(args)))
    if args.json:
        print_json(
            [
                {
                    "user": name,
                    "credentials": [
                        {"mechanism": m, "iterations": n} for m, n in sorted(creds.items())
                    ],
                }
                for name, creds in sorted(users.items())
            ]
        )
        return 0
    for name, creds in sorted(users.items()):
        listed = ", ".join(f"{m} (iterations={n})" for m, n in sorted(creds.items()))
        print(f"{name}\t{listed}")
    return 0


def add_user_commands(sub: Any) -> None:
    users = sub.add_parser("users", help="add, delete or list SCRAM users")
    usub = users.add_subparsers(dest="users_command", required=True)
    add = usub.add_parser("add", help="create a user or change its password")
    delete = usub.add_parser("delete", help="delete a user's credentials")
    lst = usub.add_parser("list", help="users with their mechanisms and iterations")
    lst.add_argument("--json", action="store_true", help="print JSON instead of lines")
    for p in (add, delete):
        p.add_argument("user")
        p.add_argument(
            "--mechanism", action="append", metavar="SCRAM-SHA-256|SCRAM-SHA-512",
            help="repeatable; default both",
        )  # fmt: skip
    add.add_argument("--password", help="default: $HEADWATER_PASSWORD, else asked for")
    add.add_argument(
        "--iterations", type=int, default=DEFAULT_ITERATIONS, metavar="N",
        help=f"SCRAM iterations (default {DEFAULT_ITERATIONS}, at least 4096)",
    )  # fmt: skip
    for p in (add, delete, lst):
        where = p.add_mutually_exclusive_group()
        add_bootstrap_arg(where)
        where.add_argument(
            "--data-dir", metavar="DIR", help="edit a stopped broker's credential file directly"
        )
        where.add_argument(
            "--zookeeper",
            metavar="HOST:PORT[/CHROOT]",
            help="edit a cluster's credentials in ZooKeeper directly (zookeeper.connect)",
        )
        add_connection_args(p)
    add.set_defaults(func=guarded(cmd_add))
    delete.set_defaults(func=guarded(cmd_delete))
    lst.set_defaults(func=guarded(cmd_list))
