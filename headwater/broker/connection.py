"""One client connection: frames in, responses out in request order.

Kafka clients match responses to requests by position as well as by
correlation id and drop the connection on a mismatch, so responses must
leave in the order the requests arrived, even while an earlier Fetch is
long-polling. Requests are dispatched as they arrive (a Produce is applied
before the next frame is read, so idempotent sequences keep their order);
handlers that wait (Fetch, JoinGroup) return awaitables, and a single writer
task awaits them in arrival order.

A malformed frame, an unknown API or a handler failure closes only this
connection, with a log line; the broker keeps serving everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from headwater.broker.connection_security import ConnectionSecurity
from headwater.broker.listeners import Listener
from headwater.broker.socket_writer import Part, SocketWriter
from headwater.protocol.fetch_codec import EncodedBody
from headwater.protocol.frame import FrameDecoder
from headwater.protocol.header import RequestHeader, encode_response_header, parse_request_header
from headwater.security.acl import AclOperation, ResourceType
from headwater.security.principal import KafkaPrincipal
from headwater.security.quotas import QuotaKey

log = logging.getLogger(__name__)

Response = EncodedBody | bytes | None
"""A response body without header; None means "send nothing" (Produce acks=0)."""

#: Requests a client may have outstanding on one connection before we stop
#: reading from it (back-pressure instead of unbounded memory).
MAX_IN_FLIGHT = 256
_RECV_SIZE = 256 * 1024


class CloseConnection(Exception):
    """Raised by a handler when the only right answer is to close the connection."""


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    client_host: str
    connection_id: int
    #: The connection's security state (listener, principal, SASL exchange).
    security: ConnectionSecurity = field(default_factory=ConnectionSecurity)

    @property
    def principal(self) -> KafkaPrincipal:
        return self.security.principal

    @property
    def listener(self) -> Listener:
        return self.security.listener

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """The one authorization call handlers make at each of Kafka's check points."""
        sec = self.security
        return sec.authorizer.authorize(sec.principal, self.host, operation, resource_type, name)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether ``operation`` is allowed on at least one resource of the type."""
        sec = self.security
        return sec.authorizer.authorize_any(sec.principal, self.host, operation, resource_type)

    def throttle(self, key: QuotaKey, amount: float) -> int:
        """Record ``amount`` against the client's quota; the throttle time in ms.

        A throttle mutes the connection that long (KIP-219); the handler puts
        the time in its response's ``throttle_time_ms``.
        """
        quotas = self.security.quotas
        if quotas is None or not quotas.enabled:
            return 0
        now = time.monotonic()
        user, client = self.security.principal.name, self.header.client_id or ""
        ms = quotas.record(key, user, client, amount, now * 1000)
        if ms > 0:
            self.security.muted_until = max(self.security.muted_until, now + ms / 1000)
        return ms

    def quota_window_bytes(self, key: QuotaKey) -> int | None:
        """The most bytes one response may carry under the client's quota, if any."""
        quotas = self.security.quotas
        if quotas is None or not quotas.enabled:
            return None
        user, client = self.security.principal.name, self.header.client_id or ""
        limit = quotas.max_value_in_window(key, user, client)
        return None if limit is None else max(1, int(limit))

    def throttled_now(self, key: QuotaKey) -> int:
        """Whether the client is over its quota already (nothing recorded)."""
        quotas = self.security.quotas
        if quotas is None or not quotas.enabled:
            return 0
        now = time.monotonic()
        user, client = self.security.principal.name, self.header.client_id or ""
        ms = quotas.throttle_ms(key, user, client, now * 1000)
        if ms > 0:
            self.security.muted_until = max(self.security.muted_until, now + ms / 1000)
        return ms

    def topic_check(self, operation: AclOperation) -> Callable[[str], bool]:
        """``operation`` on topics for this request, each topic decided once."""
        if not self.security.authorizer.enabled:
            return _allow
        decided: dict[str, bool] = {}

        def check(topic: str) -> bool:
            allowed = decided.get(topic)
            if allowed is None:
                allowed = decided[topic] = self.authorize(operation, ResourceType.TOPIC, topic)
            return allowed

        return check

    @property
    def host(self) -> str:
        """The client's address without the port, as ACL host entries name it."""
        return self.client_host.rsplit(":", 1)[0].strip("[]")


def _allow(_topic: str) -> bool:
    return True


class ByteStream(Protocol):
    """Where a connection reads and writes: the socket itself, or TLS over it."""

    async def recv_into(self, buf: bytearray) -> int: ...

    async def write(self, parts: Sequence[Part]) -> None: ...


