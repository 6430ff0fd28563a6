"""An ``ssl.SSLContext`` from Kafka's ``ssl.*`` keys (PEM keystores).

Kafka's ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain`` hold PEM
*text*, ``ssl.keystore.location`` a file with key and chain together; both
are accepted (a value starting with ``-----BEGIN`` is text, anything else a
path). Python's ``ssl`` loads keys only from files, so inline PEM goes
through a private temporary file that is removed at once.

A listener's keystore and truststore are dynamic broker configs, as in
Kafka: :class:`ListenerTlsContexts` holds each TLS listener's context and
replaces it for new connections (open ones keep their session), and
:func:`check_same_identity` is Kafka's rule that a new keystore's
certificate keeps the old one's subject and SANs unless
``ssl.allow.dn.changes`` / ``ssl.allow.san.changes`` say otherwise.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from cryptography import x509

from headwater.security.config import TlsConfig

_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


@contextlib.contextmanager
def _as_file(value: str) -> Iterator[str]:
    if not value.lstrip().startswith("-----BEGIN"):
        yield value
        return
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(value)
        yield path
    finally:
        os.unlink(path)


def server_context(cfg: TlsConfig) -> ssl.SSLContext:
    """Raises ValueError naming the key at fault when the TLS config is unusable."""
    if not cfg.configured:
        raise ValueError(
            "a TLS listener needs ssl.keystore.location, or ssl.keystore.key "
            "and ssl.keystore.certificate.chain"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = []
    for name in cfg.enabled_protocols:
        if name not in _VERSIONS:
            raise ValueError(f"ssl.enabled.protocols: unsupported {name} (use TLSv1.2, TLSv1.3)")
        versions.append(_VERSIONS[name])
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    if cfg.cipher_suites:
        try:
            ctx.set_ciphers(":".join(cfg.cipher_suites))
        except ssl.SSLError as exc:
            raise ValueError(f"ssl.cipher.suites: no usable cipher ({exc})") from None
    if not cfg.keystore_location and not (cfg.keystore_certificate_chain and cfg.keystore_key):
        raise ValueError("ssl.keystore.key needs ssl.keystore.certificate.chain")
    _load_keystore(ctx, cfg)
    if cfg.truststore_location:
        try:
            ctx.load_verify_locations(cafile=cfg.truststore_location)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"cannot load ssl.truststore.location: {exc}") from None
    if cfg.client_auth != "none" and not cfg.truststore_location:
        raise ValueError("ssl.client.auth needs ssl.truststore.location to verify clients")
    ctx.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[cfg.client_auth]
    return ctx


def client_context(cfg: TlsConfig, *, check_hostname: bool) -> ssl.SSLContext:
    """The broker as a TLS client of its peers (inter-broker traffic).

    Trusts ``ssl.truststore.location`` (else the system's CAs) and presents the
    keystore as its certificate, so a peer that requires client certificates
    accepts it, as Kafka's inter-broker client does with the same keys.
    """
    ctx = ssl.create_default_context(cafile=cfg.truststore_location)
    ctx.check_hostname = check_hostname
    versions = [_VERSIONS[n] for n in cfg.enabled_protocols if n in _VERSIONS]
    if versions:
        ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    _load_keystore(ctx, cfg)
    return ctx


def _load_keystore(ctx: ssl.SSLContext, cfg: TlsConfig) -> None:
    """The keystore (a file with key and chain, or inline PEM key and chain), if any."""
    try:
        if cfg.keystore_location:
            with _as_file(cfg.keystore_location) as path:
                ctx.load_cert_chain(path, password=cfg.key_password)
        elif cfg.keystore_key and cfg.keystore_certificate_chain:
            with (
                _as_file(cfg.keystore_certificate_chain) as chain,
                _as_file(cfg.keystore_key) as key,
            ):
                ctx.load_cert_chain(chain, key, password=cfg.key_password)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"cannot load the TLS keystore: {exc}") from None


@dataclass(frozen=True, slots=True)
class CertificateIdentity:
    """What a client checks of a server certificate: its subject and its SANs."""

    subject: str
    subject_alt_names: frozenset[str]


def keystore_identity(cfg: TlsConfig) -> CertificateIdentity:
    """The identity of the keystore's (first, the server's own) certificate.

    Raises ValueError when the keystore holds no readable certificate.
    """
    try:
        if cfg.keystore_location:
            if cfg.keystore_location.lstrip().startswith("-----BEGIN"):
                pem = cfg.keystore_location.encode()
            else:
                with open(cfg.keystore_location, "rb") as f:
                    pem = f.read()
        else:
            pem = (cfg.keystore_certificate_chain or "").encode()
        cert = x509.load_pem_x509_certificates(pem)[0]
    except (OSError, ValueError, IndexError) as exc:
        raise ValueError(f"cannot read the keystore's certificate: {exc}") from None
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = frozenset(f"{type(n).__name__}:{n.value}" for n in sans)
    except x509.ExtensionNotFound:
        names = frozenset()
    return CertificateIdentity(cert.subject.rfc4514_string(), names)


def check_same_identity(
    before: CertificateIdentity,
    new: TlsConfig,
    *,
    allow_dn_changes: bool,
    allow_san_changes: bool,
) -> None:
    """Kafka's ``SslFactory`` check of a reloaded keystore: clients that pinned or
    verified the broker's name must still accept it. Raises ValueError."""
    if allow_dn_changes and allow_san_changes:
        return
    after = keystore_identity(new)
    if not allow_dn_changes and before.subject != after.subject:
        raise ValueError(
            f"the new keystore's certificate subject {after.subject!r} differs from the "
            f"current {before.subject!r} (set ssl.allow.dn.changes=true to allow it)"
        )
    if not allow_san_changes and before.subject_alt_names != after.subject_alt_names:
        raise ValueError(
            "the new keystore's certificate subject alternative names "
            f"{sorted(after.subject_alt_names)} differ from the current "
            f"{sorted(before.subject_alt_names)} (set ssl.allow.san.changes=true to allow it)"
        )


