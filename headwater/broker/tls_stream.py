"""TLS over a non-blocking socket with ``ssl.SSLObject`` and memory BIOs.

The connection drives raw sockets itself (``SocketReader``, ``sendfile``),
so TLS is layered the sans-I/O way: ciphertext moves between the socket and
two ``MemoryBIO`` s, and ``SSLObject`` turns it into plaintext. Record data
cannot be ``sendfile``-d through TLS, so file slices are read into memory
(the chapter's "TLS turns zero-copy off"); to keep that copy cheap, parts are
gathered into large writes (fewer TLS records and syscalls) and the receive
buffer is reused.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Sequence
from typing import Any

from headwater.broker.socket_reader import SocketReader
from headwater.broker.socket_writer import Part, SocketWriter
from headwater.protocol.file_slice import FileSlice

#: Plaintext gathered per ``SSLObject.write``; 16 KiB TLS records are cut from it.
_WRITE_CHUNK = 256 * 1024
_RECV_SIZE = 256 * 1024


class TlsStream:
    """Server side of one TLS connection: ``handshake()``, then ``recv_into``/``write``."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._raw = SocketWriter(sock, zero_copy=False)
        self._reader = SocketReader(sock)
        self._recv_buf = bytearray(_RECV_SIZE)
        self._send_buf = bytearray(_WRITE_CHUNK)
        self._send_view = memoryview(self._send_buf)
        self._send_lock = asyncio.Lock()
        self.bytes_sent = 0

    async def handshake(self) -> None:
        """Raises ``ssl.SSLError`` (garbage, plaintext client) or ``ConnectionError`` (EOF)."""
        while True:
            try:
                self._ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise ConnectionError("peer closed during the TLS handshake") from None
        await self._flush()

    def close(self) -> None:
        """Stop watching the socket; called just before it is closed."""
        self._reader.close()

    def peer_certificate(self) -> dict[str, Any] | None:
        cert = self._ssl.getpeercert()
        return cert if cert else None

    @property
    def version(self) -> str | None:
        return self._ssl.version()

    async def _fill(self) -> bool:
        n = await self._reader.recv_into(self._recv_buf)
        if n == 0:
            self._incoming.write_eof()
            return False
        self._incoming.write(memoryview(self._recv_buf)[:n])
        return True

    async def _flush(self) -> None:
        async with self._send_lock:
            data = self._outgoing.read()
            if data:
                await self._raw.write([data])

    async def recv(self, size: int) -> bytes:
        """At most ``size`` plaintext bytes; b"" at a clean close or EOF."""
        while True:
            try:
                data: bytes = self._ssl.read(size)
                return data
            except ssl.SSLWantReadError:
                await self._flush()  # TLS 1.3 may have queued tickets or key updates
                if not await self._fill():
                    return b""
            except ssl.SSLZeroReturnError:
                return b""

    async def recv_into(self, buf: bytearray) -> int:
        """Plaintext into ``buf``; 0 at a clean close or EOF."""
        while True:
            try:
                n: int = self._ssl.read(len(buf), buf)  # type: ignore[assignment]
                return n
            except ssl.SSLWantReadError:
                await self._flush()  # TLS 1.3 may have queued tickets or key updates
                if not await self._fill():
                    return 0
            except ssl.SSLZeroReturnError:
                return 0

    async def write(self, parts: Sequence[Part]) -> None:
        """Gather parts into one reused plaintext buffer, encrypt it in large writes.

        File slices are read straight into the buffer (``os.preadv``), so record
        data is copied once into user space and once by the cipher.
        """
        buf, view = self._send_buf, self._send_view
        filled = 0
        for part in parts:
            if isinstance(part, FileSlice):
                fd, position, remaining = part.fileno(), part.position, part.size
                while remaining:
                    if filled == len(buf):
                        await self._encrypt_and_send(view[:filled])
                        filled = 0
                    want = min(remaining, len(buf) - filled)
                    n = os.preadv(fd, [view[filled : filled + want]], position)
                    if n <= 0:
                        raise ConnectionError("segment file shorter than the slice")
                    filled += n
                    position += n
                    remaining -= n
                continue
            data = memoryview(part).cast("B")
            while data:
                if filled == len(buf):
                    await self._encrypt_and_send(view[:filled])
                    filled = 0
                n = min(len(data), len(buf) - filled)
                view[filled : filled + n] = data[:n]
                filled += n
                data = data[n:]
        if filled:
            await self._encrypt_and_send(view[:filled])

    async def _encrypt_and_send(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            n = self._ssl.write(view)
            view = view[n:]
        self.bytes_sent += len(data)
        await self._flush()
