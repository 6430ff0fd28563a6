"""The broker's client context toward its peers follows a dynamic keystore change
of the inter-broker listener (Kafka reconfigures its inter-broker SSL factory too).

Why it matters: rotating a cluster to certificates of a new CA means giving every
broker the new truststore and keystore without a restart. If replica fetchers kept
the old client context, a follower reconnecting to a rotated leader could not
verify it, and replication would stop until a restart.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from headwater.security.client_security import ClientSecurity
from headwater.security.config import TlsConfig
from headwater.security.inter_broker import with_new_keystore
from headwater.security.tls import ListenerTlsContexts, client_context, server_context
from tests.integration.tls_certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Certs, Certs]:
    root = tmp_path_factory.mktemp("certs")
    return make_certs(root / "old"), make_certs(root / "new")


def _tls(c: Certs) -> TlsConfig:
    return TlsConfig(keystore_location=str(c.server_keystore), truststore_location=str(c.ca))


async def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> None:
    """One TLS handshake over loopback: a peer serving ``server``, dialled with ``client``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    peer = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
    port = peer.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname="localhost"
        )
        assert await reader.read(2) == b"ok"
        writer.close()
    finally:
        peer.close()
        await peer.wait_closed()


def test_the_inter_broker_client_trusts_a_peer_rotated_to_a_new_ca(
    certs: tuple[Certs, Certs],
) -> None:
    old, new = certs
    security = ClientSecurity("SSL", client_context(_tls(old), check_hostname=True))
    rotated_peer = server_context(_tls(new))

    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(_handshake(rotated_peer, security.ssl_context))  # type: ignore[arg-type]

    refreshed = with_new_keystore(security, _tls(new))
    asyncio.run(_handshake(rotated_peer, refreshed.ssl_context))  # type: ignore[arg-type]
    assert refreshed.protocol == "SSL" and refreshed.check_hostname


def test_plaintext_inter_broker_credentials_are_left_as_they_are(
    certs: tuple[Certs, Certs],
) -> None:
    plain = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", "broker", "secret")
    assert with_new_keystore(plain, _tls(certs[1])) is plain


def test_a_missing_keystore_is_refused_with_a_clear_error(
    certs: tuple[Certs, Certs], tmp_path: Path
) -> None:
    security = ClientSecurity("SSL", client_context(_tls(certs[0]), check_hostname=True))
    gone = TlsConfig(keystore_location=str(tmp_path / "gone.pem"))
    with pytest.raises(ValueError, match="keystore"):
        with_new_keystore(security, gone)


def test_listener_contexts_tell_subscribers_of_each_replacement(
    certs: tuple[Certs, Certs],
) -> None:
    old, new = certs
    contexts = ListenerTlsContexts({"INTERNAL": _tls(old)})
    seen: list[tuple[str, TlsConfig]] = []
    contexts.replaced.append(lambda listener, cfg: seen.append((listener, cfg)))
    contexts.replace("INTERNAL", _tls(new), server_context(_tls(new)))
    assert seen == [("INTERNAL", _tls(new))]
