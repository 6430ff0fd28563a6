"""SASL/PLAIN (RFC 4616) checked against the SCRAM credential store.

Kafka's PLAIN reads passwords from a JAAS file; Headwater checks them
against the same salted SCRAM credentials as SCRAM itself, so a user has one
password and it is never stored in clear. PLAIN sends the password in the
clear, so it belongs on SASL_SSL listeners.
"""

from __future__ import annotations

from collections.abc import Callable

from headwater.security.errors import IllegalSaslStateError, SaslAuthenticationError
from headwater.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential, ScramMechanism

MAX_MESSAGE_BYTES = 4096

CredentialLookup = Callable[[str, ScramMechanism], "ScramCredential | None"]


class PlainServer:
    """One PLAIN exchange: a single ``step(authzid NUL authcid NUL passwd)``."""

    mechanism_name = "PLAIN"

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self._done = False
        self.complete = False
        self.username: str | None = None

    def step(self, message: bytes) -> bytes:
        if self._done:
            raise IllegalSaslStateError("PLAIN exchange already finished")
        self._done = True
        if len(message) > MAX_MESSAGE_BYTES:
            raise SaslAuthenticationError("PLAIN message too long")
        parts = message.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError(
                "invalid PLAIN message: expected authzid NUL user NUL password"
            )
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("invalid PLAIN message: not UTF-8") from None
        if not username or not password:
            raise SaslAuthenticationError("invalid PLAIN message: empty user or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: authorization id differs from username"
            )
        if not self._check(username, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        self.username = username
        self.complete = True
        return b""

    def _check(self, username: str, password: str) -> bool:
        # The strongest credential the user has; both derive from the same password.
        for mechanism in (SCRAM_SHA_512, SCRAM_SHA_256):
            cred = self._lookup(username, mechanism)
            if cred is not None:
                return cred.verify_password(mechanism, password)
        return False
