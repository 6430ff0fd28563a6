"""How many connections the broker takes, how fast, and when it lets one go.

Kafka's keys: ``max.connections``, ``max.connections.per.ip`` (with
``max.connections.per.ip.overrides``), ``max.connection.creation.rate``
(KIP-612), ``connections.max.idle.ms`` and ``queued.max.request.bytes``
(KIP-72). Two Headwater keys bound what Kafka bounds by muting and by the
client's own timeouts: a request whose bytes do not all arrive within
``headwater.request.receive.timeout.ms`` (a slowloris sender), and one whose
response is not written within ``headwater.request.completion.timeout.ms``
(a peer that stops reading, a handler that never finishes), close the
connection.

:class:`ConnectionRegistry` makes every decision from plain numbers and a
clock value, so the rules are unit-tested without sockets; the broker's
accept loop and a periodic sweep act on its answers.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: float = math.inf  # per second
    idle_ms: int = 600_000
    receive_timeout_ms: int = 30_000
    completion_timeout_ms: int = 330_000  # above the 5-minute default rebalance timeout
    queued_max_request_bytes: int = -1  # -1: no pool, as Kafka's default
    max_queued_requests: int = 16  # per connection, before reading pauses

    KEYS = (
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
        "connections.max.idle.ms",
        "queued.max.request.bytes",
        "headwater.request.receive.timeout.ms",
        "headwater.request.completion.timeout.ms",
        "headwater.max.queued.requests.per.connection",
    )

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], socket_request_max_bytes: int
    ) -> ConnectionLimits:
        return cls().with_properties(props, socket_request_max_bytes)

    def with_properties(
        self, props: Mapping[str, str], socket_request_max_bytes: int
    ) -> ConnectionLimits:
        """These limits with Kafka-named ``props`` applied (start-up and dynamic updates)."""
        kw: dict[str, object] = {}
        ints = {
            "max.connections": "max_connections",
            "max.connections.per.ip": "max_connections_per_ip",
            "connections.max.idle.ms": "idle_ms",
            "queued.max.request.bytes": "queued_max_request_bytes",
            "headwater.request.receive.timeout.ms": "receive_timeout_ms",
            "headwater.request.completion.timeout.ms": "completion_timeout_ms",
            "headwater.max.queued.requests.per.connection": "max_queued_requests",
        }
        for key, value in props.items():
            if key in ints:
                kw[ints[key]] = int(value)
            elif key == "max.connection.creation.rate":
                kw["max_connection_creation_rate"] = float(value)
            elif key == "max.connections.per.ip.overrides":
                kw["per_ip_overrides"] = parse_overrides(value)
        limits = dataclasses.replace(self, **kw)  # type: ignore[arg-type]
        pool = limits.queued_max_request_bytes
        if 0 <= pool < socket_request_max_bytes:
            raise ValueError(
                f"queued.max.request.bytes ({pool}) must be at least "
                f"socket.request.max.bytes ({socket_request_max_bytes}), or -1"
            )
        if limits.max_queued_requests < 1:
            raise ValueError("headwater.max.queued.requests.per.connection must be at least 1")
        return limits

    def limit_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_connections_per_ip)


def parse_overrides(text: str) -> dict[str, int]:
    """``host:count,host:count`` (IPv6 hosts keep their colons: the count is after the last)."""
    out: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ValueError(f"max.connections.per.ip.overrides entry {item!r} is not host:count")
        out[host.strip("[]")] = int(count)
    return out


class Tracked(Protocol):
    """What the registry reads from a live connection."""

    peer_ip: str
    last_active: float  # monotonic seconds of the last byte read or response written
    frame_started: float | None  # when the unfinished request's first byte arrived
    busy_since: float | None  # when the response now at the head of the queue was awaited


class Admission(Enum):
    ACCEPT = "accept"
    TOO_MANY_FROM_IP = "too many connections from this address"


@dataclass(slots=True)
class ConnectionRegistry:
    """The live connections, counted per address, with their timeout rules."""

    limits: ConnectionLimits
    connections: set[Tracked] = field(default_factory=set)
    per_ip: dict[str, int] = field(default_factory=dict)
    _tokens: float = 0.0
    _tokens_at: float | None = None

    def __len__(self) -> int:
        return len(self.connections)

    @property
    def full(self) -> bool:
        """At ``max.connections``: the accept loop waits (clients queue in the backlog)."""
        return len(self.connections) >= self.limits.max_connections

    def admit(self, ip: str) -> Admission:
        if self.per_ip.get(ip, 0) >= self.limits.limit_for(ip):
            return Admission.TOO_MANY_FROM_IP
        return Admission.ACCEPT

    def creation_delay(self, now: float) -> float:
        """Seconds to wait before accepting one more connection (a token bucket, 1 s burst)."""
        rate = self.limits.max_connection_creation_rate
        if math.isinf(rate):
            return 0.0
        if self._tokens_at is None:
            self._tokens, self._tokens_at = rate, now
        self._tokens = min(rate, self._tokens + (now - self._tokens_at) * rate)
        self._tokens_at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        wait = (1 - self._tokens) / rate
        self._tokens -= 1
        return wait

    def add(self, conn: Tracked) -> None:
        self.connections.add(conn)
        self.per_ip[conn.peer_ip] = self.per_ip.get(conn.peer_ip, 0) + 1

    def remove(self, conn: Tracked) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            left = self.per_ip[conn.peer_ip] - 1
            if left:
                self.per_ip[conn.peer_ip] = left
            else:
                del self.per_ip[conn.peer_ip]

    def expired(self, now: float) -> Iterable[tuple[Tracked, str]]:
        """Connections to close now, each with the reason to log."""
        limits = self.limits
        idle = limits.idle_ms / 1000
        receive = limits.receive_timeout_ms / 1000
        completion = limits.completion_timeout_ms / 1000
        for conn in list(self.connections):
            if conn.busy_since is not None and now - conn.busy_since > completion:
                yield (
                    conn,
                    (f"a response was not completed within {limits.completion_timeout_ms} ms"),
                )
            elif conn.frame_started is not None and now - conn.frame_started > receive:
                yield conn, f"a request did not arrive whole within {limits.receive_timeout_ms} ms"
            elif (
                conn.busy_since is None
                and conn.frame_started is None
                and now - conn.last_active > idle
            ):
                yield conn, f"idle for more than {limits.idle_ms} ms"
