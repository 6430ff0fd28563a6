"""How this broker authenticates to its peers: Kafka's inter-broker settings.

* ``inter.broker.listener.name`` names the listener brokers use to reach each
  other (peers are dialled at their registered endpoint of that name).
  ``security.inter.broker.protocol`` is the older way: the listener named
  like the protocol. Both unset: the listener named PLAINTEXT, as in Kafka;
  and, beyond Kafka, the first listener when there is no PLAINTEXT one.
* ``sasl.mechanism.inter.broker.protocol``: the SASL mechanism on a SASL
  listener. Kafka defaults to GSSAPI, which Headwater does not speak; here
  the default is the listener's first enabled mechanism.
* The broker's own credentials come from the JAAS line Kafka reads,
  ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (mechanism in
  lower case), else ``sasl.jaas.config``: only its ``username="..."`` and
  ``password="..."`` options are used (the login module class is not
  loaded). The broker principal is then ``User:<username>``; on an SSL
  listener it is the keystore certificate's subject. Give it CLUSTER_ACTION
  on the cluster, or list it in ``super.users``.
* TLS to peers uses the listener's ``ssl.truststore.location`` and presents
  its keystore; ``ssl.endpoint.identification.algorithm`` (default
  ``https``; empty turns it off) checks the peer's host name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from headwater.security.client_security import ClientSecurity, jaas_credentials
from headwater.security.config import SecurityConfig, TlsConfig
from headwater.security.listeners import Listener
from headwater.security.tls import client_context


@dataclass(frozen=True)
class InterBrokerSettings:
    listener: Listener
    security: ClientSecurity


def inter_broker_listener(sec: SecurityConfig, listeners: Sequence[Listener]) -> Listener:
    name = sec.raw.get("inter.broker.listener.name", "").strip().upper()
    protocol = sec.raw.get("security.inter.broker.protocol", "").strip().upper()
    if name and protocol:
        raise ValueError(
            "set only one of inter.broker.listener.name and security.inter.broker.protocol"
        )
    by_name = {listener.name: listener for listener in listeners}
    wanted = name or protocol or "PLAINTEXT"
    if wanted in by_name:
        return by_name[wanted]
    if name or protocol:
        key = "inter.broker.listener.name" if name else "security.inter.broker.protocol"
        raise ValueError(f"{key}={wanted} names no listener (listeners: {', '.join(by_name)})")
    return listeners[0]


def inter_broker_settings(
    sec: SecurityConfig, listeners: Sequence[Listener]
) -> InterBrokerSettings:
    """The listener to dial peers on and how to authenticate there; ValueError if unusable."""
    listener = inter_broker_listener(sec, listeners)
    own = sec.for_listener(listener.name)
    protocol = listener.protocol
    context = None
    check_hostname = own.raw.get("ssl.endpoint.identification.algorithm", "https").strip() != ""
    prefix = f"listener.name.{listener.name.lower()}."
    if prefix + "ssl.endpoint.identification.algorithm" in own.raw:
        check_hostname = own.raw[prefix + "ssl.endpoint.identification.algorithm"].strip() != ""
    if protocol.uses_tls:
        context = client_context(own.tls, check_hostname=check_hostname)
    mechanism = "PLAIN"
    username = password = None
    if protocol.uses_sasl:
        mechanism = (
            sec.raw.get("sasl.mechanism.inter.broker.protocol", "").strip().upper()
            or own.sasl_enabled_mechanisms[0]
        )
        if mechanism not in own.sasl_enabled_mechanisms:
            raise ValueError(
                f"sasl.mechanism.inter.broker.protocol={mechanism} is not enabled on "
                f"listener {listener.name} ({', '.join(own.sasl_enabled_mechanisms)})"
            )
        jaas = sec.raw.get(f"{prefix}{mechanism.lower()}.sasl.jaas.config") or sec.raw.get(
            "sasl.jaas.config", ""
        )
        username, password = jaas_credentials(jaas)
        if not username or password is None:
            raise ValueError(
                f"inter-broker listener {listener.name} uses SASL: set "
                f'{prefix}{mechanism.lower()}.sasl.jaas.config with username="..." '
                'password="..."'
            )
    return InterBrokerSettings(
        listener,
        ClientSecurity(protocol.value, context, mechanism, username, password, check_hostname),
    )


def with_new_keystore(security: ClientSecurity, tls: TlsConfig) -> ClientSecurity:
    """The inter-broker credentials after the inter-broker listener's keystore or
    truststore changed (a dynamic ``listener.name.<l>.ssl.*`` update).

    Kafka reconfigures its inter-broker client's SSL factory along with the
    listener's: a peer rotated to a certificate of a new CA is trusted once this
    broker's truststore has that CA, and a peer requiring client certificates sees
    the new one. Connections already open keep their session. ValueError if the
    keystore does not load (it was checked when altered; a file may go meanwhile).
    """
    if not security.uses_tls:
        return security
    context = client_context(tls, check_hostname=security.check_hostname)
    return replace(security, ssl_context=context)
