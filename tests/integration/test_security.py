"""Security end to end: SASL_SSL with SCRAM-SHA-512 and real clients, PLAIN, mTLS,
ACLs enforced at Kafka's check points, and bad input that must only close its
own connection.

One broker serves the module, with four listeners: PLAINTEXT (the operator's
port: its ANONYMOUS principal is a super user, so the headwater CLI can manage
users and ACLs), SASL_SSL, SSL (client certificates requested) and
SASL_PLAINTEXT. Certificates are made at test time with openssl.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build_request, decode_response, encode_request
from headwater.security.scram import SCRAM_SHA_512, ScramClient
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.tls_certs import Certs, make_certs
from tests.integration.wire import WireClient

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}
CLIENT_SUBJECT = "/O=Headwater/OU=eng/CN=carol"
CLIENT_PRINCIPAL = "User:CN=carol,OU=eng,O=Headwater"


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args],
        capture_output=True, text=True, timeout=60, check=check,
    )  # fmt: skip


class SecureBroker:
    def __init__(self, tmp: Path, certs: Certs, extra: tuple[str, ...] = ()) -> None:
        self.certs = certs
        self.data = tmp / "data"
        self.ports = {n: free_port() for n in ("PLAINTEXT", "SASL_SSL", "SSL", "SASL_PLAINTEXT")}
        listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())
        self.proc = BrokerProcess(
            self.data,
            port=self.ports["PLAINTEXT"],
            overrides=[
                f"listeners={listeners}",
                f"ssl.keystore.location={certs.server_keystore}",
                f"ssl.truststore.location={certs.ca}",
                "ssl.client.auth=requested",
                "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
                "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                "super.users=User:admin;User:ANONYMOUS",
                "connection.failed.authentication.delay.ms=50",
                *extra,
            ],
        )

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def admin(self) -> str:
        return self.addr("PLAINTEXT")

    def acl(self, *args: str) -> None:
        cli("acls", "add", "--bootstrap", self.admin, *args)

    def kafka_python(
        self, user: str, mechanism: str = "SCRAM-SHA-512", **kw: Any
    ) -> dict[str, Any]:
        return dict(
            bootstrap_servers=self.addr("SASL_SSL"),
            security_protocol="SASL_SSL",
            sasl_mechanism=mechanism,
            sasl_plain_username=user,
            sasl_plain_password=PASSWORDS.get(user, "x"),
            ssl_cafile=str(self.certs.ca),
            **kw,
        )

    def librdkafka(self, user: str, **kw: str) -> dict[str, str]:
        return {
            "bootstrap.servers": self.addr("SASL_SSL"),
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": PASSWORDS[user],
            "ssl.ca.location": str(self.certs.ca),
            **kw,
        }

    def tls_socket(self, listener: str = "SASL_SSL") -> WireClient:
        w = WireClient(self.addr(listener))
        ctx = ssl.create_default_context(cafile=str(self.certs.ca))
        w.sock = ctx.wrap_socket(w.sock, server_hostname="localhost")
        return w


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[SecureBroker]:
    b = SecureBroker(tmp_path_factory.mktemp("secure"), certs)
    # The first users are created offline, before any SASL listener runs.
    for user, password in PASSWORDS.items():
        cli("users", "add", user, "--password", password, "--data-dir", str(b.data))
    b.proc.start()
    try:
        yield b
    finally:
        b.proc.stop()


def request(w: WireClient, api_key: int, version: int, body: dict[str, Any]) -> Any:
    raw = w.request(api_key, version, encode_request(build_request(api_key, version, body)))
    return decode_response(api_key, version, raw, 0)


def assert_closed(w: WireClient) -> None:
    w.sock.settimeout(10)
    try:
        data = w.sock.recv(1)
    except (ConnectionError, ssl.SSLError):
        return
    assert data == b"", "the broker should have closed the connection"


def scram_login(w: WireClient, user: str, password: str) -> Any:
    hs = request(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
    assert int(hs.error_code) == 0
    client = ScramClient(SCRAM_SHA_512, user, password)
    r1 = request(w, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
    if int(r1.error_code):
        return r1
    r2 = request(w, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.final(r1.auth_bytes)})
    if int(r2.error_code) == 0:
        client.verify(r2.auth_bytes)
    return r2


# -- the main story: kafka-python on SASL_SSL with SCRAM-SHA-512 ---------------------------


def test_authorized_user_produces_consumes_in_a_group_and_commits(secure: SecureBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    secure.acl("--allow-principal", "User:alice", "--operation", "WRITE", "--operation",
               "READ", "--operation", "CREATE", "--topic", "orders-",
               "--resource-pattern-type", "prefixed")  # fmt: skip
    secure.acl("--allow-principal", "User:alice", "--operation", "READ", "--group", "billing")
    producer = KafkaProducer(**secure.kafka_python("alice"))
    for i in range(20):
        producer.send("orders-eu", f"order-{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        "orders-eu", group_id="billing", auto_offset_reset="earliest",
        enable_auto_commit=False, consumer_timeout_ms=8000, **secure.kafka_python("alice"),
    )  # fmt: skip
    values = []
    for msg in consumer:
        values.append(msg.value)
        if len(values) == 20:
            break
    consumer.commit()
    assert values == [f"order-{i}".encode() for i in range(20)]
    assert consumer.committed(TopicPartition("orders-eu", 0)) == 20
    consumer.close()


def test_user_without_acls_is_refused_at_each_check_point(secure: SecureBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import (
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
    )

    cli("topics", "create", "secret-topic", "--bootstrap", secure.admin)
    producer = KafkaProducer(**secure.kafka_python("alice"))
    producer.send("orders-secret", b"x").get(timeout=30)
    producer.close()
    # bob may DESCRIBE secret-topic (so metadata answers) but not READ or WRITE it.
    secure.acl(
        "--allow-principal", "User:bob", "--operation", "DESCRIBE", "--topic", "secret-topic"
    )

    producer = KafkaProducer(**secure.kafka_python("bob", max_block_ms=10000, retries=0))
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("secret-topic", b"nope").get(timeout=30)
    producer.close()

    consumer = KafkaConsumer(**secure.kafka_python("bob", consumer_timeout_ms=3000))
    visible = consumer.topics()
    assert (
        "secret-topic" in visible and "orders-secret" not in visible and "orders-eu" not in visible
    )
    consumer.assign([TopicPartition("secret-topic", 0)])
    consumer.seek(TopicPartition("secret-topic", 0), 0)
    with pytest.raises(TopicAuthorizationFailedError):
        for _ in range(20):
            consumer.poll(timeout_ms=500)
    consumer.close()

    grouped = KafkaConsumer("secret-topic", group_id="not-bobs", **secure.kafka_python("bob"))
    with pytest.raises(GroupAuthorizationFailedError):
        for _ in range(20):
            grouped.poll(timeout_ms=500)
    grouped.close()


def test_fetch_of_an_unauthorized_partition_is_error_29_on_the_wire(secure: SecureBroker) -> None:
    """Per partition: the authorized one reads, the other gets TOPIC_AUTHORIZATION_FAILED."""
    from headwater.protocol.fetch_types import ZERO_UUID, FetchRequestData, PartitionFetch

    cli("topics", "create", "fetch-open", "--bootstrap", secure.admin)
    cli("topics", "create", "fetch-closed", "--bootstrap", secure.admin)
    secure.acl("--allow-principal", "User:bob", "--operation", "READ", "--topic", "fetch-open")
    w = secure.tls_socket()
    assert int(scram_login(w, "bob", PASSWORDS["bob"]).error_code) == 0
    req = FetchRequestData(
        version=12,
        max_bytes=1 << 20,
        partitions=[PartitionFetch(ZERO_UUID, t, 0, 0) for t in ("fetch-open", "fetch-closed")],
    )
    resp = w.fetch(req)
    errors = {p.topic: p.error_code for p in resp.partitions}
    assert errors == {"fetch-open": 0, "fetch-closed": 29}
    w.close()


def test_wrong_password_gets_58_and_the_connection_closes(secure: SecureBroker) -> None:
    w = secure.tls_socket()
    resp = scram_login(w, "alice", "not-her-password")
    assert int(resp.error_code) == 58
    assert_closed(w)
    w = secure.tls_socket()
    resp = scram_login(w, "nobody", "x")
    assert int(resp.error_code) == 58 and "Invalid user credentials" in resp.error_message
    assert_closed(w)


def test_plain_checks_the_same_password(secure: SecureBroker) -> None:
    from kafka import KafkaProducer

    secure.acl("--allow-principal", "User:alice", "--operation", "WRITE", "--topic", "plain-t",
               "--operation", "CREATE")  # fmt: skip
    producer = KafkaProducer(**secure.kafka_python("alice", mechanism="PLAIN"))
    producer.send("plain-t", b"plain").get(timeout=30)
    producer.close()
    w = secure.tls_socket()
    assert int(request(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code) == 0
    bad = request(w, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00wrong"})
    assert int(bad.error_code) == 58
    assert_closed(w)


def test_mtls_subject_is_the_principal(secure: SecureBroker) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    cert, key = secure.certs.client(CLIENT_SUBJECT, "carol")
    other_cert, other_key = secure.certs.client("/CN=dave", "dave")
    secure.acl("--allow-principal", CLIENT_PRINCIPAL, "--operation", "WRITE",
               "--operation", "CREATE", "--topic", "mtls")  # fmt: skip

    def producer(c: Path, k: Path) -> Any:
        return KafkaProducer(
            bootstrap_servers=secure.addr("SSL"), security_protocol="SSL",
            ssl_cafile=str(secure.certs.ca), ssl_certfile=str(c), ssl_keyfile=str(k),
            max_block_ms=10000, retries=0,
        )  # fmt: skip

    carol = producer(cert, key)
    carol.send("mtls", b"by certificate").get(timeout=30)
    carol.close()
    dave = producer(other_cert, other_key)
    with pytest.raises(TopicAuthorizationFailedError):
        dave.send("mtls", b"not dave").get(timeout=30)
    dave.close()


def test_confluent_kafka_on_sasl_ssl_scram_sha_512(secure: SecureBroker) -> None:
    from confluent_kafka import Consumer, Producer

    secure.acl("--allow-principal", "User:alice", "--operation", "READ", "--group", "ck")
    producer = Producer(secure.librdkafka("alice"))
    for i in range(10):
        producer.produce("orders-ck", f"ck-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        secure.librdkafka("alice", **{"group.id": "ck", "auto.offset.reset": "earliest"})
    )
    consumer.subscribe(["orders-ck"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == [f"ck-{i}".encode() for i in range(10)]


def test_aiokafka_on_sasl_ssl_scram_sha_512(secure: SecureBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    kw = dict(
        bootstrap_servers=secure.addr("SASL_SSL"), security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
        sasl_plain_password=PASSWORDS["alice"],
        ssl_context=create_ssl_context(cafile=str(secure.certs.ca)),
    )  # fmt: skip
    secure.acl("--allow-principal", "User:alice", "--operation", "READ", "--group", "aio")

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(**kw)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("orders-aio", f"aio-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "orders-aio", group_id="aio", auto_offset_reset="earliest", **kw
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for msg in consumer:
                    got.append(msg.value)
                    if len(got) == 10:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(main()) == [f"aio-{i}".encode() for i in range(10)]


@pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat not installed (make test installs it)"
)
def test_kcat_on_sasl_ssl_scram_sha_512(secure: SecureBroker) -> None:
    conf = ["-b", secure.addr("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
            "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
            "-X", f"sasl.password={PASSWORDS['alice']}",
            "-X", f"ssl.ca.location={secure.certs.ca}"]  # fmt: skip
    lines = "\n".join(f"kcat-{i}" for i in range(5)) + "\n"
    subprocess.run(["kcat", "-P", *conf, "-t", "orders-kcat"], input=lines, text=True,
                   check=True, timeout=60)  # fmt: skip
    out = subprocess.run(["kcat", "-C", *conf, "-t", "orders-kcat", "-e", "-q"],
                         capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert out.stdout.split() == [f"kcat-{i}" for i in range(5)]


# -- users and ACLs through the APIs ----------------------------------------------------


def test_users_added_through_the_broker_authenticate(secure: SecureBroker) -> None:
    from kafka import KafkaConsumer

    name = f"erin-{uuid.uuid4().hex[:6]}"
    cli("users", "add", name, "--password", "erin-pw", "--mechanism", "SCRAM-SHA-256",
        "--bootstrap", secure.admin)  # fmt: skip
    listed = cli("users", "list", "--bootstrap", secure.admin).stdout
    assert f"{name}\tSCRAM-SHA-256 (iterations=4096)" in listed
    assert "erin-pw" not in (secure.data / "scram-credentials.json").read_text()
    PASSWORDS[name] = "erin-pw"
    consumer = KafkaConsumer(**secure.kafka_python(name, mechanism="SCRAM-SHA-256"))
    consumer.topics()  # authenticates or raises
    consumer.close()
    cli("users", "delete", name, "--bootstrap", secure.admin)
    w = secure.tls_socket()
    hs = request(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
    assert int(hs.error_code) == 0
    from headwater.security.scram import SCRAM_SHA_256

    client = ScramClient(SCRAM_SHA_256, name, "erin-pw")
    r1 = request(w, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
    r2 = request(w, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.final(r1.auth_bytes)})
    assert int(r2.error_code) == 58


def test_acl_cli_lists_and_removes(secure: SecureBroker) -> None:
    secure.acl("--allow-principal", "User:zed", "--operation", "READ", "--topic", "zed-",
               "--resource-pattern-type", "prefixed")  # fmt: skip
    out = cli("acls", "list", "--bootstrap", secure.admin, "--principal", "User:zed").stdout
    assert out.strip() == "ALLOW\tUser:zed\tREAD\thost=*\tTOPIC:PREFIXED:zed-"
    removed = cli("acls", "remove", "--bootstrap", secure.admin, "--principal", "User:zed").stdout
    assert "removed 1 ACL(s)" in removed
    out = cli("acls", "list", "--bootstrap", secure.admin, "--principal", "User:zed").stdout
    assert out.strip() == ""


def test_non_super_user_cannot_manage_acls_or_users(secure: SecureBroker) -> None:
    w = secure.tls_socket()
    assert int(scram_login(w, "bob", PASSWORDS["bob"]).error_code) == 0
    resp = request(w, ApiKey.CREATE_ACLS, 3, {"creations": [{
        "resource_type": 2, "resource_name": "x", "resource_pattern_type": 3,
        "principal": "User:bob", "host": "*", "operation": 2, "permission_type": 3}]})  # fmt: skip
    assert [int(r.error_code) for r in resp.results] == [31]
    described = request(w, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    assert int(described.error_code) == 31
    created = request(w, ApiKey.CREATE_TOPICS, 5, {"topics": [{"name": "bobs", "num_partitions": 1,
                      "replication_factor": -1}], "timeout": 5000})  # fmt: skip
    assert [int(t.error_code) for t in created.topics] == [29]
    w.close()


# -- bad input: each case closes only its own connection --------------------------------


def test_bad_input_never_affects_other_connections(secure: SecureBroker) -> None:
    healthy = secure.tls_socket()
    assert int(scram_login(healthy, "alice", PASSWORDS["alice"]).error_code) == 0

    # TLS handshake with garbage
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"]), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\x00\x05garbage-garbage-garbage")
        answer = s.recv(100)  # within the timeout: an alert record (0x15) or a close
        assert answer == b"" or answer[0] == 0x15
    # a plaintext Kafka client on the TLS port
    w = WireClient(secure.addr("SSL"))
    w.sock.settimeout(10)
    with pytest.raises((ConnectionError, OSError, struct.error)):
        request(w, ApiKey.API_VERSIONS, 0, {})
    # a Metadata before authenticating: refused and closed
    w = secure.tls_socket()
    w.sock.sendall(_frame(ApiKey.METADATA, 1, b"\xff\xff\xff\xff"))
    assert_closed(w)
    # the same on SASL_PLAINTEXT
    w = WireClient(secure.addr("SASL_PLAINTEXT"))
    w.sock.sendall(_frame(ApiKey.METADATA, 1, b"\xff\xff\xff\xff"))
    assert_closed(w)
    # SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE, closed
    w = secure.tls_socket()
    r = request(w, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00x"})
    assert int(r.error_code) == 34
    assert_closed(w)
    # a malformed SCRAM message
    w = secure.tls_socket()
    request(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
    r = request(w, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"n,,n=a=ZZ,r=\xff"})
    assert int(r.error_code) == 58
    assert_closed(w)
    # an oversized token (past sasl.server.max.receive.size)
    w = secure.tls_socket()
    request(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    r = request(w, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00" * 600_000})
    assert int(r.error_code) == 58
    assert_closed(w)
    # an unsupported mechanism lists the enabled ones
    w = secure.tls_socket()
    r = request(w, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert int(r.error_code) == 33 and "SCRAM-SHA-512" in r.mechanisms
    assert_closed(w)

    # the healthy connection is still served
    meta = request(healthy, ApiKey.METADATA, 9, {"topics": None})
    assert meta.brokers[0].port == secure.ports["SASL_SSL"]
    healthy.close()


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    head = struct.pack(">hhih", api_key, version, 1, 4) + b"test"
    return struct.pack(">i", len(head) + len(body)) + head + body


def test_metadata_advertises_the_listener_the_client_used(secure: SecureBroker) -> None:
    for listener in ("PLAINTEXT", "SASL_PLAINTEXT"):
        w = WireClient(secure.addr(listener))
        if listener == "SASL_PLAINTEXT":
            assert int(scram_login(w, "alice", PASSWORDS["alice"]).error_code) == 0
        meta = request(w, ApiKey.METADATA, 9, {"topics": None})
        assert meta.brokers[0].port == secure.ports[listener]
        coord = request(w, ApiKey.FIND_COORDINATOR, 2, {"key": "billing", "key_type": 0})
        assert int(coord.error_code) == 0 and coord.port == secure.ports[listener]
        w.close()


def test_listening_lines_and_credentials_survive_restart(secure: SecureBroker) -> None:
    lines = secure.proc.lines
    assert f"listening on {secure.admin}" in lines
    assert f"listening on SASL_SSL://{secure.addr('SASL_SSL')}" in lines
    secure.proc.restart()
    w = secure.tls_socket()
    assert int(scram_login(w, "alice", PASSWORDS["alice"]).error_code) == 0
    # ACLs survived too: alice still may write orders-*
    w.close()
    out = cli("acls", "list", "--bootstrap", secure.admin, "--principal", "User:alice").stdout
    assert "TOPIC:PREFIXED:orders-" in out


def test_expired_sessions_must_reauthenticate(tmp_path: Path, certs: Certs) -> None:
    b = SecureBroker(
        tmp_path,
        certs,
        extra=("connections.max.reauth.ms=1500", "allow.everyone.if.no.acl.found=true"),
    )
    cli("users", "add", "alice", "--password", PASSWORDS["alice"], "--data-dir", str(b.data))
    b.proc.start()
    try:
        w = b.tls_socket()
        resp = scram_login(w, "alice", PASSWORDS["alice"])
        assert int(resp.error_code) == 0 and resp.session_lifetime.total_seconds() == 1.5
        time.sleep(1.0)
        assert int(scram_login(w, "alice", PASSWORDS["alice"]).error_code) == 0  # re-auth
        time.sleep(1.0)
        request(w, ApiKey.METADATA, 9, {"topics": []})  # still inside the new session
        time.sleep(1.7)
        w.sock.sendall(_frame(ApiKey.METADATA, 1, b"\xff\xff\xff\xff"))
        assert_closed(w)
        # librdkafka re-authenticates by itself (KIP-368) and keeps working
        from confluent_kafka import Producer

        p = Producer(b.librdkafka("alice"))
        p.produce("reauth", b"1")
        assert p.flush(30) == 0
        time.sleep(2.0)
        p.produce("reauth", b"2")
        assert p.flush(30) == 0
    finally:
        b.proc.stop()


def test_session_hijack_by_another_principal_gets_70(secure: SecureBroker) -> None:
    from headwater.protocol.fetch_types import ZERO_UUID, FetchRequestData, PartitionFetch

    cli("topics", "create", "hijack", "--bootstrap", secure.admin)
    for user in ("alice", "bob"):
        secure.acl("--allow-principal", f"User:{user}", "--operation", "READ", "--topic", "hijack")
    alice, bob = secure.tls_socket(), secure.tls_socket()
    assert int(scram_login(alice, "alice", PASSWORDS["alice"]).error_code) == 0
    assert int(scram_login(bob, "bob", PASSWORDS["bob"]).error_code) == 0
    parts = [PartitionFetch(ZERO_UUID, "hijack", 0, 0)]
    opened = alice.fetch(FetchRequestData(version=12, session_id=0, session_epoch=0,
                                          partitions=parts))  # fmt: skip
    assert opened.error_code == 0 and opened.session_id > 0
    stolen = bob.fetch(FetchRequestData(version=12, session_id=opened.session_id, session_epoch=1))
    assert stolen.error_code == 70
    # Alice continues her session (epoch 1 still expected: bob's try changed nothing),
    # even from a new connection.
    alice2 = secure.tls_socket()
    assert int(scram_login(alice2, "alice", PASSWORDS["alice"]).error_code) == 0
    again = alice2.fetch(FetchRequestData(version=12, session_id=opened.session_id,
                                          session_epoch=1))  # fmt: skip
    assert again.error_code == 0 and again.session_id == opened.session_id
    for w in (alice, bob, alice2):
        w.close()


def test_produce_quota_holds_a_producer_to_its_rate(tmp_path: Path, certs: Certs) -> None:
    """AlterClientQuotas sets 200 kB/s for alice; a kafka-python producer going flat
    out over SASL_SSL is held within 20% of it (measured after the first windows)."""
    from kafka import KafkaProducer

    quota = 200_000
    b = SecureBroker(tmp_path, certs, extra=("allow.everyone.if.no.acl.found=true",
                                            "quota.window.num=3"))  # fmt: skip
    cli("users", "add", "alice", "--password", PASSWORDS["alice"], "--data-dir", str(b.data))
    b.proc.start()
    try:
        w = WireClient(b.admin)
        altered = request(w, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{
            "entity": [{"entity_type": "user", "entity_name": "alice"}],
            "ops": [{"key": "producer_byte_rate", "value": quota, "remove": False}]}],
            "validate_only": False})  # fmt: skip
        assert [int(e.error_code) for e in altered.entries] == [0]
        alice = {"entity_type": "user", "match_type": 0, "match": "alice"}
        described = request(
            w, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [alice], "strict": False}
        )
        assert [(v.key, v.value) for v in described.entries[0].values] == [
            ("producer_byte_rate", quota)
        ]
        w.close()
        producer = KafkaProducer(**b.kafka_python("alice", linger_ms=5, batch_size=16384))
        value = b"x" * 1000
        acked: list[tuple[float, int]] = []
        start = time.monotonic()
        while time.monotonic() - start < 9:
            futures = [producer.send("quota-t", value) for _ in range(50)]
            for f in futures:
                f.get(timeout=60)
            acked.append((time.monotonic() - start, 50 * len(value)))
        producer.close()
        # Bytes acknowledged after the first ack past 3 s, over the time since it.
        first = next(t for t, _ in acked if t >= 3)
        rate = sum(n for t, n in acked if t > first) / (acked[-1][0] - first)
        assert 0.8 * quota <= rate <= 1.2 * quota, f"rate {rate:.0f} B/s vs quota {quota}"

        # A consumer byte-rate quota: responses are capped at one quota window, and
        # a consumer going flat out is held near the rate.
        from kafka import KafkaConsumer

        consumer_quota = 100_000
        w = WireClient(b.admin)
        altered = request(w, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{
            "entity": [{"entity_type": "user", "entity_name": "alice"}],
            "ops": [{"key": "consumer_byte_rate", "value": consumer_quota, "remove": False}]}],
            "validate_only": False})  # fmt: skip
        assert [int(e.error_code) for e in altered.entries] == [0]
        w.close()
        consumer = KafkaConsumer("quota-t", auto_offset_reset="earliest",
                                 **b.kafka_python("alice"))  # fmt: skip
        # Fetches arrive in bursts (a throttled response, then a muted connection),
        # so the rate is taken over the whole run; it includes the first quota
        # window's allowance (2 s worth with quota.window.num=3), hence the loose bounds.
        total, seconds = 0, 10
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            for records in consumer.poll(timeout_ms=200).values():
                total += sum(len(r.value) for r in records)
        consumer.close()
        rate = total / seconds
        assert 0.6 * consumer_quota <= rate <= 1.4 * consumer_quota, f"consume {rate:.0f} B/s"
    finally:
        b.proc.stop()


def test_headwater_cli_over_sasl_ssl_with_command_config(
    secure: SecureBroker, tmp_path: Path
) -> None:
    """Headwater's own client speaks TLS + SCRAM too (the CLI's --command-config)."""

    def config(user: str, password: str) -> str:
        path = tmp_path / f"{user}-{password}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            f"sasl.username={user}\nsasl.password={password}\n"
            f"ssl.ca.location={secure.certs.ca}\n"
        )
        return str(path)

    sasl = secure.addr("SASL_SSL")
    cli("acls", "add", "--bootstrap", sasl, "--command-config", config("admin", PASSWORDS["admin"]),
        "--allow-principal", "User:yan", "--operation", "READ", "--topic", "yan")  # fmt: skip
    listed = cli("acls", "list", "--bootstrap", sasl, "--principal", "User:yan",
                 "--command-config", config("admin", PASSWORDS["admin"])).stdout  # fmt: skip
    assert listed.strip() == "ALLOW\tUser:yan\tREAD\thost=*\tTOPIC:LITERAL:yan"
    refused = cli("acls", "list", "--bootstrap", sasl,
                  "--command-config", config("admin", "wrong"), check=False)  # fmt: skip
    assert refused.returncode == 1 and "Invalid user credentials" in refused.stderr
    not_super = cli("users", "list", "--bootstrap", sasl,
                    "--command-config", config("bob", PASSWORDS["bob"]), check=False)  # fmt: skip
    assert not_super.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in not_super.stderr


def test_create_is_checked_only_for_topics_that_do_not_exist(secure: SecureBroker) -> None:
    """Kafka asks for CREATE only when a Metadata or Produce names a missing topic:
    a writer without CREATE on an existing topic leaves no "Denied ... CREATE" audit line."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=secure.admin)
    admin.create_topics([NewTopic("existing-w", 1, 1)])
    admin.close()
    secure.acl("--allow-principal", "User:alice", "--operation", "WRITE", "--operation",
               "DESCRIBE", "--topic", "existing-w")  # fmt: skip
    before = len(secure.proc.lines)
    producer = KafkaProducer(**secure.kafka_python("alice"))
    for i in range(10):
        producer.send("existing-w", f"w{i}".encode()).get(timeout=30)
    producer.close()
    denied_create = [
        line for line in secure.proc.lines[before:]
        if "Denied Operation = CREATE" in line and "alice" in line
    ]  # fmt: skip
    assert denied_create == []


