"""Reads a non-blocking socket with its read-readiness watched once, not per recv.

asyncio's ``loop.sock_recv`` registers the socket with the selector when a
``recv`` would block and unregisters it once data came: two ``epoll_ctl``
calls and two selector-map updates for every request of a connection that
answers one request at a time (a replica fetcher, an ``acks=all`` producer).
Here the socket stays registered while the connection is read, so the
request/response rhythm costs one ``recv`` that would block and one wake-up.

Epoll is level-triggered: a socket with unread bytes wakes the loop on every
turn. When it wakes with nobody reading (the connection paused reading for
back-pressure), the watch is dropped, and the next read registers it again;
so a paused connection costs nothing, as with ``sock_recv``.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any


class SocketReader:
    """``recv`` and ``recv_into`` for one socket; ``close()`` before closing the socket."""

    __slots__ = ("_buf", "_fd", "_loop", "_size", "_sock", "_waiter", "_watching")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The read in progress: its future, and what it reads (a size or a buffer).
        self._waiter: asyncio.Future[Any] | None = None
        self._size = 0
        self._buf: bytearray | memoryview | None = None
        self._watching = False

    async def recv(self, size: int) -> bytes:
        """At most ``size`` bytes as they arrive; b"" once the peer closed."""
        try:
            return self._sock.recv(size)
        except (BlockingIOError, InterruptedError):
            pass
        data: bytes = await self._wait(size, None)
        return data

    async def recv_into(self, buf: bytearray | memoryview) -> int:
        """Bytes into ``buf``; 0 once the peer closed."""
        try:
            return self._sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            pass
        n: int = await self._wait(0, buf)
        return n

    def _wait(self, size: int, buf: bytearray | memoryview | None) -> asyncio.Future[Any]:
        """A future the readiness callback completes with the read itself.

        Reading in the callback (as ``sock_recv`` does) leaves no unread
        bytes behind to wake the loop a second time before the task runs.
        """
        if self._waiter is not None and not self._waiter.done():
            raise RuntimeError("another read is already waiting on this socket")
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        self._size, self._buf = size, buf
        if not self._watching:
            loop.add_reader(self._fd, self._on_readable)
            self._watching = True
        return waiter

    def _on_readable(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            # Nobody is reading (a paused or cancelled read): stop watching,
            # or level-triggered epoll wakes the loop on every turn.
            self._waiter = self._buf = None
            self._unwatch()
            return
        sock, buf = self._sock, self._buf
        try:
            result: bytes | int = sock.recv(self._size) if buf is None else sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            return
        except Exception as exc:
            self._waiter = self._buf = None
            waiter.set_exception(exc)
            return
        self._waiter = self._buf = None
        waiter.set_result(result)

    def _unwatch(self) -> None:
        if self._watching and self._loop is not None:
            self._watching = False
            self._loop.remove_reader(self._fd)

    def close(self) -> None:
        """Stop watching: the selector must forget the fd before the socket closes.

        Otherwise a new socket given the same fd number would be "modified"
        in epoll rather than added, and fail.
        """
        self._unwatch()
        waiter, self._waiter, self._buf = self._waiter, None, None
        if waiter is not None and not waiter.done():
            waiter.cancel()
