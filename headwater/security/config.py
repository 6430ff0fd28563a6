"""Security settings under Kafka's key names, read from the broker's properties."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from headwater.security.authorizer import KNOWN_AUTHORIZERS, parse_super_users
from headwater.security.sasl import DEFAULT_MAX_TOKEN_BYTES, KNOWN_MECHANISMS

LISTENER_PREFIX = "listener.name."
INTER_BROKER_KEYS = frozenset(
    {
        "inter.broker.listener.name",
        "security.inter.broker.protocol",
        "sasl.mechanism.inter.broker.protocol",
    }
)
_OTHER_KEYS = frozenset(
    {
        "listener.security.protocol.map",
        "connections.max.reauth.ms",
        "connection.failed.authentication.delay.ms",
        "authorizer.class.name",
        "super.users",
        "allow.everyone.if.no.acl.found",
        "quota.window.size.seconds",
        "quota.window.num",
    }
)


def is_security_key(key: str) -> bool:
    """Read by the security settings (the broker's config leaves these to them)."""
    return (
        key.startswith(("ssl.", "sasl.", LISTENER_PREFIX))
        or key in INTER_BROKER_KEYS
        or key in _OTHER_KEYS
    )


def _bool(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _list(value: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (value or "").split(",") if v.strip())


@dataclass(frozen=True)
class TlsConfig:
    """``ssl.*`` keys (PEM keystores only: ``ssl.keystore.type=PEM``)."""

    keystore_location: str | None = None
    keystore_key: str | None = None
    keystore_certificate_chain: str | None = None
    key_password: str | None = None
    truststore_location: str | None = None
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    handshake_timeout_ms: int = 30_000

    @property
    def configured(self) -> bool:
        return bool(self.keystore_location or self.keystore_key)


@dataclass(frozen=True)
class SecurityConfig:
    tls: TlsConfig = field(default_factory=TlsConfig)
    #: Kafka's default is GSSAPI, which Headwater does not speak; SCRAM is ours.
    sasl_enabled_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")
    sasl_max_token_bytes: int = DEFAULT_MAX_TOKEN_BYTES
    connections_max_reauth_ms: int = 0
    failed_authentication_delay_ms: int = 100
    authorizer_class_name: str = ""
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    quota_window_size_seconds: int = 1
    quota_window_num: int = 11
    #: The security keys as given (``ssl.*``, ``sasl.*``, ``listener.name.*``, inter-broker
    #: keys), for per-listener resolution and the inter-broker client.
    raw: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def acls_enabled(self) -> bool:
        return bool(self.authorizer_class_name)

    def for_listener(self, name: str) -> SecurityConfig:
        """The settings of one listener: ``listener.name.<listener>.<key>`` (listener
        name in lower case) wins over ``<key>``, as in Kafka's config resolution.

        Per listener: the ``ssl.*`` keys and ``sasl.enabled.mechanisms`` (and any
        other key of this class, though Kafka only documents those).
        """
        prefix = f"{LISTENER_PREFIX}{name.lower()}."
        overrides = {k[len(prefix) :]: v for k, v in self.raw.items() if k.startswith(prefix)}
        if not overrides:
            return self
        return SecurityConfig.from_properties({**self.raw, **overrides})

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> SecurityConfig:
        raw = {k: v for k, v in props.items() if is_security_key(k)}
        client_auth = props.get("ssl.client.auth", "none").strip().lower()
        if client_auth not in ("none", "requested", "required"):
            raise ValueError("ssl.client.auth must be none, requested or required")
        store_type = props.get("ssl.keystore.type", "PEM").strip().upper()
        if store_type != "PEM":
            raise ValueError("ssl.keystore.type: only PEM keystores are supported")
        tls = TlsConfig(
            keystore_location=props.get("ssl.keystore.location") or None,
            keystore_key=props.get("ssl.keystore.key") or None,
            keystore_certificate_chain=props.get("ssl.keystore.certificate.chain") or None,
            key_password=props.get("ssl.key.password") or None,
            truststore_location=props.get("ssl.truststore.location") or None,
            client_auth=client_auth,
            enabled_protocols=_list(props.get("ssl.enabled.protocols"))
            or TlsConfig.enabled_protocols,
            cipher_suites=_list(props.get("ssl.cipher.suites")),
        )
        mechanisms = tuple(m.upper() for m in _list(props.get("sasl.enabled.mechanisms")))
        unknown = [m for m in mechanisms if m not in KNOWN_MECHANISMS]
        if unknown:
            raise ValueError(
                f"sasl.enabled.mechanisms: unsupported {', '.join(unknown)} "
                f"(supported: {', '.join(KNOWN_MECHANISMS)})"
            )
        authorizer = props.get("authorizer.class.name", "").strip()
        if authorizer and authorizer not in KNOWN_AUTHORIZERS:
            raise ValueError(
                f"authorizer.class.name {authorizer!r} is not known; use one of "
                + ", ".join(sorted(KNOWN_AUTHORIZERS))
            )
        return cls(
            tls=tls,
            sasl_enabled_mechanisms=mechanisms or cls.sasl_enabled_mechanisms,
            sasl_max_token_bytes=int(
                props.get("sasl.server.max.receive.size", DEFAULT_MAX_TOKEN_BYTES)
            ),
            connections_max_reauth_ms=int(props.get("connections.max.reauth.ms", 0)),
            failed_authentication_delay_ms=int(
                props.get("connection.failed.authentication.delay.ms", 100)
            ),
            authorizer_class_name=authorizer,
            super_users=tuple(parse_super_users(props.get("super.users"))),
            allow_everyone_if_no_acl_found=_bool(
                props.get("allow.everyone.if.no.acl.found", "false")
            ),
            quota_window_size_seconds=int(props.get("quota.window.size.seconds", 1)),
            quota_window_num=int(props.get("quota.window.num", 11)),
            raw=MappingProxyType(raw),
        )
