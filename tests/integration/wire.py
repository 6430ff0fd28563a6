"""A minimal blocking Kafka wire client for tests that need exact requests."""

from __future__ import annotations

import socket
import struct

from headwater.protocol.apis import API_FLEXIBLE_FROM, ApiKey
from headwater.protocol.fetch_codec import decode_fetch_response, encode_fetch_request
from headwater.protocol.fetch_types import FetchRequestData, FetchResponseData


class WireClient:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send one request and return the response body (header stripped)."""
        self.send_request(api_key, version, body)
        return self.read_response(api_key, version)

    def send_request(self, api_key: int, version: int, body: bytes) -> None:
        """Send one request without waiting (``read_response`` reads its answer)."""
        self.correlation += 1
        flexible = version >= API_FLEXIBLE_FROM.get(api_key, 10**6)
        client_id = b"wire-test"
        head = struct.pack(">hhih", api_key, version, self.correlation, len(client_id)) + client_id
        if flexible:
            head += b"\x00"
        frame = head + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def read_response(self, api_key: int, version: int) -> bytes:
        """The body (header stripped) of the answer to the last request sent."""
        flexible = version >= API_FLEXIBLE_FROM.get(api_key, 10**6)
        resp = self.read_frame()
        (corr,) = struct.unpack_from(">i", resp, 0)
        assert corr == self.correlation
        skip = 4
        if flexible and api_key != ApiKey.API_VERSIONS:
            skip += 1  # empty tagged fields of response header v1
        return resp[skip:]

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exact(4))[0]
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("closed by broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def fetch(self, req: FetchRequestData) -> FetchResponseData:
        body = self.request(ApiKey.FETCH, req.version, encode_fetch_request(req, req.version))
        return decode_fetch_response(body, 0, req.version)
