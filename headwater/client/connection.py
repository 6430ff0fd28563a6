"""One asyncio connection to a broker: version negotiation and pipelined requests.

Requests are written as soon as they are made and answered in order, so
several may be in flight (a long-polling Fetch, then a Metadata, then a
Produce). Each request gets a correlation id; the response at the head of
the stream must carry the id of the oldest request still waiting, or the
stream is broken and the connection is closed, as Kafka's clients do.

``send`` is synchronous on purpose: it writes the request before
returning a future, so the consumer can put its next Fetch on the wire
before ``poll()`` hands the current records to the application.

Cold APIs go through kio's entities (``headwater.protocol.messages``);
Fetch and Produce through the hand-written codecs, which keep record bytes
out of per-field objects.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from kio.static.protocol import Entity

from headwater import __version__
from headwater.client.errors import (
    UNSUPPORTED_VERSION,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
)
from headwater.protocol.apis import SUPPORTED, ApiKey
from headwater.protocol.errors import ProtocolError
from headwater.protocol.fetch_codec import decode_fetch_response, encode_fetch_request
from headwater.protocol.fetch_types import FetchRequestData, FetchResponseData
from headwater.protocol.frame import FrameDecoder
from headwater.protocol.header import RequestHeader, encode_request_header, parse_response_header
from headwater.protocol.messages import build_request, decode_response, encode_request
from headwater.protocol.produce_codec import (
    ProduceRequestData,
    ProduceResponseData,
    decode_produce_response,
    encode_produce_request,
)
from headwater.protocol.wire import INT16, INT32
from headwater.security.client_security import ClientSecurity, authenticate
from headwater.security.errors import SaslAuthenticationError

log = logging.getLogger(__name__)

SASL_AUTHENTICATION_FAILED: Final = 58

T = TypeVar("T")

#: A response larger than this is treated as a broken stream (librdkafka's
#: receive.message.max.bytes plays the same role).
DEFAULT_MAX_RESPONSE_BYTES: Final = 1 << 30
CLIENT_SOFTWARE_NAME: Final = "headwater-python"

#: A request body up to this size leaves in one write with its header. Two
#: writes are two TCP segments (Nagle is off), and the broker, woken by the
#: first, holds half a request and is woken again: on loopback that was a
#: second send and a second broker wake-up for every follower fetch. A larger
#: body is not copied to save that.
JOIN_REQUEST_BELOW: Final = 256 * 1024

Decoder = Callable[[memoryview, int, int], Any]
"""(frame, body offset, version) -> decoded response."""


@dataclass(slots=True)
class _Pending:
    correlation_id: int
    api_key: int
    version: int
    decode: Decoder
    future: asyncio.Future[Any]


def _decode_entity(api_key: int) -> Decoder:
    def decode(frame: memoryview, pos: int, version: int) -> Entity:
        return decode_response(api_key, version, frame, pos)

    return decode


def _decode_fetch(frame: memoryview, pos: int, version: int) -> FetchResponseData:
    return decode_fetch_response(frame, pos, version)


def _decode_fetch_views(frame: memoryview, pos: int, version: int) -> FetchResponseData:
    return decode_fetch_response(frame, pos, version, record_views=True)


def _decode_produce(frame: memoryview, pos: int, version: int) -> ProduceResponseData:
    return decode_produce_response(frame, pos, version)


def _fail_quietly(future: asyncio.Future[Any], error: BaseException) -> None:
    """Fail ``future`` without asyncio's "exception never retrieved" warning.

    A waiter that gave up (timeout, cancelled consumer fetch) leaves its
    future behind; its failure at close is expected, not a lost error.
    Anyone still awaiting it gets the exception as usual.
    """
    if not future.done():
        future.set_exception(error)
        future.exception()


#: The buffer small responses and the first bytes of large ones are received
#: into; the rest of a large response goes straight into its own frame.
RECEIVE_CHUNK: Final = 64 * 1024


class _StreamProtocol(asyncio.BufferedProtocol):
    """Receives into the connection's buffers; tracks write back-pressure."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.conn._receive_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.conn._buffer_updated(nbytes)

    def connection_lost(self, exc: Exception | None) -> None:
        self.can_write.set()
        self.conn._lost(exc)

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()


