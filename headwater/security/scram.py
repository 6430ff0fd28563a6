"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677, Kafka's KIP-84), sans-I/O.

``ScramServer`` is fed the client's two messages and returns the server's
two; ``ScramClient`` is the mirror image (for Headwater's own tools, tests
and benchmarks). All cryptography is ``hashlib.pbkdf2_hmac`` (Hi),
``hmac`` (HMAC) and ``hashlib`` (H); nothing is hand-written but the
message grammar, which is small and must be parsed strictly because it
arrives from unauthenticated peers.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from headwater.security.errors import IllegalSaslStateError, SaslAuthenticationError

#: Kafka's bounds for SCRAM iterations (ScramMechanism.minIterations/maxIterations).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096

_NONCE_BYTES = 24
#: No legitimate SCRAM message is anywhere near this; longer ones are refused
#: before any parsing work.
MAX_MESSAGE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    mechanism_name: str
    hash_name: str
    #: Kafka's wire code in AlterUserScramCredentials (1 = SHA-256, 2 = SHA-512).
    kafka_type: int

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def hi(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)


class ScramMechanisms(enum.Enum):
    SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)

    @classmethod
    def by_name(cls, name: str) -> ScramMechanism | None:
        for m in cls:
            if m.value.mechanism_name == name:
                return m.value
        return None

    @classmethod
    def by_kafka_type(cls, code: int) -> ScramMechanism | None:
        for m in cls:
            if m.value.kafka_type == code:
                return m.value
        return None


SCRAM_SHA_256 = ScramMechanisms.SCRAM_SHA_256.value
SCRAM_SHA_512 = ScramMechanisms.SCRAM_SHA_512.value


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps: never the password, only keys derived from it."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """From what AlterUserScramCredentials carries (the client salts and hashes)."""
        client_key = mechanism.hmac(salted_password, b"Client Key")
        return cls(
            salt=salt,
            stored_key=mechanism.h(client_key),
            server_key=mechanism.hmac(salted_password, b"Server Key"),
            iterations=iterations,
        )

    @classmethod
    def from_password(
        cls,
        mechanism: ScramMechanism,
        password: str,
        iterations: int = DEFAULT_ITERATIONS,
        salt: bytes | None = None,
    ) -> ScramCredential:
        check_iterations(iterations)
        salt = salt if salt is not None else secrets.token_bytes(32)
        salted = mechanism.hi(normalize_password(password), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def verify_password(self, mechanism: ScramMechanism, password: str) -> bool:
        """PLAIN's check against a SCRAM credential: one user, one password."""
        other = ScramCredential.from_password(mechanism, password, self.iterations, self.salt)
        return hmac.compare_digest(other.stored_key, self.stored_key)


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"SCRAM iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}"
        )


