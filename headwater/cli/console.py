"""``headwater console``: the web console for any Headwater (or Kafka) cluster.

The same ``--bootstrap`` and ``--command-config`` as every client command,
so a secured cluster is reached exactly as the CLI reaches it. ``--users
FILE --add-user NAME`` writes a scrypt hash into a user file (asking for
the password) instead of serving.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path
from typing import Any

from headwater.cli.common import add_client_args, command_security, guarded
from headwater.console.auth import UserFileError, add_user_line
from headwater.console.server import (
    DEFAULT_LISTEN,
    ConsoleConfigError,
    ConsoleServer,
    ConsoleSettings,
)


def _add_user(args: argparse.Namespace) -> int:
    if not args.users:
        raise ValueError("--add-user needs --users FILE (the file to write)")
    path = Path(args.users)
    password = os.environ.get("HEADWATER_CONSOLE_PASSWORD") or getpass.getpass(
        f"password for {args.add_user}: "
    )
    if not password:
        raise ValueError("empty password")
    text = path.read_text() if path.exists() else ""
    path.write_text(add_user_line(text, args.add_user, password))
    path.chmod(0o600)
    print(f"set the password of {args.add_user} in {path}")
    return 0


def parse_metrics_endpoints(items: list[str]) -> dict[int, str]:
    """``--metrics ID=HOST:PORT`` items as broker id -> endpoint."""
    out: dict[int, str] = {}
    for item in items:
        broker, sep, where = item.partition("=")
        if not sep or not broker.strip().isdigit() or not where.strip():
            raise ValueError(f"--metrics needs BROKER_ID=HOST:PORT, got {item!r}")
        out[int(broker)] = where.strip()
    return out


def cmd_console(args: argparse.Namespace) -> int:
    if args.add_user:
        return _add_user(args)
    try:
        server = ConsoleServer(
            ConsoleSettings(
                bootstrap=args.bootstrap,
                security=command_security(args),
                listen=args.listen,
                read_only=args.read_only,
                users_file=Path(args.users) if args.users else None,
                metrics=parse_metrics_endpoints(args.metrics),
            )
        )
    except (ConsoleConfigError, UserFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    mode = " (read-only)" if args.read_only else ""
    print(f"console on {server.url}{mode} for {args.bootstrap}", flush=True)
    server.serve_forever()
    return 0


def add_console_command(sub: Any) -> None:
    p = sub.add_parser("console", help="serve the web console for a cluster")
    add_client_args(p)
    p.add_argument(
        "--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
        help=f"where to serve it (default {DEFAULT_LISTEN}; any other host than 127.0.0.1, "
        "::1 or localhost needs --users)",
    )  # fmt: skip
    p.add_argument("--read-only", action="store_true", help="hide and refuse every write")
    p.add_argument(
        "--users", metavar="FILE", default=os.environ.get("HEADWATER_CONSOLE_USERS") or None,
        help="require a login: NAME:HASH lines, scrypt ($scrypt$...) or argon2 ($argon2id$...) "
        "(default $HEADWATER_CONSOLE_USERS)",
    )  # fmt: skip
    p.add_argument(
        "--add-user", metavar="NAME",
        help="instead of serving, set NAME's password in --users FILE (asked for, or "
        "$HEADWATER_CONSOLE_PASSWORD) and exit",
    )  # fmt: skip
    p.add_argument(
        "--metrics", action="append", default=[], metavar="BROKER_ID=HOST:PORT",
        help="a broker's Prometheus /metrics (its --metrics-listen), for the metrics page and "
        "the overview's bytes in/out (repeatable)",
    )  # fmt: skip
    p.set_defaults(func=guarded(cmd_console))
