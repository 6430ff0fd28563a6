"""What every client command shares: bootstrap, security options, errors and output.

One place so that every command takes the same ``--bootstrap`` (with its
default shown in ``--help``) and the same security options, and fails the
same way: one line on stderr (``error: NAME (code): ...``) and exit code 1.

Security options are Kafka client properties (``security.protocol``,
``sasl.mechanism``, ``sasl.username``/``sasl.password`` or
``sasl.jaas.config``, ``ssl.ca.location``/``ssl.truststore.location`` (PEM),
``ssl.certificate.location``/``ssl.key.location``...), from
``--command-config FILE`` as Kafka's tools take them, or from environment
variables named after them (``HEADWATER_SECURITY_PROTOCOL``,
``HEADWATER_SASL_PASSWORD``, ...) for scripts; the file wins over the
environment. ``HEADWATER_COMMAND_CONFIG`` names a default file.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from headwater.broker.config import parse_properties
from headwater.client.admin import AdminClient
from headwater.client.cluster import ClusterClient
from headwater.client.errors import NETWORK_EXCEPTION, KafkaError
from headwater.security.client_security import CLIENT_SECURITY_KEYS, ClientSecurity

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9092"
ENV_PREFIX: Final = "HEADWATER_"
COMMAND_CONFIG_ENV: Final = "HEADWATER_COMMAND_CONFIG"

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
        default=os.environ.get(COMMAND_CONFIG_ENV) or None,
        help="Kafka client properties for a secured listener: security.protocol, "
        "sasl.mechanism, sasl.username + sasl.password (or sasl.jaas.config), "
        "ssl.ca.location or ssl.truststore.location (PEM), ssl.certificate.location + "
        "ssl.key.location; the same keys also come from HEADWATER_SECURITY_PROTOCOL, "
        f"HEADWATER_SASL_USERNAME, ... (default: ${COMMAND_CONFIG_ENV}, else none)",
    )


def add_client_args(p: argparse.ArgumentParser) -> None:
    """``--bootstrap`` and the security options: every command that talks to a broker."""
    add_bootstrap_arg(p)
    add_connection_args(p)


def env_name(key: str) -> str:
    """``sasl.username`` -> ``HEADWATER_SASL_USERNAME``."""
    return ENV_PREFIX + key.upper().replace(".", "_")


def security_properties(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> dict[str, str]:
    """The security keys from the environment, overridden by ``--command-config``."""
    env = os.environ if environ is None else environ
    props = {key: env[env_name(key)] for key in CLIENT_SECURITY_KEYS if env_name(key) in env}
    path = getattr(args, "command_config", None)
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ValueError(f"--command-config {path}: {exc.strerror or exc}") from None
        props.update(parse_properties(text))
    return props


def command_security(args: argparse.Namespace) -> ClientSecurity | None:
    """How to log in: None for plain PLAINTEXT (no security keys at all)."""
    props = security_properties(args)
    if not any(key in props for key in CLIENT_SECURITY_KEYS):
        return None
    try:
        return ClientSecurity.from_properties(props)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"TLS settings: {exc}") from None


def admin_client(args: argparse.Namespace, client_id: str = "headwater-admin") -> AdminClient:
    return AdminClient(args.bootstrap, client_id=client_id, security=command_security(args))


def client_config(args: argparse.Namespace, **keys: Any) -> dict[str, Any]:
    """A producer's or consumer's config: bootstrap, security, then ``keys``."""
    return {"bootstrap.servers": args.bootstrap, "security": command_security(args), **keys}


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
            print(f"error: {exc}{_hint(exc, args)}", file=sys.stderr)
            return 1

    run.__name__ = getattr(fn, "__name__", "command")
    run.__doc__ = fn.__doc__
    return run


def _hint(exc: BaseException, args: argparse.Namespace) -> str:
    """What the operator can do about a refused connection, on the same line."""
    try:
        security = command_security(args)
    except ValueError:
        return ""
    tls = security is not None and security.uses_tls
    if isinstance(exc, ssl.SSLError) and tls:
        return (
            " (hint: is this a TLS listener? a PLAINTEXT or SASL_PLAINTEXT port "
            "answers TLS like this; check security.protocol and the port)"
        )
    closed = isinstance(exc, KafkaError) and exc.code == NETWORK_EXCEPTION
    if closed and "closed" in str(exc) and not tls:
        return (
            " (hint: if this is a TLS or SASL listener, pass --command-config with "
            "security.protocol=SSL, SASL_SSL or SASL_PLAINTEXT)"
        )
    return ""


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