def normalize_password(password: str) -> bytes:
    """Kafka uses the password's UTF-8 bytes as they are (no SASLprep); so do we,
    so that a password set through Kafka's tools and ours derive the same keys."""
    return password.encode("utf-8")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    """Strict base64: a canonical encoding only, so one message has one spelling
    (the decoder would otherwise ignore flipped padding bits)."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SaslAuthenticationError(f"invalid SCRAM message: bad base64 in {what}") from None
    if _b64(raw) != text:
        raise SaslAuthenticationError(f"invalid SCRAM message: non-canonical base64 in {what}")
    return raw


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def decode_saslname(text: str) -> str:
    """RFC 5802 5.1: ``=2C`` is ``,``, ``=3D`` is ``=``, any other ``=`` is an error."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "=":
            code = text[i : i + 3]
            if code == "=2C":
                out.append(",")
            elif code == "=3D":
                out.append("=")
            else:
                raise SaslAuthenticationError("invalid SCRAM message: bad escape in username")
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _attributes(
    message: str, expected: tuple[str, ...], what: str
) -> tuple[dict[str, str], list[str]]:
    """Split ``a=...,b=...``; the leading attributes must be ``expected`` in order.

    Returns the expected attributes and the raw extensions after them.
    """
    fields = message.split(",")
    if len(fields) < len(expected):
        raise SaslAuthenticationError(f"invalid SCRAM {what}: too few attributes")
    found: dict[str, str] = {}
    for name, field in zip(expected, fields, strict=False):
        if not field.startswith(name + "="):
            raise SaslAuthenticationError(f"invalid SCRAM {what}: expected {name}=")
        found[name] = field[len(name) + 1 :]
    return found, fields[len(expected) :]


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str
    authzid: str | None
    username: str
    nonce: str
    bare: str
    extensions: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> ClientFirst:
        # gs2-header = gs2-cbind-flag "," [ authzid ] ","
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise SaslAuthenticationError("invalid SCRAM client-first message")
        flag, authz, bare = parts
        if flag == "p" or flag.startswith("p="):
            raise SaslAuthenticationError("SCRAM channel binding is not supported")
        if flag not in ("n", "y"):
            raise SaslAuthenticationError("invalid SCRAM client-first message: bad gs2 flag")
        authzid: str | None = None
        if authz:
            if not authz.startswith("a="):
                raise SaslAuthenticationError("invalid SCRAM client-first message: bad authzid")
            authzid = decode_saslname(authz[2:])
        if bare.startswith("m="):
            raise SaslAuthenticationError("SCRAM mandatory extensions are not supported")
        found, rest = _attributes(bare, ("n", "r"), "client-first message")
        username = decode_saslname(found["n"])
        nonce = found["r"]
        if not username or not nonce or not _printable(nonce):
            raise SaslAuthenticationError("invalid SCRAM client-first message: empty user or nonce")
        extensions: dict[str, str] = {}
        for ext in rest:
            key, sep, value = ext.partition("=")
            if not sep or not key:
                raise SaslAuthenticationError("invalid SCRAM client-first message: bad extension")
            extensions[key] = value
        return cls(f"{flag},{authz},", authzid, username, nonce, bare, extensions)


def _printable(nonce: str) -> bool:
    """RFC 5802: the nonce is printable ASCII without ``,``."""
    return all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


class _ServerState(enum.Enum):
    RECEIVE_CLIENT_FIRST = "receive client-first"
    RECEIVE_CLIENT_FINAL = "receive client-final"
    COMPLETE = "complete"
    FAILED = "failed"


CredentialLookup = Callable[[str, ScramMechanism], "ScramCredential | None"]


