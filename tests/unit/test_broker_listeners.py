"""Listener and security settings under Kafka's key names."""

from __future__ import annotations

import pytest

from headwater.broker.config import BrokerConfig
from headwater.security.config import SecurityConfig
from headwater.security.listeners import SecurityProtocol, parse_listeners


def test_listeners_with_protocols_and_advertised_addresses() -> None:
    ls = parse_listeners(
        "PLAINTEXT://127.0.0.1:9092,INTERNAL://:9093,SASL_SSL://0.0.0.0:9094",
        "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "SASL_SSL://broker.example.com:19094",
    )
    assert [(x.name, x.protocol) for x in ls] == [
        ("PLAINTEXT", SecurityProtocol.PLAINTEXT),
        ("INTERNAL", SecurityProtocol.SASL_PLAINTEXT),
        ("SASL_SSL", SecurityProtocol.SASL_SSL),
    ]
    assert ls[0].advertised == ("127.0.0.1", 9092)
    assert ls[1].host == "0.0.0.0" and ls[1].advertised == ("127.0.0.1", 9093)
    assert ls[2].advertised == ("broker.example.com", 19094)
    assert ls[2].protocol.uses_tls and ls[2].protocol.uses_sasl


@pytest.mark.parametrize(
    ("listeners", "protocol_map", "advertised", "message"),
    [
        ("CUSTOM://:1", None, None, "no security protocol"),
        ("PLAINTEXT://:1,PLAINTEXT://:2", None, None, "twice"),
        ("PLAINTEXT://:1", None, "SSL://h:2", "unknown listeners"),
        ("127.0.0.1:9092", None, None, "NAME://HOST:PORT"),
        ("X://:1", "X:KERBEROS", None, "unknown security protocol"),
    ],
)
def test_bad_listener_settings_are_refused(
    listeners: str, protocol_map: str | None, advertised: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse_listeners(listeners, protocol_map, advertised)


def test_broker_config_reads_listeners_and_security_keys() -> None:
    cfg = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093",
            "sasl.enabled.mechanisms": "scram-sha-512,PLAIN",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:broker",
            "ssl.client.auth": "required",
            "connections.max.reauth.ms": "60000",
        }
    )
    assert (cfg.host, cfg.port) == ("127.0.0.1", 9092)
    assert [x.name for x in cfg.all_listeners] == ["PLAINTEXT", "SASL_SSL"]
    sec = cfg.security
    assert sec.sasl_enabled_mechanisms == ("SCRAM-SHA-512", "PLAIN")
    assert sec.acls_enabled and sec.super_users == ("User:admin", "User:broker")
    assert sec.tls.client_auth == "required" and sec.connections_max_reauth_ms == 60000
    assert "super.users" not in cfg.extra


def test_without_listeners_there_is_one_plaintext_listener() -> None:
    cfg = BrokerConfig()
    (only,) = cfg.all_listeners
    assert only.protocol is SecurityProtocol.PLAINTEXT and only.port == cfg.port


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "unsupported GSSAPI"),
        ({"authorizer.class.name": "com.example.Mine"}, "not known"),
        ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
        ({"ssl.keystore.type": "JKS"}, "only PEM"),
        ({"super.users": "admin"}, "TYPE:NAME"),
    ],
)
def test_bad_security_settings_are_refused(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SecurityConfig.from_properties(props)
