"""Connection limits, timeouts and the request memory pool, decided without sockets."""

from __future__ import annotations

import asyncio
import tracemalloc
from dataclasses import dataclass

import pytest

from headwater.broker.config import BrokerConfig
from headwater.broker.connection_limits import (
    Admission,
    ConnectionLimits,
    ConnectionRegistry,
    parse_overrides,
)
from headwater.broker.memory_pool import MemoryPool
from headwater.protocol.frame import FrameDecoder


@dataclass(eq=False)
class FakeConn:
    peer_ip: str
    last_active: float = 0.0
    frame_started: float | None = None
    busy_since: float | None = None


def test_kafka_keys_reach_the_limits() -> None:
    config = BrokerConfig.from_properties(
        {
            "max.connections": "100",
            "max.connections.per.ip": "5",
            "max.connections.per.ip.overrides": "10.0.0.1:50,[::1]:7",
            "max.connection.creation.rate": "20",
            "connections.max.idle.ms": "1000",
            "queued.max.request.bytes": "209715200",
        }
    )
    limits = config.connections
    assert limits.max_connections == 100
    assert limits.limit_for("10.0.0.1") == 50
    assert limits.limit_for("::1") == 7
    assert limits.limit_for("10.0.0.2") == 5
    assert limits.max_connection_creation_rate == 20
    assert limits.idle_ms == 1000
    assert limits.queued_max_request_bytes == 209_715_200
    assert "max.connections" not in config.extra


def test_the_pool_must_hold_the_largest_request() -> None:
    with pytest.raises(ValueError, match=r"socket\.request\.max\.bytes"):
        BrokerConfig.from_properties({"queued.max.request.bytes": "1000"})


def test_bad_override_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_overrides("10.0.0.1")


def test_per_ip_limit_counts_live_connections_and_frees_on_remove() -> None:
    registry = ConnectionRegistry(ConnectionLimits(max_connections_per_ip=2))
    a, b = FakeConn("1.2.3.4"), FakeConn("1.2.3.4")
    registry.add(a)
    registry.add(b)
    assert registry.admit("1.2.3.4") is Admission.TOO_MANY_FROM_IP
    assert registry.admit("5.6.7.8") is Admission.ACCEPT
    registry.remove(a)
    registry.remove(a)  # twice is harmless
    assert registry.admit("1.2.3.4") is Admission.ACCEPT
    registry.remove(b)
    assert registry.per_ip == {}


def test_max_connections_makes_the_registry_full() -> None:
    registry = ConnectionRegistry(ConnectionLimits(max_connections=1))
    assert not registry.full
    registry.add(FakeConn("x"))
    assert registry.full


def test_creation_rate_is_a_token_bucket() -> None:
    registry = ConnectionRegistry(ConnectionLimits(max_connection_creation_rate=2))
    delays = [registry.creation_delay(100.0) for _ in range(4)]
    assert delays[:2] == [0.0, 0.0]
    assert delays[2] == pytest.approx(0.5)
    assert delays[3] == pytest.approx(1.0)
    # After two quiet seconds the bucket is full again.
    assert registry.creation_delay(103.0) == 0.0


def test_unlimited_rate_never_delays() -> None:
    registry = ConnectionRegistry(ConnectionLimits())
    assert all(registry.creation_delay(0.0) == 0.0 for _ in range(1000))


def test_sweep_finds_idle_slowloris_and_stuck_connections() -> None:
    limits = ConnectionLimits(idle_ms=10_000, receive_timeout_ms=2_000, completion_timeout_ms=5_000)
    registry = ConnectionRegistry(limits)
    idle = FakeConn("a", last_active=0.0)
    fresh = FakeConn("b", last_active=95.0)
    slow_sender = FakeConn("c", last_active=99.0, frame_started=97.0)
    reading_in_time = FakeConn("d", last_active=99.0, frame_started=99.0)
    stuck = FakeConn("e", last_active=0.0, busy_since=94.0)
    long_poll = FakeConn("f", last_active=0.0, busy_since=99.0)
    for c in (idle, fresh, slow_sender, reading_in_time, stuck, long_poll):
        registry.add(c)
    found = {c.peer_ip: reason for c, reason in registry.expired(100.0)}
    assert set(found) == {"a", "c", "e"}
    assert "idle" in found["a"]
    assert "arrive whole" in found["c"]
    assert "not completed" in found["e"]


def test_pool_pauses_reservations_until_release() -> None:
    async def scenario() -> list[str]:
        pool = MemoryPool(100)
        events: list[str] = []
        await pool.reserve(80)

        async def second() -> None:
            await pool.reserve(50)
            events.append("second reserved")

        task = asyncio.create_task(second())
        await asyncio.sleep(0.01)
        events.append(f"waiting, available {pool.available}")
        pool.release(80)
        await task
        assert pool.reserved == 50
        return events

    assert asyncio.run(scenario()) == ["waiting, available 20", "second reserved"]


def test_one_request_larger_than_what_is_left_proceeds_when_alone() -> None:
    pool = MemoryPool(100)
    assert pool.try_reserve(100)
    assert not pool.try_reserve(1)
    pool.release(100)
    assert pool.try_reserve(100)


def test_declared_frame_length_allocates_nothing_until_bytes_arrive() -> None:
    decoder = FrameDecoder(200 << 20)
    tracemalloc.start()
    try:
        decoder.feed((100 << 20).to_bytes(4, "big") + b"x" * 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.pending_length == 100 << 20
    assert decoder.buffered == 10
    assert peak < 1 << 20, f"{peak} bytes for a frame that sent 10"


def test_a_frame_assembled_from_pieces_is_whole_and_exact() -> None:
    decoder = FrameDecoder(1 << 20)
    body = bytes(range(256)) * 40
    stream = len(body).to_bytes(4, "big") + body + (8).to_bytes(4, "big") + b"12345678"
    frames = []
    for i in range(0, len(stream), 777):
        frames += [bytes(f) for f in decoder.feed(stream[i : i + 777])]
    assert frames == [body, b"12345678"]
    assert decoder.pending_length is None