class ScramServer:
    """One SCRAM exchange on the server side.

    ``step(client_message) -> server_message`` twice; after the second
    ``complete`` is True and ``username`` is the authenticated user. Any error
    raises ``SaslAuthenticationError`` and leaves the exchange failed for good.
    An unknown user is not revealed early: the exchange continues with a
    made-up credential and fails at the proof, as a wrong password does.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        *,
        nonce: str | None = None,
        fake_salt_key: bytes | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = nonce or secrets.token_urlsafe(_NONCE_BYTES)
        self._fake_salt_key = fake_salt_key or secrets.token_bytes(32)
        self._state = _ServerState.RECEIVE_CLIENT_FIRST
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._user_known = False
        self.username: str | None = None
        #: Kafka's "tokenauth" extension marks delegation-token logins (not supported).
        self.extensions: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self._state is _ServerState.COMPLETE

    def step(self, message: bytes) -> bytes:
        try:
            return self._step(message)
        except SaslAuthenticationError:
            self._state = _ServerState.FAILED
            raise

    def _step(self, message: bytes) -> bytes:
        if len(message) > MAX_MESSAGE_BYTES:
            raise SaslAuthenticationError("SCRAM message too long")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("invalid SCRAM message: not UTF-8") from None
        if self._state is _ServerState.RECEIVE_CLIENT_FIRST:
            return self._client_first(text)
        if self._state is _ServerState.RECEIVE_CLIENT_FINAL:
            return self._client_final(text)
        raise IllegalSaslStateError(f"SCRAM exchange already {self._state.value}")

    def _client_first(self, text: str) -> bytes:
        first = ClientFirst.parse(text)
        if first.authzid is not None and first.authzid != first.username:
            raise SaslAuthenticationError(
                "Authentication failed: client requested an authorization id "
                "that is different from username"
            )
        if first.extensions.get("tokenauth", "").lower() == "true":
            raise SaslAuthenticationError("delegation tokens are not supported")
        credential = self._lookup(first.username, self.mechanism)
        self._user_known = credential is not None
        if credential is None:
            credential = self._fake_credential(first.username)
        self._first, self._credential, self.extensions = first, credential, first.extensions
        nonce = first.nonce + self._server_nonce
        self._server_first = f"r={nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = _ServerState.RECEIVE_CLIENT_FINAL
        return self._server_first.encode("ascii")

    def _fake_credential(self, username: str) -> ScramCredential:
        """A stable salt per unknown name, so probing twice shows no difference."""
        salt = hmac.new(self._fake_salt_key, username.encode(), "sha256").digest()
        key = secrets.token_bytes(self.mechanism.digest_size)
        return ScramCredential(salt, key, key, DEFAULT_ITERATIONS)

    def _client_final(self, text: str) -> bytes:
        assert self._first is not None and self._credential is not None
        without_proof, sep, proof_field = text.rpartition(",")
        if not sep or not proof_field.startswith("p="):
            raise SaslAuthenticationError("invalid SCRAM client-final message: no proof")
        found, _extensions = _attributes(without_proof, ("c", "r"), "client-final message")
        channel = _unb64(found["c"], "channel binding")
        if channel != self._first.gs2_header.encode("utf-8"):
            raise SaslAuthenticationError("invalid SCRAM client-final message: channel binding")
        # RFC 5802 wants the nonce repeated exactly; Kafka's ScramSaslServer only
        # checks that it ends with the server-first nonce, and librdkafka 2.0
        # relies on that (it sends the client nonce twice). The proof covers the
        # whole message either way, so accept what Kafka accepts.
        if not found["r"].endswith(self._first.nonce + self._server_nonce):
            raise SaslAuthenticationError("invalid SCRAM client-final message: nonce mismatch")
        proof = _unb64(proof_field[2:], "proof")
        m = self.mechanism
        if len(proof) != m.digest_size:
            raise SaslAuthenticationError("invalid SCRAM client-final message: proof length")
        auth_message = f"{self._first.bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        client_signature = m.hmac(cred.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not (hmac.compare_digest(m.h(client_key), cred.stored_key) and self._user_known):
            raise SaslAuthenticationError("Authentication failed: Invalid user credentials")
        self.username = self._first.username
        self._state = _ServerState.COMPLETE
        return f"v={_b64(m.hmac(cred.server_key, auth_message))}".encode("ascii")


class ScramClient:
    """The client side: ``first()``, then ``final(server_first)``, then ``verify(server_final)``."""

    def __init__(
        self, mechanism: ScramMechanism, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(_NONCE_BYTES)
        self._bare = f"n={encode_saslname(username)},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8")
        found, _ = _attributes(text, ("r", "s", "i"), "server-first message")
        if not found["r"].startswith(self._nonce):
            raise SaslAuthenticationError("server nonce does not extend the client nonce")
        iterations = int(found["i"])
        m = self.mechanism
        self._salted = m.hi(
            normalize_password(self._password), _unb64(found["s"], "salt"), iterations
        )
        without_proof = f"c={_b64(b'n,,')},r={found['r']}"
        self._auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = m.hmac(self._salted, b"Client Key")
        signature = m.hmac(m.h(client_key), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8")
        if text.startswith("e="):
            raise SaslAuthenticationError(f"server refused: {text[2:]}")
        m = self.mechanism
        expected = m.hmac(m.hmac(self._salted, b"Server Key"), self._auth_message)
        if not text.startswith("v=") or not hmac.compare_digest(_unb64(text[2:], "v"), expected):
            raise SaslAuthenticationError("server signature does not verify")
