"""SocketWriter: a response with bytes after a file slice is corked, so it leaves whole."""

from __future__ import annotations

import asyncio
import errno
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.broker.socket_writer import COPY_SLICES_UP_TO, Part, SocketWriter
from headwater.protocol.file_slice import FileSlice


class RecordingSocket(socket.socket):
    """A TCP socket that remembers every TCP_CORK change and counts its sends."""

    corks: list[int]
    sends: int

    def setsockopt(self, level: int, option: int, value: Any, *args: Any) -> None:
        if level == socket.IPPROTO_TCP and option == socket.TCP_CORK:
            self.corks.append(value)
        super().setsockopt(level, option, value, *args)

    def send(self, data: Any, flags: int = 0) -> int:
        self.sends += 1
        return super().send(data, flags)


@pytest.fixture
def tcp_pair() -> Iterator[tuple[RecordingSocket, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        peer = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        sender = RecordingSocket(accepted.family, accepted.type, accepted.proto, accepted.detach())
        sender.corks, sender.sends = [], 0
        sender.setblocking(False)
        sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        yield sender, peer
        sender.close()
        peer.close()


@pytest.fixture
def segment_file() -> Iterator[Any]:
    with tempfile.TemporaryFile() as f:
        f.write(bytes(range(256)) * 64)  # 16 KiB
        f.flush()
        yield f


def receive(peer: socket.socket, size: int) -> bytes:
    peer.settimeout(10)
    got = b""
    while len(got) < size:
        chunk = peer.recv(size - len(got))
        assert chunk, "the connection ended early"
        got += chunk
    return got


def test_bytes_after_a_slice_are_corked_with_it_and_the_cork_is_lifted(
    tcp_pair: tuple[RecordingSocket, socket.socket], segment_file: Any
) -> None:
    sender, peer = tcp_pair
    parts: list[Part] = [b"head", FileSlice(segment_file, 100, 5000), b"\x00tail"]
    asyncio.run(SocketWriter(sender).write(parts))
    expected = b"head" + (bytes(range(256)) * 64)[100:5100] + b"\x00tail"
    assert receive(peer, len(expected)) == expected
    assert sender.corks == [1, 0]
    assert sender.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK) == 0


def test_a_response_ending_with_its_slice_needs_no_cork(
    tcp_pair: tuple[RecordingSocket, socket.socket], segment_file: Any
) -> None:
    sender, peer = tcp_pair
    parts: list[Part] = [b"head", FileSlice(segment_file, 0, 4096)]
    asyncio.run(SocketWriter(sender).write(parts))
    assert receive(peer, 4100) == b"head" + (bytes(range(256)) * 64)[:4096]
    assert sender.corks == []


def test_without_zero_copy_nothing_is_corked(
    tcp_pair: tuple[RecordingSocket, socket.socket], segment_file: Any
) -> None:
    sender, peer = tcp_pair
    parts: list[Part] = [b"head", FileSlice(segment_file, 0, 10), b"tail"]
    asyncio.run(SocketWriter(sender, zero_copy=False).write(parts))
    assert receive(peer, 18) == b"head" + bytes(range(10)) + b"tail"
    assert sender.corks == []


def test_a_unix_socket_is_written_without_a_cork(segment_file: Any) -> None:
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        parts: list[Part] = [b"head", FileSlice(segment_file, 0, 10), b"tail"]
        asyncio.run(SocketWriter(a).write(parts))
        assert receive(b, 18) == b"head" + bytes(range(10)) + b"tail"


@pytest.mark.parametrize("zero_copy", [True, False])
def test_a_segment_failing_while_it_is_sent_takes_its_directory_offline(
    tmp_path: Path, zero_copy: bool
) -> None:
    """Issue 31 (KIP-112): a read that fails inside ``sendfile`` (or the copy made when
    zero-copy is off) is a read of the log's disk like any other: the log's directory
    is told (it goes offline and the partition answers KAFKA_STORAGE_ERROR), and the
    response is not sent half-way as if nothing happened (the connection ends)."""
    from headwater.log import disk_io
    from headwater.log.config import LogConfig
    from headwater.log.handles import FileHandleCache
    from headwater.log.isolation import Isolation
    from headwater.log.log import Log
    from tests.unit.test_log import NOW, batch

    log = Log(tmp_path / "t-0", LogConfig(), FileHandleCache())
    told: list[OSError] = []
    log.on_io_error = lambda _log, exc: told.append(exc)
    log.append(batch(3), NOW)
    records = log.read(0, 1 << 20, Isolation.LOG_END, True).records
    assert records is not None
    a, b = socket.socketpair()
    disk_io.FAULTS.fail_under(tmp_path)
    try:
        with a, b:
            a.setblocking(False)
            with pytest.raises(OSError):
                asyncio.run(SocketWriter(a, zero_copy=zero_copy).write([b"head", records]))
    finally:
        disk_io.FAULTS.clear()
        log.close()
    assert len(told) == 1 and told[0].errno == errno.EIO


def test_a_small_response_leaves_in_one_send_without_a_cork(
    tcp_pair: tuple[RecordingSocket, socket.socket], segment_file: Any
) -> None:
    sender, peer = tcp_pair
    parts: list[Part] = [b"head", FileSlice(segment_file, 10, 1000), b"mid"]
    parts += [FileSlice(segment_file, 2000, COPY_SLICES_UP_TO - 1000), b"tail"]
    asyncio.run(SocketWriter(sender).write(parts))
    data = bytes(range(256)) * 64
    expected = b"head" + data[10:1010] + b"mid" + data[2000 : 2000 + COPY_SLICES_UP_TO - 1000]
    expected += b"tail"
    assert receive(peer, len(expected)) == expected
    assert sender.corks == [] and sender.sends == 1


def test_a_response_past_the_copy_limit_still_goes_by_sendfile_under_a_cork(
    tcp_pair: tuple[RecordingSocket, socket.socket], segment_file: Any
) -> None:
    sender, peer = tcp_pair
    size = COPY_SLICES_UP_TO + 1
    parts: list[Part] = [b"head", FileSlice(segment_file, 0, size), b"tail"]
    asyncio.run(SocketWriter(sender).write(parts))
    assert receive(peer, size + 8) == b"head" + (bytes(range(256)) * 64)[:size] + b"tail"
    assert sender.corks == [1, 0]
