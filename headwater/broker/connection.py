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

What a connection may hold is bounded: at most ``max_queued`` requests wait
for their responses (then reading pauses, as Kafka mutes a channel), a
partial request reserves its declared size from the broker-wide
:class:`MemoryPool` (reading pauses when it is spent) while its buffer grows
only as bytes arrive, and an idle connection holds no receive buffer. When
either side of the connection ends (the peer closes, a write fails, the
broker's sweep closes it), everything queued is dropped, pending handlers
are cancelled, the pool reservation is returned and the socket is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass, field
from types import CoroutineType
from typing import Any, Protocol, TypeGuard, cast

from headwater.broker.connection_security import ConnectionSecurity
from headwater.broker.memory_pool import MemoryPool
from headwater.broker.socket_reader import SocketReader
from headwater.broker.socket_writer import Part, SocketWriter
from headwater.protocol.fetch_codec import EncodedBody
from headwater.protocol.frame import FrameDecoder
from headwater.protocol.header import RequestHeader, encode_response_header, parse_request_header
from headwater.security.acl import AclOperation, ResourceType
from headwater.security.listeners import Listener
from headwater.security.principal import KafkaPrincipal
from headwater.security.quotas import QuotaKey

log = logging.getLogger(__name__)

Response = EncodedBody | bytes | None
"""A response body without header; None means "send nothing" (Produce acks=0)."""

#: Requests a client may have outstanding on one connection before we stop
#: reading from it (back-pressure instead of unbounded memory).
MAX_IN_FLIGHT = 16
#: The most one recv takes. ``sock_recv`` allocates only when data is ready
#: and returns a buffer of what arrived, so idle connections hold nothing.
_RECV_SIZE = 256 * 1024
_UNBOUNDED = MemoryPool(-1)
#: What a handler returns when it answered at once: no awaitable check needed.
_READY_TYPES = frozenset({bytes, EncodedBody, type(None)})
_FRAME_SIZE = struct.Struct(">i")


class Ordered(Awaitable[Response]):
    """A response the connection completes before it reads the next request.

    A Produce that runs in slices (``cooperative``) returns one: the event
    loop serves other connections meanwhile, but this connection's next
    Produce cannot overtake it, so idempotent sequences keep their order.
    """

    __slots__ = ("_awaitable",)

    def __init__(self, awaitable: Awaitable[Response]) -> None:
        self._awaitable = awaitable

    def __await__(self) -> Generator[Any, None, Response]:
        return self._awaitable.__await__()


class CloseConnection(Exception):
    """Raised by a handler when the only right answer is to close the connection."""


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    client_host: str
    connection_id: int
    #: The connection's security state (listener, principal, SASL exchange).
    security: ConnectionSecurity = field(default_factory=ConnectionSecurity)
    #: Set by a handler for requests outside client request quotas (follower
    #: fetches: replication has its own throttles, KIP-73).
    request_quota_exempt: bool = False
    #: Seconds a handler waited on others (a Fetch's long poll, acks=all):
    #: Kafka's RemoteTimeMs, taken out of the handler's LocalTimeMs.
    remote_seconds: float = 0.0

    def add_remote_time(self, seconds: float) -> None:
        """A wait on others (purgatory, a rebalance): RemoteTimeMs, not LocalTimeMs."""
        self.remote_seconds += seconds

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

    def request_throttle_ms(self) -> int:
        """The request-rate throttle (KIP-124) to put in this response's ``throttle_time_ms``.

        The client's handler time is recorded once its request is handled
        (``Broker.dispatch``); this is the throttle that time adds up to so far,
        recording nothing. Super users (the brokers themselves) are exempt, as
        Kafka exempts inter-broker requests.
        """
        sec = self.security
        quotas = sec.quotas
        if quotas is None or not quotas.enabled or sec.quota_exempt or self.request_quota_exempt:
            return 0
        user, client = sec.principal.name, self.header.client_id or ""
        return quotas.throttle_ms(
            QuotaKey.REQUEST_PERCENTAGE, user, client, time.monotonic() * 1000
        )

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

    async def recv(self, size: int) -> bytes:
        """At most ``size`` bytes as they arrive (b"" at the end): no buffer held while idle."""
        ...

    async def recv_into(self, buf: bytearray) -> int: ...

    async def write(self, parts: Sequence[Part]) -> None: ...

    def close(self) -> None:
        """Stop watching the socket; called just before it is closed."""
        ...


class PlainStream:
    """The socket as it is: ``SocketReader`` in, ``SocketWriter`` (sendfile) out."""

    def __init__(self, sock: socket.socket, *, zero_copy: bool) -> None:
        self.reader = SocketReader(sock)
        self.writer = SocketWriter(sock, zero_copy=zero_copy)

    async def recv(self, size: int) -> bytes:
        return await self.reader.recv(size)

    async def recv_into(self, buf: bytearray) -> int:
        return await self.reader.recv_into(buf)

    async def write(self, parts: Sequence[Part]) -> None:
        await self.writer.write(parts)

    def close(self) -> None:
        self.reader.close()


Dispatch = Callable[[RequestContext, memoryview, int], "Response | Awaitable[Response]"]

#: Told of each answered request: its context and Kafka's RequestMetrics times
#: in ms (request queue, local, remote, response queue, response send, total).
RequestObserver = Callable[[RequestContext, tuple[float, float, float, float, float, float]], None]


@dataclass(slots=True)
class _Queued:
    header: RequestHeader
    result: Response | asyncio.Future[Response]
    close_after: bool = False
    ctx: RequestContext | None = None
    #: time.perf_counter() when the request arrived whole, was handed to its
    #: handler, and when the handler's answer was ready.
    arrived: float = 0.0
    started: float = 0.0
    ready: float = 0.0

    def mark_ready(self, _future: object) -> None:
        self.ready = time.perf_counter()


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
        pool: MemoryPool = _UNBOUNDED,
        max_queued: int = MAX_IN_FLIGHT,
        stream: ByteStream | None = None,
        security: ConnectionSecurity | None = None,
        observe: RequestObserver | None = None,
    ) -> None:
        self._sock = sock
        self._observe = observe
        #: When this connection's previous response was written (perf_counter).
        self._last_sent = 0.0
        self.peer = peer
        self.peer_ip = peer.rsplit(":", 1)[0]
        self.connection_id = connection_id
        self._dispatch = dispatch
        self._decoder = FrameDecoder(max_frame_bytes)
        self._stream = stream or PlainStream(sock, zero_copy=zero_copy)
        # The plain socket's reader and writer are called directly: one
        # coroutine less per request and per response.
        self._recv: Callable[[int], Awaitable[bytes]] = self._stream.recv
        self._write: Callable[[Sequence[Part]], Awaitable[None]] = self._stream.write
        if isinstance(self._stream, PlainStream):
            self._recv = self._stream.reader.recv
            self._write = self._stream.writer.write
        self.security = security or ConnectionSecurity()
        #: A response that ends the connection (a failed authentication) was queued.
        self._closing = False
        self._writer_done = asyncio.Event()
        self._queue: asyncio.Queue[_Queued | None] = asyncio.Queue(max_queued)
        self._tasks: set[asyncio.Future[Response]] = set()
        self._pool = pool
        self._reserved = 0  # bytes of the pool this connection holds
        self._run_task: asyncio.Task[None] | None = None
        self._close_reason: str | None = None
        self._close_level = logging.WARNING
        self.last_active = time.monotonic()
        self.frame_started: float | None = None
        self.busy_since: float | None = None

    def close(self, reason: str, level: int = logging.WARNING) -> None:
        """Close from outside (timeouts, shutdown): the run task tears everything down."""
        if self._close_reason is None:
            self._close_reason = reason
            self._close_level = level
        if self._run_task is not None:
            self._run_task.cancel()

    def close_socket(self) -> None:
        """Close a connection that never ran (its TLS handshake failed)."""
        self._stream.close()
        self._sock.close()

    async def run(self) -> None:
        self._run_task = asyncio.current_task()
        name = self.connection_id
        reader = asyncio.create_task(self._read_loop(), name=f"reader-{name}")
        writer = asyncio.create_task(self._write_loop(), name=f"writer-{name}")
        try:
            # Whichever side ends first ends the connection: a peer that went
            # away must not leave the reader parked on a full queue for good.
            done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                self._log_end(task)
        except asyncio.CancelledError:
            if self._close_reason is None:
                raise
            log.log(
                self._close_level, "closing connection from %s: %s", self.peer, self._close_reason
            )
        finally:
            await self._release(reader, writer)

    def _log_end(self, task: asyncio.Task[None]) -> None:
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, CloseConnection):
            log.warning("closing connection from %s: %s", self.peer, exc)
        elif isinstance(exc, (ConnectionError, OSError)):
            log.debug("connection %s from %s: %s", self.connection_id, self.peer, exc)
        else:
            log.error(
                "closing connection from %s after an internal error",
                self.peer,
                exc_info=exc,
            )

    async def _release(self, *loops: asyncio.Task[None]) -> None:
        """Let go of everything this connection holds."""
        for task in loops:
            task.cancel()
        for pending in self._tasks:
            pending.cancel()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        while not self._queue.empty():
            self._queue.get_nowait()
        self._pool.release(self._reserved)
        self._reserved = 0
        self._decoder = FrameDecoder(0)
        self.frame_started = self.busy_since = None
        self._stream.close()
        self._sock.close()

    async def _read_loop(self) -> None:
        while True:
            data = await self._recv(_RECV_SIZE)
            if not data:
                return
            now = time.monotonic()
            arrived = time.perf_counter()
            self.last_active = now
            try:
                frames = self._decoder.feed(data)
            except Exception as exc:  # FrameTooLargeError, InvalidFrameError
                raise CloseConnection(f"bad frame: {exc}") from exc
            completed = len(frames)
            if completed:
                # The request arrived whole: however long handling takes (a
                # Produce in slices), it is no longer the peer's slowness.
                self.frame_started = None
            for frame in frames:
                await self._handle_frame(frame, arrived)
                if self._closing:
                    # The last response (a failed authentication) goes out first.
                    await self._queue.put(None)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(30):
                            await self._writer_done.wait()
                    return
            del frames, data
            await self._account(completed > 0)

    async def _account(self, completed: bool) -> None:
        """Hold pool bytes for the request being assembled, and only for it.

        Called after the chunk's complete requests were handled, so their
        reservation is returned here; a request that cannot reserve its
        size waits, and with it the reading from this socket.
        """
        pending = self._decoder.pending_length or 0
        if pending < self._reserved:
            self._pool.release(self._reserved - pending)
            self._reserved = pending
        elif pending > self._reserved:
            self.frame_started = None  # waiting for the pool is not the peer's slowness
            await self._pool.reserve(pending - self._reserved)
            self._reserved = pending
        if not pending:
            self.frame_started = None
        elif completed or self.frame_started is None:
            self.frame_started = time.monotonic()

    async def _handle_frame(self, frame: memoryview, arrived: float) -> None:
        muted = self.security.muted_until - time.monotonic()
        if muted > 0:
            await asyncio.sleep(muted)  # a quota throttle (KIP-219): read nothing meanwhile
            arrived = time.perf_counter()  # Kafka would not have read it before either
        started = time.perf_counter()
        try:
            header, offset = parse_request_header(frame)
        except Exception as exc:
            raise CloseConnection(f"unparseable request header: {exc}") from exc
        ctx = RequestContext(header, self.peer, self.connection_id, self.security)
        try:
            result = self._dispatch(ctx, frame, offset)
            if type(result) is Ordered:  # not isinstance: an ABC's check, per request
                result = await result
        except CloseConnection:
            raise
        except Exception as exc:
            raise CloseConnection(
                f"request api_key={header.api_key} v{header.api_version} "
                f"correlation_id={header.correlation_id} failed: {exc!r}"
            ) from exc
        close_after = self.security.close_after_response
        self._closing = close_after
        if _is_awaitable(result):
            task: asyncio.Future[Response] = (
                asyncio.get_running_loop().create_task(cast(Coroutine[Any, Any, Response], result))
                if type(result) is CoroutineType
                else asyncio.ensure_future(result)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            item = _Queued(header, task, close_after, ctx, arrived, started)
            if self._observe is not None:
                task.add_done_callback(item.mark_ready)
            await self._queue.put(item)
        else:
            ready = time.perf_counter()
            item = _Queued(
                header, cast(Response, result), close_after, ctx, arrived, started, ready
            )
            await self._queue.put(item)

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                self.busy_since = time.monotonic()
                if item is None or not await self._send(item):
                    return
                del item  # a finished future keeps its response alive while we wait
                self.busy_since = None
                self.last_active = time.monotonic()
        finally:
            self._writer_done.set()

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
        sending = time.perf_counter()
        if body is not None:
            await self._write(self._frame(item.header, body))
        if self._observe is not None and item.ctx is not None:
            sent = time.perf_counter()
            self._observe(item.ctx, _request_times(item, sending, sent, self._last_sent))
            self._last_sent = sent
        return not item.close_after

    @staticmethod
    def _frame(header: RequestHeader, body: EncodedBody | bytes) -> list[Part]:
        head = encode_response_header(header.correlation_id, header.api_key, header.api_version)
        if isinstance(body, EncodedBody):
            size = len(head) + body.size
            return [_FRAME_SIZE.pack(size) + head, *body.parts]
        return [_FRAME_SIZE.pack(len(head) + len(body)) + head, body]


def _is_awaitable(result: object) -> TypeGuard[Awaitable[Response]]:
    """``inspect.isawaitable``, answered by the type alone for the usual results
    (a coroutine, or a ready body): once per request, it was a visible cost."""
    kind = type(result)
    return kind is CoroutineType or (kind not in _READY_TYPES and inspect.isawaitable(result))


def _request_times(
    item: _Queued, sending: float, sent: float, previous_sent: float
) -> tuple[float, float, float, float, float, float]:
    """Kafka's RequestMetrics split of one request's life, in milliseconds.

    Kafka reads a connection's next request only once the previous response
    is sent (the channel is muted meanwhile), so its clock for a request
    starts no earlier than that. Headwater reads and handles pipelined
    requests at once; counting the wait behind an earlier long-polling Fetch
    would make a Metadata request look 500 ms slow where Kafka shows 1 ms.
    So the clock starts at the later of arrival and the previous response.
    """
    assert item.ctx is not None
    arrived = max(item.arrived, previous_sent)
    ready = item.ready or sending
    remote = item.ctx.remote_seconds
    local = max(0.0, ready - item.started - remote)
    return (
        max(0.0, item.started - arrived) * 1000,
        local * 1000,
        remote * 1000,
        max(0.0, sending - max(ready, arrived)) * 1000,
        (sent - sending) * 1000,
        (sent - arrived) * 1000,
    )
