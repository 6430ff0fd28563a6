"""Serving the console: the binding rule, uvicorn, and a background mode for embedders.

``headwater console`` runs it in the foreground; ``headwater serve
--console-listen`` and ``headwater demo`` run it on a thread beside their
own work (``ConsoleServer.start``). Either way the rule is the same: bound
anywhere but 127.0.0.1, ::1 or localhost, it refuses to start without a
user file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from headwater.addresses import split_host_port
from headwater.console.app import ConsoleApp, ConsoleOptions
from headwater.console.auth import is_loopback_host, load_user_file
from headwater.console.gateway import ClusterGateway
from headwater.security.client_security import ClientSecurity

log = logging.getLogger(__name__)
DEFAULT_LISTEN = "127.0.0.1:8080"


class ConsoleConfigError(ValueError):
    """A console that must not start as asked (one line for the operator)."""


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    bootstrap: str
    security: ClientSecurity | None = None
    listen: str = DEFAULT_LISTEN
    read_only: bool = False
    users_file: Path | None = None
    metrics: Mapping[int, str] | None = None  # broker id -> HOST:PORT of its /metrics


def check_binding(host: str, users: Mapping[str, str] | None, listen: str) -> None:
    if users is None and not is_loopback_host(host):
        raise ConsoleConfigError(
            f"the console would listen on {listen}, which is not a loopback address: "
            "give it a user file (--users FILE, scrypt or argon2 hashes; "
            "make one with `headwater console --users FILE --add-user NAME`) to require a login"
        )


def url_for(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


class ConsoleServer:
    """One console: its gateway, its app and the uvicorn server serving it."""

    def __init__(self, settings: ConsoleSettings) -> None:
        host, port = split_host_port(settings.listen, 8080)
        users = load_user_file(settings.users_file) if settings.users_file else None
        check_binding(host, users, settings.listen)
        self.settings = settings
        self.host, self.port = host, port
        self.gateway = ClusterGateway(
            settings.bootstrap, settings.security, metrics_endpoints=settings.metrics
        )
        self.console = ConsoleApp(
            self.gateway, ConsoleOptions(read_only=settings.read_only, users=users)
        )
        # Bind here, so a busy port is an error at start-up, not in a thread later.
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host.strip("[]"), port))
        except OSError as exc:
            self._sock.close()
            self.gateway.close()
            raise ConsoleConfigError(
                f"console --listen {settings.listen}: {exc.strerror or exc}"
            ) from None
        # Listen at once: whoever reads the URL printed next may connect before uvicorn
        # has started; the connection waits in the backlog instead of being refused.
        self._sock.listen(2048)
        self.port = self._sock.getsockname()[1]
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.console.app, log_level="warning", access_log=False, lifespan="off",
                timeout_graceful_shutdown=2,
            )
        )  # fmt: skip
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return url_for(self.host, self.port)

    def serve_forever(self) -> None:
        """Serve until Ctrl-C / SIGTERM (uvicorn's own signal handling)."""
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self.close()

    def start(self) -> ConsoleServer:
        """Serve on a daemon thread (beside a broker or the demo); returns once listening."""
        # uvicorn installs signal handlers only on the main thread: the embedder keeps its own.
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
            name="headwater-console",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise ConsoleConfigError("the console stopped while starting")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        self.gateway.close()
