"""BrokerConnection on real sockets: version negotiation, pipelining, broken streams.

Most tests talk to a tiny scripted server (real asyncio sockets, Headwater's
own codec) that plays an older or misbehaving broker; the pipelining test
uses a real broker process.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from headwater.client.connection import BrokerConnection
from headwater.client.errors import KafkaConnectionError, KafkaError
from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_types import ZERO_UUID, FetchRequestData, PartitionFetch
from headwater.protocol.header import (
    RequestHeader,
    encode_api_versions_error,
    encode_response_header,
    parse_request_header,
)
from headwater.protocol.messages import build_response, encode_response
from tests.integration.broker_process import BrokerProcess

# An "old broker": ApiVersions up to v2, Metadata up to v5, Fetch 4-11.
OLD_TABLE = {ApiKey.API_VERSIONS: (0, 2), ApiKey.METADATA: (0, 5), ApiKey.FETCH: (4, 11)}

Script = Callable[[RequestHeader, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request; returns False to stop reading."""


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _answer_api_versions(header: RequestHeader, writer: asyncio.StreamWriter) -> None:
    if header.api_version > OLD_TABLE[ApiKey.API_VERSIONS][1]:
        writer.write(encode_api_versions_error(header.correlation_id, OLD_TABLE))  # type: ignore[arg-type]
        return
    body = encode_response(
        build_response(
            ApiKey.API_VERSIONS,
            header.api_version,
            {
                "error_code": 0,
                "api_keys": [
                    {"api_key": k, "min_version": lo, "max_version": hi}
                    for k, (lo, hi) in OLD_TABLE.items()
                ],
            },
        )
    )
    head = encode_response_header(header.correlation_id, ApiKey.API_VERSIONS, header.api_version)
    writer.write(_frame(head + body))


@asynccontextmanager
async def scripted_broker(
    script: Script | None = None,
) -> AsyncIterator[tuple[int, list[RequestHeader]]]:
    """A server that answers ApiVersions like OLD_TABLE and hands anything else to ``script``."""
    seen: list[RequestHeader] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                header, _ = parse_request_header(await reader.readexactly(size))
                seen.append(header)
                if header.api_key == ApiKey.API_VERSIONS:
                    await _answer_api_versions(header, writer)
                elif script is None or not await script(header, writer):
                    break
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, seen
    finally:
        server.close()
        await server.wait_closed()


def test_api_versions_falls_back_on_error_35_and_picks_the_lower_max_per_api() -> None:
    async def go() -> None:
        async with scripted_broker() as (port, seen):
            conn = await BrokerConnection.open("127.0.0.1", port)
            try:
                assert [h.api_version for h in seen] == [4, 2]
                assert conn.versions[ApiKey.METADATA] == 5
                assert conn.versions[ApiKey.FETCH] == 11
                assert ApiKey.PRODUCE not in conn.versions
                with pytest.raises(KafkaError) as info:
                    conn.version(ApiKey.PRODUCE)
                assert info.value.name == "UNSUPPORTED_VERSION"
            finally:
                conn.close()

    asyncio.run(go())


def test_disconnect_fails_requests_in_flight_with_a_clear_error() -> None:
    async def hang_up(header: RequestHeader, writer: asyncio.StreamWriter) -> bool:
        return False  # read the request, then close without answering

    async def go() -> None:
        async with scripted_broker(hang_up) as (port, _):
            conn = await BrokerConnection.open("127.0.0.1", port)
            with pytest.raises(KafkaConnectionError) as info:
                await conn.request(ApiKey.METADATA, {"topics": None})
            assert "closed by the broker with 1 request(s) in flight" in str(info.value)
            assert conn.closed
            with pytest.raises(KafkaConnectionError):
                await conn.request(ApiKey.METADATA, {"topics": None})

    asyncio.run(go())


def test_a_response_with_the_wrong_correlation_id_closes_the_connection() -> None:
    async def wrong_id(header: RequestHeader, writer: asyncio.StreamWriter) -> bool:
        writer.write(_frame(struct.pack(">i", header.correlation_id + 1000) + b"\x00" * 16))
        return True

    async def go() -> None:
        async with scripted_broker(wrong_id) as (port, _):
            conn = await BrokerConnection.open("127.0.0.1", port)
            with pytest.raises(KafkaConnectionError) as info:
                await conn.request(ApiKey.METADATA, {"topics": None})
            assert "expected" in str(info.value) and conn.closed

    asyncio.run(go())


def test_unreachable_broker_is_a_connection_error() -> None:
    async def go() -> None:
        async with scripted_broker() as (port, _):
            pass  # closed again: nothing listens on port
        with pytest.raises(KafkaConnectionError) as info:
            await BrokerConnection.open("127.0.0.1", port)
        assert info.value.name == "NETWORK_EXCEPTION"

    asyncio.run(go())


def test_requests_pipeline_behind_a_long_polling_fetch(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()

    async def go() -> None:
        conn = await BrokerConnection.open("127.0.0.1", broker.port)
        try:
            await conn.request(
                ApiKey.CREATE_TOPICS,
                {
                    "topics": [{"name": "quiet", "num_partitions": 1, "replication_factor": 1}],
                    "timeout": 10_000,
                },
            )
            loop = asyncio.get_running_loop()
            started = loop.time()
            fetch = conn.send_fetch(
                FetchRequestData(
                    version=min(conn.versions[ApiKey.FETCH], 12),  # by name, not topic id
                    max_wait_ms=800,
                    min_bytes=1,
                    partitions=[PartitionFetch(ZERO_UUID, "quiet", 0, 0)],
                )
            )
            metadata = asyncio.ensure_future(conn.request(ApiKey.METADATA, {"topics": None}))
            await asyncio.sleep(0)  # let the metadata task write its request
            assert conn.in_flight == 2
            response = await conn.wait(fetch, 800)
            assert [p.partition for p in response.partitions] == [0]
            meta = await metadata
            assert "quiet" in {t.name for t in meta.topics}
            # In-order answers: the metadata waited for the long poll ahead of it.
            assert loop.time() - started >= 0.7
        finally:
            conn.close()

    try:
        asyncio.run(go())
    finally:
        broker.stop()
