"""Listeners: ``listeners``, ``listener.security.protocol.map`` and ``advertised.listeners``.

A listener is a name (``PLAINTEXT``, ``SASL_SSL`` or a custom one mapped to
a security protocol), an address to bind and an address to advertise in
Metadata and FindCoordinator answers to clients that came in through it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from headwater.addresses import split_host_port


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


DEFAULT_PROTOCOL_MAP = {p.value: p for p in SecurityProtocol}


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    protocol: SecurityProtocol
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.advertised_host or self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, self.advertised_port or self.port

    def with_port(self, port: int) -> Listener:
        """The bound port (when configured as 0)."""
        return replace(self, port=port)


def parse_protocol_map(value: str | None) -> dict[str, SecurityProtocol]:
    """``NAME:PROTOCOL,...``; Kafka's default maps each protocol to itself."""
    if not value:
        return dict(DEFAULT_PROTOCOL_MAP)
    out: dict[str, SecurityProtocol] = {}
    for item in value.split(","):
        name, sep, proto = item.strip().partition(":")
        if not sep or not name:
            raise ValueError(f"listener.security.protocol.map: bad entry {item!r}")
        try:
            out[name.strip().upper()] = SecurityProtocol(proto.strip().upper())
        except ValueError:
            raise ValueError(f"unknown security protocol {proto!r} for listener {name}") from None
    return out


def _entries(value: str, key: str) -> list[tuple[str, str, int]]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, rest = item.partition("://")
        if not sep:
            raise ValueError(f"{key}: expected NAME://HOST:PORT, got {item!r}")
        host, port = split_host_port(rest, 9092)
        out.append((name.strip().upper(), host, port))
    return out


def parse_listeners(
    listeners: str,
    protocol_map: str | None = None,
    advertised: str | None = None,
) -> tuple[Listener, ...]:
    protocols = parse_protocol_map(protocol_map)
    adverts = {name: (h, p) for name, h, p in _entries(advertised or "", "advertised.listeners")}
    out: list[Listener] = []
    for name, host, port in _entries(listeners, "listeners"):
        if name not in protocols:
            raise ValueError(
                f"listener {name} has no security protocol: "
                "add it to listener.security.protocol.map"
            )
        if any(existing.name == name for existing in out):
            raise ValueError(f"listener {name} is configured twice")
        a_host, a_port = adverts.pop(name, (None, None))
        out.append(Listener(name, protocols[name], host or "0.0.0.0", port, a_host, a_port))
    if adverts:
        raise ValueError(f"advertised.listeners names unknown listeners: {', '.join(adverts)}")
    if not out:
        raise ValueError("listeners is empty")
    return tuple(out)


def with_listen_address(listeners: str | None, host: str, port: int) -> str:
    """``listeners`` with the command line's ``--listen HOST:PORT`` as its PLAINTEXT listener.

    ``--listen`` names the PLAINTEXT listener; the other configured listeners
    stay (a configured listener must never vanish). A PLAINTEXT listener already
    configured elsewhere is a conflict: ValueError, whose message says so.
    """
    own = f"PLAINTEXT://{host}:{port}"
    if not listeners or not listeners.strip():
        return own
    for name, h, p in _entries(listeners, "listeners"):
        if name != "PLAINTEXT":
            continue
        if (h or "0.0.0.0", p) == (host or "0.0.0.0", port):
            return listeners
        raise ValueError(
            f"--listen {host}:{port} conflicts with listeners' PLAINTEXT://{h}:{p}; "
            "give one of them"
        )
    return f"{own},{listeners}"
