"""A request leaves the client in one write with its header, unless its body is large."""

from __future__ import annotations

import asyncio

import pytest

from headwater.client.connection import JOIN_REQUEST_BELOW, BrokerConnection
from headwater.protocol.apis import ApiKey
from headwater.protocol.header import RequestHeader, encode_request_header
from headwater.protocol.wire import INT32


class RecordingTransport:
    """Stands in for asyncio's transport: what the connection writes, write by write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))


class StubProtocol:
    def __init__(self) -> None:
        self.transport = RecordingTransport()


def connection() -> tuple[BrokerConnection, RecordingTransport]:
    conn = BrokerConnection("127.0.0.1", 9092, client_id="writes-test")
    protocol = StubProtocol()
    conn._protocol = protocol  # type: ignore[assignment]
    return conn, protocol.transport


def frame(correlation_id: int, body: bytes) -> bytes:
    header = encode_request_header(RequestHeader(ApiKey.FETCH, 12, correlation_id, "writes-test"))
    return INT32.pack(len(header) + len(body)) + header + body


@pytest.mark.parametrize("size", [0, 90, JOIN_REQUEST_BELOW])
def test_a_request_up_to_the_limit_is_one_write(size: int) -> None:
    """Two writes were two TCP segments: the broker woke for half a request."""
    conn, transport = connection()
    body = bytes(range(256)) * (size // 256) + b"f" * (size % 256)

    async def send() -> None:
        conn.send(ApiKey.FETCH, 12, body, lambda frame, pos, version: None)

    asyncio.run(send())
    assert transport.writes == [frame(1, body)]


def test_a_large_body_is_not_copied_to_join_its_header() -> None:
    conn, transport = connection()
    body = b"p" * (JOIN_REQUEST_BELOW + 1)

    async def send() -> None:
        conn.send(ApiKey.FETCH, 12, body, lambda frame, pos, version: None)

    asyncio.run(send())
    assert len(transport.writes) == 2
    assert b"".join(transport.writes) == frame(1, body)
    assert transport.writes[1] == body