class PlainStream:
    """The socket as it is: ``sock_recv_into`` in, ``SocketWriter`` (sendfile) out."""

    def __init__(self, sock: socket.socket, *, zero_copy: bool) -> None:
        self._sock = sock
        self._writer = SocketWriter(sock, zero_copy=zero_copy)

    async def recv_into(self, buf: bytearray) -> int:
        return await asyncio.get_running_loop().sock_recv_into(self._sock, buf)

    async def write(self, parts: Sequence[Part]) -> None:
        await self._writer.write(parts)


Dispatch = Callable[[RequestContext, memoryview, int], "Response | Awaitable[Response]"]


@dataclass(slots=True)
class _Queued:
    header: RequestHeader
    result: Response | asyncio.Future[Response]
    close_after: bool = False


class Connection:
    """Reads frames from ``sock`` and writes responses produced by ``dispatch``."""

    def __init__(
        self,
        sock: socket.socket,
        peer: str,
        connection_id: int,
        dispatch: Dispatch,
        *,
        max_frame_bytes: int,
        zero_copy: bool,
        stream: ByteStream | None = None,
        security: ConnectionSecurity | None = None,
    ) -> None:
        self._sock = sock
        self.peer = peer
        self.connection_id = connection_id
        self._dispatch = dispatch
        self._decoder = FrameDecoder(max_frame_bytes)
        self._stream = stream or PlainStream(sock, zero_copy=zero_copy)
        self.security = security or ConnectionSecurity()
        self._queue: asyncio.Queue[_Queued | None] = asyncio.Queue(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Future[Response]] = set()
        self._closed = False
        self._closing = False

    async def run(self) -> None:
        writer = asyncio.create_task(self._write_loop(), name=f"writer-{self.connection_id}")
        try:
            await self._read_loop()
            if self._closing:
                # The last response (a failed authentication) goes out before the close.
                await self._queue.put(None)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(writer), 30)
        except (ConnectionError, OSError) as exc:
            log.debug("connection %s from %s: %s", self.connection_id, self.peer, exc)
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except Exception:
            log.exception("closing connection from %s after an internal error", self.peer)
        finally:
            self._closed = True
            for task in self._tasks:
                task.cancel()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer
            self._sock.close()

    async def _read_loop(self) -> None:
        buf = bytearray(_RECV_SIZE)
        view = memoryview(buf)
        while not self._closed:
            n = await self._stream.recv_into(buf)
            if n == 0:
                return
            try:
                frames = self._decoder.feed(bytes(view[:n]))
            except Exception as exc:  # FrameTooLargeError, InvalidFrameError
                raise CloseConnection(f"bad frame: {exc}") from exc
            for frame in frames:
                await self._handle_frame(frame)
                if self._closing:
                    return

    async def _handle_frame(self, frame: memoryview) -> None:
        muted = self.security.muted_until - time.monotonic()
        if muted > 0:
            await asyncio.sleep(muted)  # a quota throttle (KIP-219): read nothing meanwhile
        try:
            header, offset = parse_request_header(frame)
        except Exception as exc:
            raise CloseConnection(f"unparseable request header: {exc}") from exc
        ctx = RequestContext(header, self.peer, self.connection_id, self.security)
        try:
            result = self._dispatch(ctx, frame, offset)
        except CloseConnection:
            raise
        except Exception as exc:
            raise CloseConnection(
                f"request api_key={header.api_key} v{header.api_version} "
                f"correlation_id={header.correlation_id} failed: {exc!r}"
            ) from exc
        close_after = self.security.close_after_response
        self._closing = close_after
        if inspect.isawaitable(result):
            task: asyncio.Future[Response] = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            await self._queue.put(_Queued(header, task, close_after))
        else:
            await self._queue.put(_Queued(header, result, close_after))

    async def _write_loop(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None or not await self._send(item):
                return

    async def _send(self, item: _Queued) -> bool:
        """Write one response; False when the connection must close.

        A method of its own so that the response, and the segment files its
        slices keep open, are released as soon as it is written rather than
        kept alive by loop variables while the next request long-polls.
        """
        result = item.result
        if isinstance(result, asyncio.Future):
            try:
                body = await result
            except asyncio.CancelledError:
                raise
            except Exception:
                h = item.header
                log.exception(
                    "closing connection from %s: api_key=%s v%s failed",
                    self.peer,
                    h.api_key,
                    h.api_version,
                )
                self._sock.shutdown(socket.SHUT_RDWR)
                return False
        else:
            body = result
        if body is not None:
            await self._stream.write(self._frame(item.header, body))
        return not item.close_after

    @staticmethod
    def _frame(header: RequestHeader, body: EncodedBody | bytes) -> list[Part]:
        head = encode_response_header(header.correlation_id, header.api_key, header.api_version)
        if isinstance(body, EncodedBody):
            size = len(head) + body.size
            return [struct.pack(">i", size) + head, *body.parts]
        return [struct.pack(">i", len(head) + len(body)) + head, body]
