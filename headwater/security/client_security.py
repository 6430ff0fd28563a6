"""How Headwater's own client authenticates: TLS and SASL settings, and the SASL dialogue.

Read from the keys client configs already use (Java's and librdkafka's):
``security.protocol``, ``sasl.mechanism`` / ``sasl.mechanisms``,
``sasl.username`` / ``sasl.password`` or Java's ``sasl.jaas.config``
(``... required username="u" password="p";``), ``ssl.ca.location`` /
``ssl.truststore.location`` (PEM), ``ssl.certificate.location`` /
``ssl.key.location`` or a PEM ``ssl.keystore.location`` holding both (mTLS),
``ssl.key.password`` / ``ssl.keystore.password``,
``ssl.endpoint.identification.algorithm`` (empty: no host name check). The
replica fetcher of a cluster uses the same object to authenticate as the
broker principal.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from headwater.security.errors import SaslAuthenticationError
from headwater.security.scram import ScramClient, ScramMechanisms

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: (api key, body) -> decoded response: the connection's request method.
Exchange = Callable[[int, dict[str, Any], int], Awaitable[Any]]

_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36

CLIENT_SECURITY_KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "ssl.ca.location",
    "ssl.truststore.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
)
"""The client keys ``from_properties`` reads (Java's and librdkafka's names)."""

_JAAS_OPTION = re.compile(r'\b(username|password)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;]+)')


def jaas_credentials(jaas: str) -> tuple[str | None, str | None]:
    """``username`` and ``password`` of a JAAS line (``PlainLoginModule required username=...``)."""
    found: dict[str, str] = {}
    for key, raw in _JAAS_OPTION.findall(jaas):
        found[key] = re.sub(r"\\(.)", r"\1", raw[1:-1]) if raw.startswith('"') else raw
    return found.get("username"), found.get("password")


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = None
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise ValueError(f"security.protocol must be one of {', '.join(PROTOCOLS)}")
        mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "PLAIN").upper()
        if mechanism != "PLAIN" and ScramMechanisms.by_name(mechanism) is None:
            raise ValueError(f"unsupported sasl.mechanism {mechanism}")
        context = None
        check_hostname = props.get("ssl.endpoint.identification.algorithm", "https") != ""
        if protocol in ("SSL", "SASL_SSL"):
            ca = props.get("ssl.ca.location") or props.get("ssl.truststore.location")
            context = ssl.create_default_context(cafile=ca)
            context.check_hostname = check_hostname
            cert = props.get("ssl.certificate.location") or props.get("ssl.keystore.location")
            if cert:
                key_password = props.get("ssl.key.password") or props.get("ssl.keystore.password")
                context.load_cert_chain(cert, props.get("ssl.key.location"), key_password)
        username = props.get("sasl.username")
        password = props.get("sasl.password")
        if props.get("sasl.jaas.config") and (not username or password is None):
            jaas_user, jaas_password = jaas_credentials(props["sasl.jaas.config"])
            username = username or jaas_user
            password = password if password is not None else jaas_password
        if protocol.startswith("SASL") and (not username or password is None):
            raise ValueError(
                "SASL needs sasl.username and sasl.password (or sasl.jaas.config with both)"
            )
        return cls(protocol, context, mechanism, username, password, check_hostname)


async def authenticate(security: ClientSecurity, request: Exchange) -> None:
    """SaslHandshake v1 then SaslAuthenticate round trips (KIP-152); raises on refusal."""
    assert security.username is not None and security.password is not None
    mechanism = security.sasl_mechanism
    hs = await request(_SASL_HANDSHAKE, {"mechanism": mechanism}, 1)
    if int(hs.error_code):
        raise SaslAuthenticationError(
            f"broker refused SASL mechanism {mechanism} (error {int(hs.error_code)}; "
            f"enabled: {', '.join(hs.mechanisms)})"
        )

    async def step(token: bytes) -> bytes:
        r = await request(_SASL_AUTHENTICATE, {"auth_bytes": token}, 1)
        if int(r.error_code):
            raise SaslAuthenticationError(r.error_message or f"error {int(r.error_code)}")
        return bytes(r.auth_bytes)

    if mechanism == "PLAIN":
        await step(f"\0{security.username}\0{security.password}".encode())
        return
    scram = ScramMechanisms.by_name(mechanism)
    assert scram is not None
    client = ScramClient(scram, security.username, security.password)
    server_first = await step(client.first())
    client.verify(await step(client.final(server_first)))
