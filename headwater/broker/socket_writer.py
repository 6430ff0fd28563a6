"""Writes response parts to a non-blocking socket, file slices by ``sendfile``.

asyncio's ``loop.sendfile`` first waits for the transport's buffer to drain
on every call and uvloop does not implement it at all, so Headwater drives
the socket itself: ``socket.send`` for bytes and ``os.sendfile`` for
``FileSlice`` parts, parking on ``loop.add_writer`` only when the kernel
buffer is full. This works on both event loops and keeps record data out of
the Python heap (the chapter's zero-copy path).

A fetch response is bytes, file slices and bytes again (each partition's and
topic's tagged fields come after its records). ``sendfile`` pushes what it
sends at once, so the last few bytes used to leave as a segment of their own,
and the fetcher woke twice per response. A response that has bytes after a
slice is therefore sent with ``TCP_CORK`` set, and uncorking pushes it whole.

Small slices are copied instead (issue 33, item 3): a follower fetch at a
modest rate carries a batch or two, and for a kilobyte ``sendfile`` plus the
cork's two ``setsockopt`` calls and a separate send of the header cost more
than one ``pread`` and one ``send`` of the joined response (about 3 µs of
some 25 per response here; the loopback transmit itself stays, it only moves
from the uncork to the ``send``). The wire bytes are the same either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
from collections.abc import Sequence

from headwater.log import disk_io
from headwater.protocol.file_slice import FileSlice

Part = bytes | bytearray | memoryview | FileSlice

#: Byte parts smaller than this are joined before sending: one syscall
#: instead of several for the many small headers of a fetch response.
_COALESCE = 64 * 1024

#: A response whose file slices hold at most this many bytes in all (a page)
#: is copied and sent with one ``send``; larger ones go by ``sendfile``.
COPY_SLICES_UP_TO = 4096


class SocketWriter:
    """Sends parts in order; ``zero_copy=False`` reads slices into memory instead."""

    def __init__(self, sock: socket.socket, *, zero_copy: bool = True) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self.zero_copy = zero_copy
        self.bytes_sent = 0
        #: False once the socket refused TCP_CORK (not TCP: a Unix socket in tests).
        self._can_cork = sock.family in (socket.AF_INET, socket.AF_INET6)

    async def write(self, parts: Sequence[Part]) -> None:
        if self.zero_copy and _small_slices(parts):
            await self._write(parts, copy=True)
            return
        cork = self.zero_copy and self._can_cork and _bytes_after_a_slice(parts)
        if cork:
            try:
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            except OSError:
                self._can_cork = cork = False
        try:
            await self._write(parts, copy=not self.zero_copy)
        finally:
            if cork:
                with contextlib.suppress(OSError):  # the connection may be gone
                    self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)

    async def _write(self, parts: Sequence[Part], *, copy: bool) -> None:
        """Send the parts in order; ``copy``: slices read into memory, not ``sendfile``."""
        pending: list[bytes | bytearray | memoryview] = []
        pending_size = 0
        for part in parts:
            if isinstance(part, FileSlice):
                if copy:
                    data = _read_slice(part)
                    if len(data) != part.size:
                        raise ConnectionError("segment file shorter than the slice")
                    pending.append(data)
                    pending_size += len(data)
                    continue
                if pending:
                    await self._send_bytes(b"".join(pending), more=True)
                    pending, pending_size = [], 0
                await self._sendfile(part)
            else:
                pending.append(part)
                pending_size += len(part)
                if pending_size >= _COALESCE:
                    await self._send_bytes(b"".join(pending), more=False)
                    pending, pending_size = [], 0
        if pending:
            await self._send_bytes(b"".join(pending), more=False)

    async def _wait_writable(self) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_writer(self._fd, ready)
        try:
            await fut
        finally:
            loop.remove_writer(self._fd)

    async def _send_bytes(self, data: bytes | bytearray | memoryview, *, more: bool) -> None:
        view = memoryview(data)
        flags = socket.MSG_MORE if more else 0
        while view:
            try:
                n = self._sock.send(view, flags)
            except (BlockingIOError, InterruptedError):
                await self._wait_writable()
                continue
            view = view[n:]
            self.bytes_sent += n

    async def _sendfile(self, part: FileSlice) -> None:
        offset, remaining = part.position, part.size
        in_fd = part.fileno()
        while remaining > 0:
            try:
                _check_disk(part)
                n = os.sendfile(self._fd, in_fd, offset, remaining)
            except (BlockingIOError, InterruptedError):
                await self._wait_writable()
                continue
            except OSError as exc:
                _tell_read_error(part, exc)
                raise
            if n == 0:
                raise ConnectionError("segment file shorter than the slice")
            offset += n
            remaining -= n
            self.bytes_sent += n


def _small_slices(parts: Sequence[Part]) -> bool:
    """Whether the parts hold file slices of at most ``COPY_SLICES_UP_TO`` bytes in all."""
    seen, total = False, 0
    for part in parts:
        if isinstance(part, FileSlice):
            seen, total = True, total + part.size
            if total > COPY_SLICES_UP_TO:
                return False
    return seen


def _bytes_after_a_slice(parts: Sequence[Part]) -> bool:
    """Whether bytes follow a file slice: what ``sendfile`` alone would send apart."""
    seen_slice = False
    for part in parts:
        if isinstance(part, FileSlice):
            seen_slice = True
        elif seen_slice and len(part):
            return True
    return False


def _check_disk(part: FileSlice) -> None:
    """The disk_io test seam, for reads made by ``sendfile`` (the log's own reads go
    through it in headwater.log)."""
    if disk_io.FAULTS.active and (path := getattr(part.file, "path", None)):
        disk_io.FAULTS.check(path)


def _tell_read_error(part: FileSlice, exc: OSError) -> None:
    """EIO is the segment file failing (a socket fails otherwise: EPIPE, ECONNRESET):
    the log is told, and its directory goes offline (KIP-112), as for any read."""
    if exc.errno == errno.EIO and part.on_read_error is not None:
        part.on_read_error(exc)


def _read_slice(part: FileSlice) -> bytes:
    """A slice copied into memory (zero-copy off: TLS), failures told as ``sendfile``'s."""
    try:
        _check_disk(part)
        return part.read()
    except OSError as exc:
        _tell_read_error(part, exc)
        raise
