"""Kafka principals (``User:alice``) and the default TLS principal builder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``Type:name``; raises ValueError without the colon (Kafka does too)."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"a principal is TYPE:NAME, got {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal(USER_TYPE, name)


# RFC 2253 attribute keywords Java's X500Principal.getName() prints by name;
# anything else appears as its OID there, but Python's ssl module only gives
# names, so we print the long names it knows in their RFC 2253 short form.
_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape_rfc2253(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def subject_to_rfc2253(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The certificate subject as Java's ``X500Principal.getName()`` writes it.

    Python's ``getpeercert()['subject']`` lists RDNs in certificate order;
    RFC 2253 writes them last first, which is what Kafka's default principal
    builder puts after ``User:`` (e.g. ``CN=alice,OU=eng,O=Acme``).
    """
    rdns = []
    for rdn in reversed(subject):
        parts = [f"{_RFC2253_KEYWORDS.get(k, k)}={_escape_rfc2253(v)}" for k, v in rdn]
        rdns.append("+".join(parts))
    return ",".join(rdns)


def principal_from_certificate(cert: dict[str, Any] | None) -> KafkaPrincipal:
    """``User:<subject>`` for a verified client certificate, else ANONYMOUS."""
    if not cert or not cert.get("subject"):
        return ANONYMOUS
    return user(subject_to_rfc2253(cert["subject"]))
