"""The server SSLContext from Kafka's ssl.* keys, and the mTLS principal."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from headwater.security.config import TlsConfig
from headwater.security.principal import principal_from_certificate, subject_to_rfc2253
from headwater.security.tls import server_context
from tests.integration.tls_certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_keystore_location_with_key_and_chain_in_one_file(certs: Certs) -> None:
    ctx = server_context(TlsConfig(keystore_location=str(certs.server_keystore)))
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3


def test_inline_pem_key_and_chain_and_client_auth(certs: Certs) -> None:
    ctx = server_context(
        TlsConfig(
            keystore_key=certs.server_key.read_text(),
            keystore_certificate_chain=certs.server_cert.read_text(),
            truststore_location=str(certs.ca),
            client_auth="required",
            enabled_protocols=("TLSv1.3",),
        )
    )
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"keystore_location": None}, "needs ssl.keystore.location"),
        ({"keystore_location": "/nonexistent.pem"}, "cannot load the TLS keystore"),
        ({"enabled_protocols": ("TLSv1.1",)}, "unsupported TLSv1.1"),
        ({"cipher_suites": ("NOT-A-CIPHER",)}, "no usable cipher"),
        ({"client_auth": "required"}, "needs ssl.truststore.location"),
    ],
)
def test_unusable_tls_settings_name_the_key(
    certs: Certs, kw: dict[str, object], message: str
) -> None:
    base: dict[str, object] = {"keystore_location": str(certs.server_keystore)}
    with pytest.raises(ValueError, match=message):
        server_context(TlsConfig(**{**base, **kw}))  # type: ignore[arg-type]


def test_encrypted_key_needs_ssl_key_password(certs: Certs, tmp_path: Path) -> None:
    import subprocess

    enc = tmp_path / "enc.key"
    subprocess.run(["openssl", "pkey", "-in", str(certs.server_key), "-aes256", "-passout",
                    "pass:s3cret", "-out", str(enc)], check=True)  # fmt: skip
    chain = certs.server_cert.read_text()
    with pytest.raises(ValueError, match="keystore"):
        server_context(TlsConfig(keystore_key=enc.read_text(), keystore_certificate_chain=chain,
                                 key_password="wrong"))  # fmt: skip
    server_context(TlsConfig(keystore_key=enc.read_text(), keystore_certificate_chain=chain,
                             key_password="s3cret"))  # fmt: skip


def test_subject_is_written_as_javas_x500principal_does() -> None:
    subject = (
        (("countryName", "US"),),
        (("organizationName", "Acme, Inc."),),
        (("organizationalUnitName", "eng"),),
        (("commonName", "alice"),),
    )
    assert subject_to_rfc2253(subject) == "CN=alice,OU=eng,O=Acme\\, Inc.,C=US"
    assert str(principal_from_certificate({"subject": subject})) == (
        "User:CN=alice,OU=eng,O=Acme\\, Inc.,C=US"
    )
    assert str(principal_from_certificate(None)) == "User:ANONYMOUS"
