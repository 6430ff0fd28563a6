"""Inter-broker listener, credentials and per-listener settings, as Kafka resolves them."""

from __future__ import annotations

import json

import pytest

from headwater.broker.config import BrokerConfig
from headwater.cluster import zk_layout
from headwater.security.inter_broker import inter_broker_settings, jaas_credentials

LISTENERS = "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093,EXTERNAL://127.0.0.1:9094"
MAP = "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_PLAINTEXT"


def config(**extra: str) -> BrokerConfig:
    props = {"listeners": LISTENERS, "listener.security.protocol.map": MAP}
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return BrokerConfig.from_properties(props)


def settings(c: BrokerConfig):  # type: ignore[no-untyped-def]
    return inter_broker_settings(c.security, c.all_listeners)


def test_default_is_the_plaintext_listener_without_credentials() -> None:
    s = settings(config())
    assert s.listener.name == "PLAINTEXT"
    assert s.security.protocol == "PLAINTEXT" and s.security.username is None


def test_named_sasl_listener_takes_the_listener_prefixed_jaas_line() -> None:
    c = BrokerConfig.from_properties(
        {
            "listeners": LISTENERS,
            "listener.security.protocol.map": MAP,
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="broker" password="p\\"w";'
            ),
        }
    )
    s = settings(c)
    assert s.listener.name == "INTERNAL"
    assert (s.security.protocol, s.security.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-512")
    assert (s.security.username, s.security.password) == ("broker", 'p"w')
    # These keys are the security settings', not unknown extras.
    assert "inter.broker.listener.name" not in c.extra
    assert not any(k.startswith("listener.name.") for k in c.extra)


def test_security_inter_broker_protocol_picks_the_listener_of_that_name() -> None:
    c = BrokerConfig.from_properties(
        {"listeners": "SSL://h:1,PLAINTEXT://h:2", "security.inter.broker.protocol": "PLAINTEXT"}
    )
    assert settings(c).listener.name == "PLAINTEXT"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"inter_broker_listener_name": "NOPE"}, "names no listener"),
        (
            {"inter_broker_listener_name": "INTERNAL", "security_inter_broker_protocol": "SSL"},
            "only one of",
        ),
        ({"inter_broker_listener_name": "INTERNAL"}, "sasl.jaas.config"),
    ],
)
def test_unusable_settings_are_refused_with_the_key_named(
    extra: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        settings(config(**extra))


def test_mechanism_must_be_enabled_on_the_listener() -> None:
    c = BrokerConfig.from_properties(
        {
            "listeners": LISTENERS,
            "listener.security.protocol.map": MAP,
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        }
    )
    with pytest.raises(ValueError, match="not enabled on listener INTERNAL"):
        settings(c)


def test_listener_prefixed_keys_win_for_that_listener_only() -> None:
    c = BrokerConfig.from_properties(
        {
            "listeners": LISTENERS,
            "listener.security.protocol.map": MAP,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.external.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "ssl.truststore.location": "/base.pem",
            "listener.name.internal.ssl.truststore.location": "/internal.pem",
        }
    )
    sec = c.security
    assert sec.for_listener("EXTERNAL").sasl_enabled_mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert sec.for_listener("INTERNAL").sasl_enabled_mechanisms == ("SCRAM-SHA-512",)
    assert sec.for_listener("INTERNAL").tls.truststore_location == "/internal.pem"
    assert sec.for_listener("EXTERNAL").tls.truststore_location == "/base.pem"
    assert sec.for_listener("PLAINTEXT") is sec


def test_jaas_options() -> None:
    assert jaas_credentials('X required username="a" password="";') == ("a", "")
    assert jaas_credentials("X required;") == (None, None)


def test_broker_registration_carries_every_endpoint() -> None:
    endpoints = (
        ("PLAINTEXT", "PLAINTEXT", "h", 1),
        ("INTERNAL", "SASL_SSL", "::1", 2),
    )
    data = zk_layout.encode_broker("h", 1, None, endpoints)
    assert zk_layout.decode_broker(data) == ("h", 1, None)
    assert zk_layout.decode_broker_endpoints(data) == endpoints
    doc = json.loads(data)
    assert doc["listener_security_protocol_map"] == {
        "PLAINTEXT": "PLAINTEXT",
        "INTERNAL": "SASL_SSL",
    }
    assert doc["endpoints"] == ["PLAINTEXT://h:1", "INTERNAL://[::1]:2"]
    # A registration written without endpoints is one PLAINTEXT listener.
    assert zk_layout.decode_broker_endpoints(zk_layout.encode_broker("h", 1, None)) == (
        ("PLAINTEXT", "PLAINTEXT", "h", 1),
    )
