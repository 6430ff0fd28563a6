"""The SASL conversation of one connection (KIP-43, KIP-152, KIP-368), sans-I/O.

The broker feeds it SaslHandshake and SaslAuthenticate requests and asks it
whether other requests may pass. The legal order is spelled out here once:

    HANDSHAKE --SaslHandshake(ok)--> AUTHENTICATE --token...--> AUTHENTICATED
        ^                                 |                         |
        |                              failure                SaslHandshake
     (ApiVersions allowed               v                     (re-authenticate,
      in HANDSHAKE)                   FAILED (close)            KIP-368)

Anything else before AUTHENTICATED (a SaslAuthenticate before the handshake,
any other API) is an illegal state: the connection is answered if the API
can carry an error and closed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from headwater.protocol.error_codes import ErrorCode
from headwater.security.errors import IllegalSaslStateError, SaslAuthenticationError
from headwater.security.plain import PlainServer
from headwater.security.principal import KafkaPrincipal, user
from headwater.security.scram import CredentialLookup, ScramMechanisms, ScramServer

# Kafka error codes this module decides on.

#: Kafka's ``sasl.server.max.receive.size`` default: a token past this is refused
#: unread, so an unauthenticated peer cannot make the broker buffer megabytes.
DEFAULT_MAX_TOKEN_BYTES = 524_288

KNOWN_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class MechanismServer(Protocol):
    @property
    def complete(self) -> bool: ...

    @property
    def username(self) -> str | None: ...

    def step(self, message: bytes) -> bytes: ...


def mechanism_server(name: str, lookup: CredentialLookup) -> MechanismServer:
    if name == "PLAIN":
        return PlainServer(lookup)
    scram = ScramMechanisms.by_name(name)
    if scram is None:
        raise ValueError(f"unknown SASL mechanism {name!r}")
    return ScramServer(scram, lookup)


class SaslState(enum.Enum):
    HANDSHAKE = "awaiting SaslHandshake"
    AUTHENTICATE = "awaiting SaslAuthenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class HandshakeResult:
    error_code: int
    mechanisms: list[str]
    close: bool = False


@dataclass(frozen=True, slots=True)
class AuthenticateResult:
    error_code: int
    error_message: str | None = None
    token: bytes = b""
    session_lifetime_ms: int = 0
    close: bool = False


@dataclass
class SaslServerSession:
    """One connection's authentication state.

    ``max_reauth_ms`` is ``connections.max.reauth.ms`` (0 = sessions never
    expire). Time is passed in (``now_ms``) so tests need no clock.
    """

    enabled_mechanisms: list[str]
    lookup: CredentialLookup
    max_reauth_ms: int = 0
    max_token_bytes: int = DEFAULT_MAX_TOKEN_BYTES
    state: SaslState = SaslState.HANDSHAKE
    principal: KafkaPrincipal | None = None
    mechanism_name: str | None = None
    expires_at_ms: int | None = None
    reauthentications: int = 0
    _mechanism: MechanismServer | None = field(default=None, repr=False)
    _factory: Callable[[str, CredentialLookup], MechanismServer] = field(
        default=mechanism_server, repr=False
    )

    def __post_init__(self) -> None:
        unknown = [m for m in self.enabled_mechanisms if m not in KNOWN_MECHANISMS]
        if unknown:
            raise ValueError(f"unsupported SASL mechanisms: {', '.join(unknown)}")

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    def expired(self, now_ms: int) -> bool:
        """KIP-368: past its lifetime a session may only re-authenticate."""
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms

    def handshake(self, mechanism: str) -> HandshakeResult:
        if self.state not in (SaslState.HANDSHAKE, SaslState.AUTHENTICATED):
            self.state = SaslState.FAILED
            return HandshakeResult(
                ErrorCode.illegal_sasl_state, list(self.enabled_mechanisms), close=True
            )
        if mechanism not in self.enabled_mechanisms:
            self.state = SaslState.FAILED
            return HandshakeResult(
                ErrorCode.unsupported_sasl_mechanism, list(self.enabled_mechanisms), close=True
            )
        if self.state is SaslState.AUTHENTICATED and mechanism != self.mechanism_name:
            # KIP-368: re-authentication keeps the mechanism.
            self.state = SaslState.FAILED
            return HandshakeResult(
                ErrorCode.illegal_sasl_state, list(self.enabled_mechanisms), close=True
            )
        self._mechanism = self._factory(mechanism, self.lookup)
        self.mechanism_name = mechanism
        self.state = SaslState.AUTHENTICATE
        return HandshakeResult(ErrorCode.none, list(self.enabled_mechanisms))

    def authenticate(self, token: bytes, now_ms: int) -> AuthenticateResult:
        if self.state is not SaslState.AUTHENTICATE or self._mechanism is None:
            self.state = SaslState.FAILED
            return AuthenticateResult(
                ErrorCode.illegal_sasl_state, "SaslAuthenticate before SaslHandshake", close=True
            )
        if len(token) > self.max_token_bytes:
            return self._fail(f"SASL token of {len(token)} bytes exceeds {self.max_token_bytes}")
        try:
            reply = self._mechanism.step(token)
        except SaslAuthenticationError as exc:
            return self._fail(str(exc))
        except IllegalSaslStateError as exc:
            self.state = SaslState.FAILED
            return AuthenticateResult(ErrorCode.illegal_sasl_state, str(exc), close=True)
        if not self._mechanism.complete:
            return AuthenticateResult(ErrorCode.none, token=reply)
        assert self._mechanism.username is not None
        principal = user(self._mechanism.username)
        if self.principal is not None and principal != self.principal:
            return self._fail("re-authentication must not change the principal")
        if self.principal is not None:
            self.reauthentications += 1
        self.principal = principal
        self._mechanism = None
        self.state = SaslState.AUTHENTICATED
        lifetime = self.max_reauth_ms
        self.expires_at_ms = now_ms + lifetime if lifetime > 0 else None
        return AuthenticateResult(ErrorCode.none, token=reply, session_lifetime_ms=lifetime)

    def _fail(self, message: str) -> AuthenticateResult:
        self.state = SaslState.FAILED
        self._mechanism = None
        return AuthenticateResult(ErrorCode.sasl_authentication_failed, message, close=True)


def parse_mechanisms(value: str | None, default: Iterable[str] = ("GSSAPI",)) -> list[str]:
    """``sasl.enabled.mechanisms``: a comma list (Kafka's default is GSSAPI)."""
    if value is None:
        return list(default)
    return [m.strip().upper() for m in value.split(",") if m.strip()]