class BrokerConnection:
    """A connected, version-negotiated link to one broker.

    Make one with ``await BrokerConnection.open(host, port, ...)``. After
    ``close`` or a disconnect every waiting request fails with
    ``KafkaConnectionError`` and new requests fail at once.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "headwater",
        node_id: int = -1,
        request_timeout_ms: int = 30_000,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.node_id = node_id
        self.request_timeout_ms = request_timeout_ms
        self.versions: dict[int, int] = {}  # api key -> version this link uses
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._decoder = FrameDecoder(max_response_bytes, min_frame_bytes=4, preallocate=True)
        self._chunk = memoryview(bytearray(RECEIVE_CHUNK))
        self._into_frame = False
        self._pending: collections.deque[_Pending] = collections.deque()
        self._correlation = 0
        self._protocol: _StreamProtocol | None = None
        self._closed_error: KafkaConnectionError | None = None
        self.on_close: Callable[[BrokerConnection], None] | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str = "headwater",
        node_id: int = -1,
        request_timeout_ms: int = 30_000,
        connect_timeout_s: float = 10.0,
        security: ClientSecurity | None = None,
    ) -> BrokerConnection:
        """Connect (TLS if ``security`` says so), negotiate API versions, authenticate
        (SASL); raises ``KafkaConnectionError`` or ``KafkaError``."""
        conn = cls(
            host, port, client_id=client_id, node_id=node_id, request_timeout_ms=request_timeout_ms
        )
        loop = asyncio.get_running_loop()
        tls = security.ssl_context if security is not None and security.uses_tls else None
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation
            # that arrives as the connect fails, and a stopped replica fetcher whose
            # leader refuses connections then retried forever (its stop never ended).
            async with asyncio.timeout(connect_timeout_s):
                _, protocol = await loop.create_connection(
                    lambda: _StreamProtocol(conn),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except (OSError, TimeoutError) as exc:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        conn._protocol = protocol
        try:
            await conn._negotiate_versions()
            if security is not None and security.uses_sasl:
                try:
                    await authenticate(security, conn.request)
                except SaslAuthenticationError as exc:
                    raise KafkaError(SASL_AUTHENTICATION_FAILED, str(exc)) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    # -- state -------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed_error is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def close(self, reason: str = "closed by the client") -> None:
        """Close the socket and fail every waiting request."""
        if self._closed_error is None:
            self._fail_all(KafkaConnectionError(f"connection to {self.host}:{self.port} {reason}"))
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()

    def _fail_all(self, error: KafkaConnectionError) -> None:
        self._closed_error = error
        pending, self._pending = self._pending, collections.deque()
        for p in pending:
            _fail_quietly(p.future, error)
        if self.on_close is not None:
            callback, self.on_close = self.on_close, None
            callback(self)

    def _lost(self, exc: Exception | None) -> None:
        if self._closed_error is None:
            reason = f"lost ({exc})" if exc else "closed by the broker"
            if self._pending:
                reason += f" with {len(self._pending)} request(s) in flight"
            self._fail_all(KafkaConnectionError(f"connection to {self.host}:{self.port} {reason}"))

    # -- versions ----------------------------------------------------------------

    def version(self, api_key: int, highest: int | None = None) -> int:
        """The version to use for ``api_key`` (at most ``highest``); raises if none fits."""
        ours_low, ours_high = SUPPORTED[ApiKey(api_key)]
        if highest is not None:
            ours_high = min(ours_high, highest)
        theirs = self.broker_versions.get(api_key)
        if theirs is None:
            raise KafkaError(
                UNSUPPORTED_VERSION,
                f"broker {self.host}:{self.port} does not support api {api_key}",
            )
        low, high = max(ours_low, theirs[0]), min(ours_high, theirs[1])
        if low > high:
            raise KafkaError(
                UNSUPPORTED_VERSION,
                f"no common version of api {api_key}: client {ours_low}-{ours_high}, "
                f"broker {theirs[0]}-{theirs[1]}",
            )
        return high

    async def _negotiate_versions(self) -> None:
        """ApiVersions at our highest version; on error 35 retry at the broker's highest."""
        version = SUPPORTED[ApiKey.API_VERSIONS][1]
        for _ in range(3):
            body = encode_request(
                build_request(
                    ApiKey.API_VERSIONS,
                    version,
                    {
                        "client_software_name": CLIENT_SOFTWARE_NAME,
                        "client_software_version": __version__,
                    },
                )
            )
            frame, pos = await self._wait(self._send_raw(ApiKey.API_VERSIONS, version, body))
            error = INT16.unpack_from(frame, pos)[0]
            # An unsupported version is answered with a v0 body whatever we sent.
            decoded: Any = decode_response(
                ApiKey.API_VERSIONS, 0 if error == UNSUPPORTED_VERSION else version, frame, pos
            )
            table = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in decoded.api_keys
            }
            if error == UNSUPPORTED_VERSION:
                low, high = table.get(ApiKey.API_VERSIONS, (0, 0))
                retry = min(version - 1, high)
                if retry < low or retry < 0:
                    break
                version = retry
                continue
            if error:
                raise KafkaError(error, "ApiVersions failed")
            self.broker_versions = table
            for key in ApiKey:
                if key in table:
                    with contextlib.suppress(KafkaError):
                        self.versions[key] = self.version(key)
            return
        raise KafkaError(UNSUPPORTED_VERSION, "no ApiVersions version in common with the broker")

    # -- requests ----------------------------------------------------------------

    def _next_correlation_id(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        return self._correlation

    def _write(self, api_key: int, version: int, correlation_id: int, body: bytes) -> None:
        if self._closed_error is not None:
            raise KafkaConnectionError(self._closed_error.message)
        assert self._protocol is not None and self._protocol.transport is not None
        header = encode_request_header(
            RequestHeader(api_key, version, correlation_id, self.client_id)
        )
        transport = self._protocol.transport
        prefix = INT32.pack(len(header) + len(body)) + header
        if len(body) <= JOIN_REQUEST_BELOW:
            transport.write(b"".join((prefix, body)))
        else:
            transport.write(prefix)
            transport.write(body)

    def send(
        self,
        api_key: int,
        version: int,
        body: bytes,
        decode: Decoder,
        *,
        expect_response: bool = True,
    ) -> asyncio.Future[Any]:
        """Write one request now; the future resolves to ``decode``'s result.

        With ``expect_response=False`` (Produce acks=0) the future resolves
        to None once written: the broker will not answer.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        correlation_id = self._next_correlation_id()
        self._write(api_key, version, correlation_id, body)
        if expect_response:
            self._pending.append(_Pending(correlation_id, api_key, version, decode, future))
        else:
            future.set_result(None)
        return future

    def _send_raw(self, api_key: int, version: int, body: bytes) -> asyncio.Future[Any]:
        return self.send(api_key, version, body, lambda frame, pos, _v: (frame, pos))

    async def _wait(self, future: asyncio.Future[T], extra_ms: int = 0) -> T:
        """Await a response; a timeout breaks the stream, so it closes the connection."""
        timeout = (self.request_timeout_ms + extra_ms) / 1000
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            self.close(f"timed out after {timeout:.1f} s waiting for a response")
            raise KafkaTimeoutError(
                f"no response from {self.host}:{self.port} within {timeout:.1f} s"
            ) from None

    def writable(self) -> asyncio.Event:
        """Set while the socket's send buffer is below its high-water mark."""
        assert self._protocol is not None
        return self._protocol.can_write

    # -- typed helpers -----------------------------------------------------------

    async def request(
        self, api_key: int, data: Mapping[str, Any], version: int | None = None
    ) -> Any:
        """A cold-API round trip: ``data`` as a dict shaped like the request schema."""
        v = self.version(api_key) if version is None else version
        body = encode_request(build_request(api_key, v, data))
        return await self._wait(self.send(api_key, v, body, _decode_entity(api_key)))

    def send_fetch(
        self, req: FetchRequestData, *, record_views: bool = False
    ) -> asyncio.Future[FetchResponseData]:
        """Write a FetchRequest at ``req.version``; the response is decoded on arrival.

        ``record_views``: records as views into the response frame, not copies
        (a replica fetcher, which writes them to its log at once).
        """
        body = encode_fetch_request(req, req.version)
        decode = _decode_fetch_views if record_views else _decode_fetch
        return self.send(ApiKey.FETCH, req.version, body, decode)

    async def fetch(
        self, req: FetchRequestData, *, record_views: bool = False
    ) -> FetchResponseData:
        response: FetchResponseData = await self._wait(
            self.send_fetch(req, record_views=record_views), req.max_wait_ms
        )
        return response

    def send_produce(
        self, req: ProduceRequestData, version: int
    ) -> asyncio.Future[ProduceResponseData | None]:
        body = encode_produce_request(req, version)
        return self.send(
            ApiKey.PRODUCE, version, body, _decode_produce, expect_response=req.acks != 0
        )

    async def wait(self, future: asyncio.Future[T], extra_ms: int = 0) -> T:
        """Await a future from ``send*`` with the request timeout."""
        return await self._wait(future, extra_ms)

    # -- receiving ---------------------------------------------------------------

    def _receive_buffer(self) -> memoryview:
        direct = self._decoder.receive_buffer()
        self._into_frame = direct is not None
        return self._chunk if direct is None else direct

    def _buffer_updated(self, nbytes: int) -> None:
        if self._into_frame:
            self._frames_received(self._decoder.received(nbytes))
        else:
            self._data_received(self._chunk[:nbytes])

    def _data_received(self, data: bytes | memoryview) -> None:
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            self.close(f"sent an invalid frame: {exc}")
            return
        self._frames_received(frames)

    def _frames_received(self, frames: list[memoryview]) -> None:
        for frame in frames:
            if not self._pending:
                self.close("sent a response nobody asked for")
                return
            head = self._pending.popleft()
            try:
                correlation_id, pos = parse_response_header(frame, head.api_key, head.version)
            except ProtocolError as exc:
                _fail_quietly(head.future, exc)
                self.close(f"sent a bad response header: {exc}")
                return
            if correlation_id != head.correlation_id:
                self._pending.appendleft(head)
                self.close(
                    f"answered correlation id {correlation_id}, expected {head.correlation_id}"
                )
                return
            if head.future.done():  # the waiter gave up; the stream stays in sync
                continue
            try:
                result = head.decode(frame, pos, head.version)
            except Exception as exc:  # a bad body fails this request only
                _fail_quietly(head.future, exc)
            else:
                head.future.set_result(result)
