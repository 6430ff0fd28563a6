"""What one connection may hold and how long: counted in the broker's RSS and file descriptors."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

from headwater.protocol.apis import ApiKey
from tests.integration.broker_process import BrokerProcess
from tests.integration.wire import WireClient

BrokerFactory = Callable[..., BrokerProcess]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _settled_rss_mb(pid: int, timeout: float = 20.0) -> float:
    """RSS once start-up work (the validator's compiled walk loads on a thread) is done."""
    last = _rss_mb(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _rss_mb(pid)
        if abs(now - last) < 1.0:
            return now
        last = now
    return last


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _pid(b: BrokerProcess) -> int:
    assert b.proc is not None
    return b.proc.pid


def _frame(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation, 4) + b"test"
    return struct.pack(">i", len(head) + len(body)) + head + body


def _metadata_v1(topic: str, correlation: int) -> bytes:
    name = topic.encode()
    return _frame(ApiKey.METADATA, 1, correlation, struct.pack(">ih", 1, len(name)) + name)


def _serving(b: BrokerProcess) -> bool:
    c = WireClient(b.bootstrap)
    try:
        body = c.request(ApiKey.API_VERSIONS, 0, b"")
        return struct.unpack_from(">h", body, 0)[0] == 0
    finally:
        c.close()


def _wait(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_pipelining_and_disconnecting_releases_memory_and_fds(
    broker_factory: BrokerFactory,
) -> None:
    b = broker_factory("num.partitions=5000")
    topic = "wide"
    c = WireClient(b.bootstrap)
    c.sock.sendall(_metadata_v1(topic, 1))  # creates the topic: ~150 KB responses
    c.read_frame()
    c.close()
    pid = _pid(b)
    assert _serving(b)
    rss_before = _settled_rss_mb(pid)
    fds_before = _fds(pid)
    for _round in range(3):
        socks = []
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", b.port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"".join(_metadata_v1(topic, i) for i in range(300)))
            socks.append(s)
        time.sleep(1.0)
        for s in socks:
            # Close with unread data: the kernel resets the connection.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
    assert _wait(lambda: _fds(pid) <= fds_before), f"fds {_fds(pid)} > {fds_before}"
    rss_after = _rss_mb(pid)
    # 15 connections x 300 responses of ~150 KB would be ~675 MB if kept.
    assert rss_after - rss_before < 60, f"RSS {rss_before:.0f} -> {rss_after:.0f} MB"
    assert _serving(b)


def test_declared_frame_lengths_reserve_no_memory(broker_factory: BrokerFactory) -> None:
    b = broker_factory("socket.request.max.bytes=209715200")
    pid = _pid(b)
    rss_before = _settled_rss_mb(pid)
    socks = []
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", b.port))
        s.sendall(struct.pack(">i", 100 << 20) + b"\x00\x03\x00\x01" + b"x" * 10)
        socks.append(s)
    time.sleep(1.0)
    rss_after = _rss_mb(pid)
    assert rss_after - rss_before < 30, f"RSS {rss_before:.0f} -> {rss_after:.0f} MB"
    assert _serving(b)
    for s in socks:
        s.close()


def test_idle_connections_are_closed(broker_factory: BrokerFactory) -> None:
    b = broker_factory("connections.max.idle.ms=500")
    s = socket.create_connection(("127.0.0.1", b.port))
    start = time.monotonic()
    assert _closed_by_peer(s, 10)
    assert time.monotonic() - start < 5
    s.close()
    assert _wait(lambda: any("idle for more than 500 ms" in line for line in b.lines))


def test_slowloris_sender_is_closed(broker_factory: BrokerFactory) -> None:
    b = broker_factory("headwater.request.receive.timeout.ms=800")
    s = socket.create_connection(("127.0.0.1", b.port))
    frame = _frame(ApiKey.API_VERSIONS, 0, 1, b"")
    s.sendall(frame[:5])
    start = time.monotonic()
    closed = False
    for byte in frame[5:]:
        time.sleep(0.3)
        try:
            s.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
    assert closed or _closed_by_peer(s, 5)
    assert time.monotonic() - start < 8
    s.close()
    assert _wait(lambda: any("did not arrive whole" in line for line in b.lines))
    assert _serving(b)


def test_max_connections_per_ip_and_overrides(broker_factory: BrokerFactory) -> None:
    b = broker_factory("max.connections.per.ip=2")
    first = [socket.create_connection(("127.0.0.1", b.port)) for _ in range(2)]
    third = socket.create_connection(("127.0.0.1", b.port))
    assert _closed_by_peer(third, 5)
    first[0].close()
    time.sleep(0.3)
    assert _serving(b)
    for s in first[1:]:
        s.close()
    assert _wait(lambda: any("max.connections.per.ip (2) reached" in line for line in b.lines))

    o = broker_factory(
        "max.connections.per.ip=1", "max.connections.per.ip.overrides=127.0.0.1:3", name="o"
    )
    kept = [socket.create_connection(("127.0.0.1", o.port)) for _ in range(2)]
    assert _serving(o)  # the third of three allowed by the override
    for s in kept:
        s.close()


def test_max_connections_waits_instead_of_serving(broker_factory: BrokerFactory) -> None:
    b = broker_factory("max.connections=1")
    holder = WireClient(b.bootstrap)
    holder.request(ApiKey.API_VERSIONS, 0, b"")
    waiting = socket.create_connection(("127.0.0.1", b.port))
    waiting.sendall(_frame(ApiKey.API_VERSIONS, 0, 1, b""))
    waiting.settimeout(1.0)
    try:
        waiting.recv(4)
        raise AssertionError("a connection over max.connections was served")
    except TimeoutError:
        pass
    holder.close()
    waiting.settimeout(10)
    assert len(waiting.recv(4)) == 4  # served once a slot freed
    waiting.close()
