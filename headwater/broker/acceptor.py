"""The client-facing side of the server: listening sockets, the accept loop under
the connection limits, TLS handshakes, and the sweep of idle or stuck connections.

Each accepted socket becomes a ``Connection`` whose requests go to the
broker's ``dispatch``; everything about what a request means lives behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import resource
import socket
import ssl
import time
from collections.abc import Awaitable, Callable

from headwater.broker.config import BrokerConfig
from headwater.broker.connection import Connection, RequestContext, Response
from headwater.broker.connection_limits import Admission, ConnectionRegistry
from headwater.broker.connection_security import ConnectionSecurity
from headwater.broker.handlers.security import SecurityApis
from headwater.broker.memory_pool import MemoryPool
from headwater.broker.rejection_log import RejectionLog
from headwater.broker.tls_stream import TlsStream
from headwater.security.authorizer import Authorizer
from headwater.security.listeners import Listener, SecurityProtocol
from headwater.security.principal import principal_from_certificate
from headwater.security.quotas import ClientQuotaManager
from headwater.security.tls import ListenerTlsContexts

log = logging.getLogger(__name__)

Dispatch = Callable[[RequestContext, memoryview, int], "Response | Awaitable[Response]"]
Observe = Callable[[RequestContext, tuple[float, float, float, float, float, float]], None]


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def raise_open_file_limit() -> None:
    """Use the whole hard limit of open files, as Kafka's docs ask operators to.

    Segment files sent by ``sendfile`` stay open while responses are queued.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class ClientAcceptor:
    """Accepts clients on the broker's listeners and serves each connection."""

    def __init__(
        self,
        config: BrokerConfig,
        connections: ConnectionRegistry,
        request_pool: MemoryPool,
        *,
        authorizer: Authorizer,
        quotas: ClientQuotaManager,
        security: SecurityApis,
        dispatch: Dispatch,
        observe: Observe,
        spawn: Callable[[Awaitable[None], str], None],
    ) -> None:
        self.config = config
        self.connections = connections
        self.request_pool = request_pool
        self.authorizer = authorizer
        self.quotas = quotas
        self.security = security
        self.dispatch = dispatch
        self._observe_request = observe
        self._spawn = spawn
        self._connection_refusals = RejectionLog(log)
        self._slot_freed = asyncio.Event()
        self._conn_ids = itertools.count(1)
        #: ``sasl.enabled.mechanisms`` per listener (``listener.name.<l>.`` resolved once).
        self._sasl_mechanisms: dict[str, tuple[str, ...]] = {}

    async def accept_loop(
        self, sock: socket.socket, listener: Listener, tls: ListenerTlsContexts
    ) -> None:
        """Accept on ``listener``; a TLS connection takes the listener's context of the
        moment (a dynamic keystore change applies to the next connection)."""
        loop = asyncio.get_running_loop()
        registry = self.connections
        while True:
            while registry.full:
                # max.connections: stop accepting; clients wait in the listen backlog.
                self._slot_freed.clear()
                await self._slot_freed.wait()
            delay = registry.creation_delay(time.monotonic())
            if delay > 0:
                await asyncio.sleep(delay)  # max.connection.creation.rate
            try:
                client, addr = await loop.sock_accept(sock)
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.05)
                continue
            if registry.admit(addr[0]) is Admission.TOO_MANY_FROM_IP:
                self._connection_refusals.reject(
                    "connection",
                    f"{addr[0]}:{addr[1]}",
                    None,
                    f"max.connections.per.ip ({registry.limits.limit_for(addr[0])}) reached",
                )
                client.close()
                continue
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn, stream = self._connection(
                client, f"{addr[0]}:{addr[1]}", listener, tls.context(listener.name)
            )
            # Counted now, before the next accept: the limits see every connection.
            registry.add(conn)
            self._spawn(self._serve(conn, stream), f"conn-{conn.connection_id}")

    def _connection(
        self,
        client: socket.socket,
        peer: str,
        listener: Listener,
        tls: ssl.SSLContext | None,
    ) -> tuple[Connection, TlsStream | None]:
        """A connection on ``listener``: TLS over the socket there (handshake in ``_serve``)."""
        security = ConnectionSecurity(
            listener=listener, authorizer=self.authorizer, quotas=self.quotas
        )
        stream = None
        if listener.protocol.uses_tls:
            assert tls is not None
            stream = TlsStream(client, tls)
        if listener.protocol.uses_sasl:
            mechanisms = self._sasl_mechanisms.get(listener.name)
            if mechanisms is None:
                own = self.config.security.for_listener(listener.name)
                mechanisms = self._sasl_mechanisms[listener.name] = own.sasl_enabled_mechanisms
            security.sasl = self.security.new_sasl_session(mechanisms)
        conn = Connection(
            client,
            peer,
            next(self._conn_ids),
            self.dispatch,
            max_frame_bytes=self.config.socket_request_max_bytes,
            zero_copy=self.config.zero_copy,
            pool=self.request_pool,
            max_queued=self.connections.limits.max_queued_requests,
            stream=stream,
            security=security,
            observe=self._observe_request,
        )
        return conn, stream

    async def _serve(self, conn: Connection, stream: TlsStream | None) -> None:
        """TLS handshake (on TLS listeners), then the connection's request loop.

        Whatever happens, the connection's place in the registry (counted
        against the connection limits by the accept loop) is given back.
        """
        try:
            if stream is not None:
                listener = conn.security.listener
                timeout = self.config.security.tls.handshake_timeout_ms / 1000
                try:
                    async with asyncio.timeout(timeout):
                        await stream.handshake()
                except (TimeoutError, ssl.SSLError, OSError) as exc:
                    log.info(
                        "TLS handshake with %s on %s failed: %s", conn.peer, listener.name, exc
                    )
                    conn.close_socket()
                    return
                if listener.protocol is SecurityProtocol.SSL:
                    conn.security.principal = principal_from_certificate(stream.peer_certificate())
            await conn.run()
        finally:
            self.connections.remove(conn)
            self._slot_freed.set()

    async def connection_sweep(self) -> None:
        """Close idle, slowloris and stuck connections (see ``connection_limits``)."""
        limits = self.config.connections
        shortest = min(limits.idle_ms, limits.receive_timeout_ms, limits.completion_timeout_ms)
        interval = min(max(shortest / 4000, 0.05), 1.0)
        while True:
            await asyncio.sleep(interval)
            for conn, reason in self.connections.expired(time.monotonic()):
                if isinstance(conn, Connection):
                    # Idle closes are routine (Kafka logs them at debug); the rest are not.
                    conn.close(
                        reason,
                        logging.INFO
                        if conn.busy_since is None and conn.frame_started is None
                        else logging.WARNING,
                    )
