"""What every client command shares: bootstrap, security options, errors and output.

One place so that every command takes the same ``--bootstrap`` (with its
default shown in ``--help``) and the same ``--command-config`` security
options, and fails the same way: one line on stderr (``error: NAME (code):
...``) and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from headwater.broker.config import parse_properties
from headwater.client.cluster import ClusterClient
from headwater.client.errors import KafkaError
from headwater.security.client_security import ClientSecurity

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9092"

Command = Callable[[argparse.Namespace], int]


def add_bootstrap_arg(p: argparse.ArgumentParser | Any) -> None:
    """``--bootstrap HOST:PORT`` (also on a mutually exclusive group)."""
    p.add_argument(
        "--bootstrap",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"a broker to bootstrap from (default {DEFAULT_BOOTSTRAP})",
    )


def add_connection_args(p: argparse.ArgumentParser) -> None:
    """``--command-config FILE``: how the command logs in to a secured listener."""
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties: security.protocol, sasl.mechanism, sasl.username, "
        "sasl.password, ssl.ca.location, ...",
    )


def add_client_args(p: argparse.ArgumentParser) -> None:
    """``--bootstrap`` and the security options: every command that talks to a broker."""
    add_bootstrap_arg(p)
    add_connection_args(p)


def command_security(args: argparse.Namespace) -> ClientSecurity | None:
    """``--command-config FILE``: client security keys, as Kafka's tools take them."""
    path = getattr(args, "command_config", None)
    if not path:
        return None
    return ClientSecurity.from_properties(parse_properties(Path(path).read_text()))


async def admin_request(
    bootstrap: str, api_key: int, body: dict[str, Any], security: ClientSecurity | None
) -> Any:
    """One request on a fresh connection (the users and acls commands make one or two)."""
    cluster = ClusterClient(bootstrap, client_id="headwater-admin", security=security)
    try:
        conn = await cluster.any_connection()
        return await conn.request(api_key, body)
    finally:
        await cluster.close()


def guarded(fn: Command) -> Command:
    """Map a KafkaError, an OS error or a bad value to one line on stderr and exit code 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except (KafkaError, OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    run.__name__ = getattr(fn, "__name__", "command")
    run.__doc__ = fn.__doc__
    return run


def parse_key_values(items: Sequence[str], flag: str = "--config") -> dict[str, str]:
    """``KEY=VALUE`` items of a repeatable flag."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} needs KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Left-aligned columns, two spaces apart (the layout of Kafka's newer tools)."""
    cells = [list(columns), *[[str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))
