"""SCRAM credentials: salted, iterated keys per user and mechanism, never passwords.

``CredentialStore`` is the interface the SASL mechanisms and the
Alter/DescribeUserScramCredentials APIs use. ``FileCredentialStore`` keeps
them in one JSON file in the data directory (mode 0600), which is right for
one broker; a cluster must keep them in ZooKeeper (Kafka's
``/config/users/<name>``), behind this same interface.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Protocol

from headwater.security.durable_json import read_json, write_json
from headwater.security.scram import ScramCredential, ScramMechanism, ScramMechanisms

FILE_NAME = "scram-credentials.json"
_VERSION = 1


class CredentialStore(Protocol):
    def get(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None: ...

    def upsert(
        self, username: str, mechanism: ScramMechanism, credential: ScramCredential
    ) -> None: ...

    def delete(self, username: str, mechanism: ScramMechanism) -> bool:
        """False when the user had no credential for the mechanism."""
        ...

    def describe(self) -> dict[str, dict[str, int]]:
        """``{user: {mechanism name: iterations}}``; no keys, ever."""
        ...


class InMemoryCredentialStore:
    """The store's rules without a file: for tests and as the file store's core."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def get(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._users.get(username, {}).get(mechanism.mechanism_name)

    def upsert(self, username: str, mechanism: ScramMechanism, credential: ScramCredential) -> None:
        if not username:
            raise ValueError("user name must not be empty")
        self._users.setdefault(username, {})[mechanism.mechanism_name] = credential
        self._changed()

    def delete(self, username: str, mechanism: ScramMechanism) -> bool:
        creds = self._users.get(username)
        if not creds or mechanism.mechanism_name not in creds:
            return False
        del creds[mechanism.mechanism_name]
        if not creds:
            del self._users[username]
        self._changed()
        return True

    def describe(self) -> dict[str, dict[str, int]]:
        return {
            name: {mech: cred.iterations for mech, cred in sorted(creds.items())}
            for name, creds in sorted(self._users.items())
        }

    def _changed(self) -> None:
        """Hook for durable subclasses."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class FileCredentialStore(InMemoryCredentialStore):
    """Credentials in ``<data dir>/scram-credentials.json``, rewritten atomically."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._load()

    @classmethod
    def in_dir(cls, data_dir: Path) -> FileCredentialStore:
        return cls(data_dir / FILE_NAME)

    def _load(self) -> None:
        doc = read_json(self.path, {"version": _VERSION, "users": {}})
        if doc.get("version") != _VERSION:
            raise ValueError(f"{self.path}: unknown credential file version {doc.get('version')}")
        for name, creds in doc["users"].items():
            for mech_name, c in creds.items():
                mech = ScramMechanisms.by_name(mech_name)
                if mech is None:
                    raise ValueError(f"{self.path}: unknown mechanism {mech_name}")
                self._users.setdefault(name, {})[mech_name] = ScramCredential(
                    salt=base64.b64decode(c["salt"]),
                    stored_key=base64.b64decode(c["stored_key"]),
                    server_key=base64.b64decode(c["server_key"]),
                    iterations=int(c["iterations"]),
                )

    def _changed(self) -> None:
        doc = {
            "version": _VERSION,
            "users": {
                name: {
                    mech: {
                        "salt": _b64(c.salt),
                        "stored_key": _b64(c.stored_key),
                        "server_key": _b64(c.server_key),
                        "iterations": c.iterations,
                    }
                    for mech, c in creds.items()
                }
                for name, creds in self._users.items()
            },
        }
        write_json(self.path, doc)
