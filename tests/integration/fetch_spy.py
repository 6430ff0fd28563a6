"""A TCP proxy that decodes every Fetch passing between a client and the broker.

Lets a test assert what a real client and the broker actually said on the
wire (session ids, epochs, partition counts both ways) without trusting
either side's own bookkeeping.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field

from headwater.protocol.apis import API_FLEXIBLE_FROM, ApiKey
from headwater.protocol.fetch_codec import decode_fetch_request, decode_fetch_response
from headwater.protocol.header import parse_request_header


@dataclass
class FetchExchange:
    version: int
    session_id: int
    epoch: int
    request_partitions: int
    forgotten: int
    response_error: int = -1
    response_session_id: int = -1
    response_partitions: int = -1
    response_records: int = 0


@dataclass
class FetchSpy:
    """Listens on an ephemeral port and forwards to ``upstream``."""

    upstream: tuple[str, int]
    exchanges: list[FetchExchange] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._pending: dict[int, tuple[int, int, FetchExchange | None]] = {}
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop = True
        self._server.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            pending: dict[int, tuple[int, int, FetchExchange | None]] = {}
            threading.Thread(
                target=self._pump, args=(client, upstream, pending, True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(upstream, client, pending, False), daemon=True
            ).start()

    @staticmethod
    def _read_exact(sock: socket.socket, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = sock.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _pump(
        self,
        src: socket.socket,
        dst: socket.socket,
        pending: dict[int, tuple[int, int, FetchExchange | None]],
        requests: bool,
    ) -> None:
        try:
            while True:
                head = self._read_exact(src, 4)
                if head is None:
                    break
                body = self._read_exact(src, struct.unpack(">i", head)[0])
                if body is None:
                    break
                if requests:
                    self._on_request(memoryview(body), pending)
                else:
                    self._on_response(body, pending)
                dst.sendall(head + body)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _on_request(
        self, frame: memoryview, pending: dict[int, tuple[int, int, FetchExchange | None]]
    ) -> None:
        header, offset = parse_request_header(frame)
        ex = None
        if header.api_key == ApiKey.FETCH:
            req = decode_fetch_request(frame, offset, header.api_version)
            ex = FetchExchange(
                header.api_version,
                req.session_id,
                req.session_epoch,
                len(req.partitions),
                len(req.forgotten),
            )
            with self._lock:
                self.exchanges.append(ex)
        pending[header.correlation_id] = (header.api_key, header.api_version, ex)

    def _on_response(
        self, frame: bytes, pending: dict[int, tuple[int, int, FetchExchange | None]]
    ) -> None:
        (correlation,) = struct.unpack_from(">i", frame, 0)
        _api_key, version, ex = pending.pop(correlation, (-1, -1, None))
        if ex is None:
            return
        offset = 4 + (1 if version >= API_FLEXIBLE_FROM[ApiKey.FETCH] else 0)
        resp = decode_fetch_response(frame, offset, version)
        ex.response_error = resp.error_code
        ex.response_session_id = resp.session_id
        ex.response_partitions = len(resp.partitions)
        ex.response_records = sum(1 for p in resp.partitions if p.records)