def test_configs_need_describe_configs_and_alter_configs(secure: SecureBroker) -> None:
    """DescribeConfigs / IncrementalAlterConfigs / AlterConfigs are checked as Kafka checks
    them: on the topic for topic configs, on the cluster for broker configs."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    from confluent_kafka.error import KafkaException

    cli("topics", "create", "cfg-guarded", "--bootstrap", secure.admin)
    alice = AdminClient(secure.librdkafka("alice"))
    topic = ConfigResource(ResourceType.TOPIC, "cfg-guarded")
    broker = ConfigResource(ResourceType.BROKER, "0")
    retention = ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)

    def error_code(future: Any) -> int:
        try:
            future.result(30)
        except KafkaException as exc:
            return int(exc.args[0].code())
        return 0

    assert error_code(alice.describe_configs([topic])[topic]) == 29  # TOPIC_AUTHORIZATION_FAILED
    assert (
        error_code(alice.describe_configs([broker])[broker]) == 31
    )  # CLUSTER_AUTHORIZATION_FAILED
    topic_alter = ConfigResource(ResourceType.TOPIC, "cfg-guarded", incremental_configs=[retention])
    assert error_code(alice.incremental_alter_configs([topic_alter])[topic_alter]) == 29
    broker_alter = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert error_code(alice.incremental_alter_configs([broker_alter])[broker_alter]) == 31
    legacy = ConfigResource(ResourceType.TOPIC, "cfg-guarded", set_config={"retention.ms": "1"})
    assert error_code(alice.alter_configs([legacy])[legacy]) == 29

    # Nothing changed; with the ACLs the same user may.
    admin = AdminClient({"bootstrap.servers": secure.admin})
    described = admin.describe_configs([topic])[topic].result(30)
    assert described["retention.ms"].value != "1"
    secure.acl("--allow-principal", "User:alice", "--operation", "ALTER_CONFIGS",
               "--topic", "cfg-guarded")  # fmt: skip
    assert error_code(alice.describe_configs([topic])[topic]) == 0  # ALTER_CONFIGS implies it
    assert error_code(alice.incremental_alter_configs([topic_alter])[topic_alter]) == 0
    assert admin.describe_configs([topic])[topic].result(30)["retention.ms"].value == "1"