def _file_stamps(cfg: TlsConfig) -> tuple[int, ...]:
    """Modification times of the keystore and truststore files (-1: none, or inline)."""
    stamps = []
    for value in (cfg.keystore_location, cfg.truststore_location):
        try:
            if not value or value.lstrip().startswith("-----BEGIN"):
                raise OSError
            stamps.append(os.stat(value).st_mtime_ns)
        except OSError:
            stamps.append(-1)
    return tuple(stamps)


class ListenerTlsContexts:
    """The server context of each TLS listener, replaceable while the broker runs.

    The accept loop asks for a listener's context at each new connection, so
    a replaced keystore serves new connections at once; connections already
    open keep the session they negotiated (Kafka's ``SslFactory`` reload).
    Whoever else builds on a listener's keys (the broker's own client context
    toward its peers on the inter-broker listener) subscribes to replacements.
    """

    def __init__(self, configs: Mapping[str, TlsConfig]) -> None:
        self._configs: dict[str, TlsConfig] = {}
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._identities: dict[str, CertificateIdentity] = {}
        self._stamps: dict[str, tuple[int, ...]] = {}
        #: Called with (listener, new config) after each replacement.
        self.replaced: list[Callable[[str, TlsConfig], None]] = []
        for name, cfg in configs.items():
            self.replace(name, cfg, server_context(cfg))

    def context(self, listener: str) -> ssl.SSLContext | None:
        return self._contexts.get(listener)

    def config(self, listener: str) -> TlsConfig | None:
        return self._configs.get(listener)

    def identity(self, listener: str) -> CertificateIdentity | None:
        """The serving certificate's identity, read when it was loaded."""
        return self._identities.get(listener)

    def files_changed(self, listener: str) -> bool:
        """The keystore or truststore file was rewritten since it was loaded (Kafka
        reloads a keystore updated in place when its unchanged path is set again)."""
        cfg = self._configs.get(listener)
        return cfg is not None and _file_stamps(cfg) != self._stamps.get(listener)

    def replace(self, listener: str, cfg: TlsConfig, ctx: ssl.SSLContext) -> None:
        """Serve ``listener``'s new connections with ``ctx`` (built from ``cfg``)."""
        self._stamps[listener] = _file_stamps(cfg)
        self._configs[listener] = cfg
        self._contexts[listener] = ctx
        try:
            self._identities[listener] = keystore_identity(cfg)
        except ValueError:  # a keystore cryptography cannot read: no identity check
            self._identities.pop(listener, None)
        for subscriber in self.replaced:
            subscriber(listener, cfg)
