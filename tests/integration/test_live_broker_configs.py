"""Dynamic broker configs applied live: ``num.replica.fetchers`` on a 3-broker cluster
under acks=all load, and a TLS listener's keystore replaced on a running broker."""

from __future__ import annotations

import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build, decode_response, encode_request, request_class
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.test_cluster_operations import AckClock, read_all_partitions
from tests.integration.tls_certs import Certs, make_certs
from tests.integration.wire import WireClient


def _alter_default(bootstrap: str, key: str, value: str) -> tuple[int, str | None]:
    """IncrementalAlterConfigs of the cluster default (the BROKER resource named "",
    which confluent-kafka refuses to send)."""
    client = WireClient(bootstrap)
    try:
        req = build(request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1), {
            "resources": [{"resource_type": 4, "resource_name": "", "configs": [
                {"name": key, "config_operation": 0, "value": value}]}],
            "validate_only": False,
        })  # fmt: skip
        body = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, encode_request(req))
    finally:
        client.close()
    (answer,) = decode_response(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses
    return answer.error_code, answer.error_message


def _broker_config(bootstrap: str, broker_id: int, key: str) -> tuple[str | None, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    entry = admin.describe_configs([res])[res].result(10)[key]
    return entry.value, int(entry.source)


_RESIZED = re.compile(r"resized replica fetchers to (\d+) per leader: .*; running (.*)$")


def _running_fetchers(lines: list[str], count: int) -> dict[int, int] | None:
    """Fetchers per leader from a broker's last "resized ... to ``count``" line."""
    for line in reversed(lines):
        m = _RESIZED.search(line)
        if m and int(m.group(1)) == count:
            return {int(leader): int(n) for n, leader in
                    re.findall(r"(\d+) from broker (\d+)", m.group(2))}  # fmt: skip
    return None


class IsrWatch:
    """Polls the partitions' ISRs and remembers any moment one was not full."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.shrunk: list[tuple[int, set[int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                parts = self.cluster.partitions(self.topic)
            except Exception:
                continue
            self.shrunk += [(p, set(md.isrs)) for p, md in parts.items() if len(md.isrs) < 3]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.cluster
def test_num_replica_fetchers_resizes_on_every_broker_under_acks_all_load(
    tmp_path: Path, zk_connect: str
) -> None:
    cluster = Cluster(tmp_path, zk_connect).start()
    try:
        # Partitions 3L..3L+2 led by broker L: each follower has three consecutive
        # partitions per leader, which Kafka's fetcher id spreads over 3 fetchers.
        partitions = 9
        assignment = [[(p // 3 + i) % 3 for i in range(3)] for p in range(partitions)]
        admin = cluster.admin()
        topic = NewTopic("fetchers", num_partitions=partitions,
                         replica_assignment=assignment)  # fmt: skip
        admin.create_topics([topic], request_timeout=30)["fetchers"].result(30)
        wait_for(lambda: cluster.all_have_leaders("fetchers", partitions), what="leaders")
        wait_for(lambda: all(len(p.isrs) == 3 for p in cluster.partitions("fetchers").values()),
                 timeout=60, what="full ISRs")  # fmt: skip
        clock = AckClock(cluster.bootstrap, "fetchers", partitions).start()
        isr = IsrWatch(cluster, "fetchers")
        try:
            # Kafka's DynamicThreadPool rule: not more than double the current value.
            code, message = _alter_default(cluster.brokers[0].bootstrap,
                                           "num.replica.fetchers", "3")  # fmt: skip
            assert code == 40 and "double the current value 1" in (message or ""), message
            for count in (2, 3, 1):
                assert _alter_default(cluster.brokers[0].bootstrap, "num.replica.fetchers",
                                      str(count)) == (0, None)  # fmt: skip
                for b_id, b in enumerate(cluster.brokers):
                    leaders = {(b_id + 1) % 3, (b_id + 2) % 3}
                    expected = dict.fromkeys(leaders, count)
                    wait_for(lambda b=b, c=count, e=expected: _running_fetchers(b.lines, c) == e,
                             timeout=20, what=f"{count} fetchers per leader on {b_id}")  # fmt: skip
                    assert _broker_config(b.bootstrap, b_id, "num.replica.fetchers") == (
                        str(count), 3)  # fmt: skip
                clock.wait_acked_since(time.monotonic())  # writes go on after each resize
        finally:
            clock.stop()
            isr.stop()
        assert clock.errors == []
        assert isr.shrunk == [], isr.shrunk[:5]
        for b in cluster.brokers:
            assert not [line for line in b.lines if "(shrink)" in line]
        acked = sum(map(len, clock.acked.values()))
        print(f"{acked} records acked across the resizes")
        read = read_all_partitions(cluster.bootstrap, "fetchers", acked)
        for p, values in clock.acked.items():
            assert read.get(p) == values, f"partition {p}: read back differs from the acks"
        # The default lives in ZooKeeper: a restarted broker runs it again.
        cluster.brokers[2].restart()
        restarted = cluster.brokers[2].bootstrap
        wait_for(lambda: _broker_config(restarted, 2, "num.replica.fetchers") == ("1", 3),
                 what="the default after a restart")  # fmt: skip
    finally:
        cluster.stop()


KEYSTORE = "listener.name.ssl.ssl.keystore.location"


@pytest.fixture(scope="module")
def two_cas(tmp_path_factory: pytest.TempPathFactory) -> tuple[Certs, Certs]:
    """Two CAs, each with a server certificate for CN=localhost, 127.0.0.1."""
    root = tmp_path_factory.mktemp("certs")
    return make_certs(root / "one"), make_certs(root / "two")


@pytest.fixture
def tls_broker(tmp_path: Path, two_cas: tuple[Certs, Certs]) -> Iterator[tuple[BrokerProcess, int]]:
    port, ssl_port = free_port(), free_port()
    broker = BrokerProcess(tmp_path / "data", port=port, overrides=[
        f"listeners=PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
        f"ssl.keystore.location={two_cas[0].server_keystore}",
    ]).start()  # fmt: skip
    try:
        yield broker, ssl_port
    finally:
        broker.stop()


def _tls_connect(port: int) -> ssl.SSLSocket:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))


def _served_certificate(port: int) -> bytes:
    with _tls_connect(port) as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(certs: Certs) -> bytes:
    return ssl.PEM_cert_to_DER_cert(certs.server_cert.read_text())


def _api_versions(sock: ssl.SSLSocket, correlation: int) -> int:
    """ApiVersions v0 on an open connection: its error code."""
    client_id = b"tls-test"
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, correlation, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    corr, error = struct.unpack_from(">ih", body)
    assert corr == correlation
    return int(error)


def _alter_keystore(bootstrap: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry(KEYSTORE, value, incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([res])[res].result(30)


def _ssl_client_works(port: int, ca: Path) -> bool:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                         "ssl.ca.location": str(ca), "ssl.endpoint.identification.algorithm":
                         "https"})  # fmt: skip
    try:
        producer.list_topics(timeout=5)
        return True
    except KafkaException:
        return False


def test_a_listener_keystore_is_replaced_for_new_connections_only(
    tls_broker: tuple[BrokerProcess, int], two_cas: tuple[Certs, Certs]
) -> None:
    broker, ssl_port = tls_broker
    one, two = two_cas
    assert _served_certificate(ssl_port) == _der(one)
    assert _ssl_client_works(ssl_port, one.ca)
    old = _tls_connect(ssl_port)
    try:
        assert _api_versions(old, 1) == 0
        _alter_keystore(broker.bootstrap, str(two.server_keystore))
        wait_for(lambda: _served_certificate(ssl_port) == _der(two), timeout=60,
                 what="the new certificate on new connections")  # fmt: skip
        assert _api_versions(old, 2) == 0  # the open connection keeps its session
        assert _ssl_client_works(ssl_port, two.ca)  # a real client trusting the new CA only
        assert not _ssl_client_works(ssl_port, one.ca)
        assert _broker_config(broker.bootstrap, 0, KEYSTORE) == (str(two.server_keystore), 2)
        # A keystore that does not load is refused, saying why; the current one serves on.
        with pytest.raises(KafkaException, match="cannot load the TLS keystore"):
            _alter_keystore(broker.bootstrap, str(two.dir / "missing.pem"))
        assert _served_certificate(ssl_port) == _der(two)
        assert _api_versions(old, 3) == 0
    finally:
        old.close()
    # Kept in the broker's metadata: a restart serves the new keystore from the start.
    broker.restart()
    assert _served_certificate(ssl_port) == _der(two)


def test_the_inter_broker_client_takes_the_new_keys_of_its_listener(
    tmp_path: Path, two_cas: tuple[Certs, Certs]
) -> None:
    """The inter-broker listener's keystore and truststore change: the broker's own
    client context toward its peers is rebuilt from them (new fetcher and marker
    connections present and trust the new keys), as Kafka reconfigures its
    inter-broker SSL factory. The handshakes themselves are in
    tests/unit/test_inter_broker_tls_reload.py."""
    one, two = two_cas
    port, ssl_port = free_port(), free_port()
    broker = BrokerProcess(tmp_path / "data", port=port, overrides=[
        f"listeners=PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
        "inter.broker.listener.name=SSL",
        f"ssl.keystore.location={one.server_keystore}",
        f"ssl.truststore.location={one.ca}",
    ]).start()  # fmt: skip
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry(KEYSTORE, str(two.server_keystore),
                        incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("listener.name.ssl.ssl.truststore.location", str(two.ca),
                        incremental_operation=AlterConfigOpType.SET),
        ])  # fmt: skip
        admin.incremental_alter_configs([res])[res].result(30)
        wait_for(
            lambda: any("inter-broker connections on SSL use the new TLS keys" in line
                        for line in broker.lines),
            timeout=15, what="the inter-broker client context rebuilt",
        )  # fmt: skip
        assert _served_certificate(ssl_port) == _der(two)
    finally:
        broker.stop()
