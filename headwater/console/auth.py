"""Who may use the console: the user file, password hashes, sessions and CSRF tokens.

The console has no user database of its own. A console bound to anything
but a loopback address requires a *user file*: one ``name:hash`` a line,
the hash either an argon2 PHC string (``$argon2id$...``, as ``argon2-cffi``
and most password tools write) or a scrypt one in the same PHC shape
(``$scrypt$ln=15,r=8,p=1$SALT$HASH``, base64 without padding, computed with
``hashlib.scrypt``: no extra dependency for the default). ``headwater
console --add-user NAME --users FILE`` writes the scrypt form.

A session is a signed cookie (itsdangerous, keyed by a secret made at
start-up, so a restart logs everyone out): the user name and the session's
CSRF token. Every write (POST) must carry that token, in a form field or
the ``X-CSRF-Token`` header htmx sends, and the cookie is ``SameSite=Strict``
as well: both defences, as OWASP recommends.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from itsdangerous import BadSignature, URLSafeTimedSerializer

#: scrypt cost: N = 2**15, r = 8, p = 1 (OWASP's minimum is 2**17 with r=8, p=1 for
#: interactive logins on servers; 2**15 keeps a login under 0.1 s on a loaded 2-core box
#: while staying far beyond brute force of a decent password). Stored per hash, so raising
#: it later keeps old hashes valid.
SCRYPT_LOG_N: Final = 15
SCRYPT_R: Final = 8
SCRYPT_P: Final = 1
SESSION_MAX_AGE_S: Final = 12 * 3600
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class UserFileError(ValueError):
    """A user file that cannot be used, with the line at fault."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def hash_password_scrypt(
    password: str, *, log_n: int = SCRYPT_LOG_N, r: int = SCRYPT_R, p: int = SCRYPT_P
) -> str:
    """A scrypt hash in PHC form, with a fresh 16-byte salt."""
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, log_n, r, p)
    return f"$scrypt$ln={log_n},r={r},p={p}${_b64(salt)}${_b64(digest)}"


def _scrypt(password: str, salt: bytes, log_n: int, r: int, p: int) -> bytes:
    n = 1 << log_n
    # hashlib needs maxmem above 128 * N * r bytes (32 MiB at the defaults).
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, dklen=32, maxmem=256 * n * r + (1 << 20)
    )


def verify_password(stored: str, password: str) -> bool:
    """True if ``password`` matches ``stored`` (scrypt or argon2); malformed hashes never match."""
    if stored.startswith("$argon2"):
        try:
            return bool(PasswordHasher().verify(stored, password))
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False
    if stored.startswith("$scrypt$"):
        try:
            _, _, params, salt, digest = stored.split("$")
            fields = dict(item.split("=", 1) for item in params.split(","))
            log_n, r, p = int(fields["ln"]), int(fields["r"]), int(fields["p"])
            expected = _unb64(digest)
            actual = _scrypt(password, _unb64(salt), log_n, r, p)
        except (ValueError, KeyError):
            return False
        return hmac.compare_digest(expected, actual[: len(expected)]) and len(expected) == 32
    return False


def check_hash_format(stored: str) -> str | None:
    """Why ``stored`` is not a hash the console can verify, or None if it is."""
    if stored.startswith(("$argon2id$", "$argon2i$", "$argon2d$")):
        return None
    if stored.startswith("$scrypt$"):
        parts = stored.split("$")
        if len(parts) != 5:
            return "a scrypt hash is $scrypt$ln=N,r=R,p=P$SALT$HASH"
        try:
            fields = dict(item.split("=", 1) for item in parts[2].split(","))
            if not {"ln", "r", "p"} <= fields.keys():
                return "a scrypt hash names ln, r and p"
            for key in ("ln", "r", "p"):
                int(fields[key])
            _unb64(parts[3])
            if len(_unb64(parts[4])) != 32:
                return "a scrypt hash is 32 bytes"
        except ValueError:
            return "a scrypt hash's parameters are numbers and its salt and hash base64"
        return None
    return "not a scrypt ($scrypt$...) or argon2 ($argon2id$...) hash; plain passwords are refused"


def parse_user_file(text: str, source: str = "user file") -> dict[str, str]:
    """``name:hash`` lines (``#`` comments and blank lines skipped) as name -> hash."""
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, stored = line.partition(":")
        name, stored = name.strip(), stored.strip()
        if not sep or not name or not stored:
            raise UserFileError(f"{source}:{number}: expected NAME:HASH")
        problem = check_hash_format(stored)
        if problem:
            raise UserFileError(f"{source}:{number}: user {name!r}: {problem}")
        if name in users:
            raise UserFileError(f"{source}:{number}: user {name!r} appears twice")
        users[name] = stored
    if not users:
        raise UserFileError(f"{source}: no users")
    return users


def load_user_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserFileError(f"{path}: {exc.strerror or exc}") from None
    return parse_user_file(text, str(path))


def add_user_line(text: str, name: str, password: str) -> str:
    """The user file ``text`` with ``name`` set to a fresh scrypt hash of ``password``."""
    if not name or ":" in name or name != name.strip():
        raise UserFileError(f"user name {name!r}: no colons or surrounding spaces")
    kept = [
        line
        for line in text.splitlines()
        if line.partition(":")[0].strip() != name or line.lstrip().startswith("#")
    ]
    kept.append(f"{name}:{hash_password_scrypt(password)}")
    return "\n".join(kept) + "\n"


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` keeps the console on this machine.

    Only the loopback names themselves count: 127.0.0.2 is loopback on Linux,
    but "elsewhere than 127.0.0.1, ::1 or localhost" is the rule an operator can
    check at a glance, and a wildcard (0.0.0.0, ::) is never loopback.
    """
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")) in (
            ipaddress.ip_address("127.0.0.1"),
            ipaddress.ip_address("::1"),
        )
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Session:
    """What the signed cookie holds: who (None: anonymous, on loopback) and the CSRF token."""

    user: str | None
    csrf: str


class SessionCodec:
    """Signs and reads session cookies; a bad or expired cookie reads as no session."""

    def __init__(self, secret: str | None = None, max_age_s: int = SESSION_MAX_AGE_S) -> None:
        self._serializer = URLSafeTimedSerializer(
            secret or secrets.token_urlsafe(32), salt="headwater-console-session"
        )
        self.max_age_s = max_age_s

    def new(self, user: str | None) -> Session:
        return Session(user, secrets.token_urlsafe(24))

    def dumps(self, session: Session) -> str:
        return str(self._serializer.dumps({"u": session.user, "c": session.csrf}))

    def loads(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        try:
            data = self._serializer.loads(cookie, max_age=self.max_age_s)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("c"), str):
            return None
        user = data.get("u")
        return Session(user if isinstance(user, str) else None, data["c"])


def csrf_ok(session: Session | None, submitted: str | None) -> bool:
    """A write is accepted only with the session's own token (constant-time compare)."""
    if session is None or not submitted:
        return False
    return hmac.compare_digest(session.csrf.encode(), submitted.encode())


def authenticate(users: Mapping[str, str], name: str, password: str) -> bool:
    """Verify a login; an unknown user costs a hash too, so timing does not reveal names."""
    stored = users.get(name)
    if stored is None:
        verify_password(_DUMMY_HASH, password)
        return False
    return verify_password(stored, password)


_DUMMY_HASH: Final = (
    "$scrypt$ln=15,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
)
