"""SocketReader: reads as sock_recv does, with the socket registered once per connection."""

from __future__ import annotations

import asyncio
import os
import selectors
import socket
import struct
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from headwater.broker.socket_reader import SocketReader

T = TypeVar("T")
Pair = tuple[socket.socket, socket.socket]
Selector = selectors.BaseSelector


@pytest.fixture
def pair() -> Iterator[Pair]:
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


class CountingSelector(selectors.EpollSelector):
    """Counts changes to one fd's registration: the epoll_ctl calls sock_recv pays per read."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.changes = 0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        self.changes += fileobj == self.fd
        return super().register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        self.changes += fileobj == self.fd
        return super().unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        self.changes += fileobj == self.fd
        return super().modify(fileobj, events, data)


def run(factory: Callable[[], Coroutine[Any, Any, T]], selector: Selector | None = None) -> T:
    loop = asyncio.SelectorEventLoop(selector)
    try:
        return loop.run_until_complete(factory())
    finally:
        loop.close()


def test_request_response_rounds_register_the_socket_once(pair: Pair) -> None:
    a, b = pair
    selector = CountingSelector(a.fileno())

    async def rounds() -> list[bytes]:
        reader = SocketReader(a)
        loop = asyncio.get_running_loop()
        got = []
        for i in range(50):
            loop.call_later(0.001, b.send, f"request {i}".encode())
            got.append(await reader.recv(1024))
        reader.close()
        return got

    got = run(rounds, selector)
    assert got == [f"request {i}".encode() for i in range(50)]
    # One register and one unregister for the whole connection, where
    # sock_recv pays two per request that had to wait.
    assert selector.changes == 2


def test_recv_into_fills_the_buffer_and_sees_the_end(pair: Pair) -> None:
    a, b = pair

    async def read() -> tuple[int, bytes, int]:
        reader = SocketReader(a)
        buf = bytearray(16)
        loop = asyncio.get_running_loop()
        loop.call_later(0.001, b.send, b"hello")
        n = await reader.recv_into(buf)
        loop.call_later(0.001, b.shutdown, socket.SHUT_WR)
        end = await reader.recv_into(buf)
        reader.close()
        return n, bytes(buf[:n]), end

    assert run(read) == (5, b"hello", 0)


def test_a_paused_reader_stops_watching_and_reads_what_waited(pair: Pair) -> None:
    """Back-pressure: bytes arrive while nobody reads; the loop must not keep waking on them."""
    a, b = pair
    selector = CountingSelector(a.fileno())

    async def paused() -> tuple[bytes, int]:
        reader = SocketReader(a)
        loop = asyncio.get_running_loop()
        loop.call_later(0.001, b.send, b"first")
        assert await reader.recv(1024) == b"first"
        b.send(b"second")  # still watched; nobody reads for a few turns
        for _ in range(5):
            await asyncio.sleep(0)
        changes = selector.changes
        data = await reader.recv(1024)
        reader.close()
        return data, changes

    data, changes = run(paused, selector)
    assert data == b"second"
    # Registered for the first read, dropped on the first wake with no reader.
    assert changes == 2


def test_a_peer_reset_reaches_the_waiting_reader() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        accepted.setblocking(False)

        async def reset() -> None:
            reader = SocketReader(accepted)
            # Closing with a zero linger sends RST instead of FIN.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            asyncio.get_running_loop().call_later(0.001, client.close)
            try:
                with pytest.raises(ConnectionResetError):
                    await reader.recv(1024)
            finally:
                reader.close()

        try:
            run(reset)
        finally:
            accepted.close()
            client.close()


def test_close_forgets_the_fd_so_a_new_socket_with_its_number_can_be_read(pair: Pair) -> None:
    a, _ = pair

    async def reuse() -> bytes:
        reader = SocketReader(a)
        task = asyncio.ensure_future(reader.recv(1024))
        await asyncio.sleep(0)  # now waiting, the fd registered
        reader.close()
        with pytest.raises(asyncio.CancelledError):
            await task
        fd = a.fileno()
        a.close()
        c, d = socket.socketpair()
        if c.fileno() == fd:
            again = c
        else:  # a new socket under the old number
            os.dup2(c.fileno(), fd)
            c.close()
            again = socket.socket(fileno=fd)
        try:
            again.setblocking(False)
            second = SocketReader(again)
            asyncio.get_running_loop().call_later(0.001, d.send, b"again")
            data = await second.recv(1024)
            second.close()
            return data
        finally:
            again.close()
            d.close()

    assert run(reuse) == b"again"


def test_a_cancelled_read_loses_no_bytes(pair: Pair) -> None:
    a, b = pair

    async def cancelled() -> bytes:
        reader = SocketReader(a)
        task = asyncio.ensure_future(reader.recv(1024))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        b.send(b"kept")
        data = await reader.recv(1024)
        reader.close()
        return data

    assert run(cancelled) == b"kept"
