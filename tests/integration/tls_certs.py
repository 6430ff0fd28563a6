"""Test certificates made at test time with the ``openssl`` command (no keys committed).

A CA, a server certificate for 127.0.0.1/localhost and client certificates
signed by the CA, all PEM, in a temporary directory.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    #: key and chain in one file, for ssl.keystore.location
    server_keystore: Path

    def client(self, subject: str, name: str) -> tuple[Path, Path]:
        """A CA-signed client certificate and key for ``subject`` (e.g. /CN=alice/O=Acme)."""
        key, csr, cert = (
            self.dir / f"{name}.key",
            self.dir / f"{name}.csr",
            self.dir / f"{name}.pem",
        )
        _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key.name,
                 "-out", csr.name, "-subj", subject, cwd=self.dir)  # fmt: skip
        _openssl("x509", "-req", "-in", csr.name, "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", cert.name, "-days", "2", cwd=self.dir)  # fmt: skip
        return cert, key


def make_certs(directory: Path) -> Certs:
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=Headwater Test CA", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
             "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)  # fmt: skip
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2", "-sha256",
             "-extfile", "san.ext", cwd=d)  # fmt: skip
    keystore = d / "server-keystore.pem"
    keystore.write_text((d / "server.key").read_text() + (d / "server.pem").read_text())
    return Certs(d, d / "ca.pem", d / "server.pem", d / "server.key", keystore)
