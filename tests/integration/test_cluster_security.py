"""Security in a 3-broker cluster: credentials and ACLs in ZooKeeper, brokers over SASL_SSL.

Every broker has three listeners: PLAINTEXT (the harness's port; its
ANONYMOUS principal may only create and describe topics), INTERNAL
(SASL_SSL, ``inter.broker.listener.name``: replication authenticates there
as ``User:broker``, a super user) and CLIENT (SASL_PLAINTEXT, where users
come in; ``listener.name.client.sasl.enabled.mechanisms`` differs from the
broker-wide setting). ACLs are on. The first credentials and ACLs are
written into ZooKeeper before the brokers start, as Kafka's operators do
with ``kafka-configs --zookeeper``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient

from headwater.cluster.zookeeper_server import ZooKeeperServer
from headwater.protocol.apis import ApiKey
from tests.integration.broker_process import free_port
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.test_security import cli, request, scram_login
from tests.integration.tls_certs import make_certs
from tests.integration.wire import WireClient
from tests.integration.zookeeper import fresh_chroot_connect

pytestmark = pytest.mark.cluster

PASSWORDS = {"broker": "broker-secret", "admin": "admin-secret"}


def seed(zk_connect: str) -> None:
    """The broker and admin users and ANONYMOUS's ACLs, straight into ZooKeeper."""
    for user, password in PASSWORDS.items():
        cli("users", "add", user, "--password", password, "--zookeeper", zk_connect)
    listed = cli("users", "list", "--zookeeper", zk_connect).stdout
    assert "broker\t" in listed and "SCRAM-SHA-512" in listed, listed
    # ANONYMOUS (the harness's PLAINTEXT admin client) may create and see topics only.
    cli("acls", "add", "--zookeeper", zk_connect, "--allow-principal", "User:ANONYMOUS",
        "--operation", "CREATE", "--cluster")  # fmt: skip
    added = cli("acls", "add", "--zookeeper", zk_connect, "--allow-principal", "User:ANONYMOUS",
                "--operation", "DESCRIBE", "--topic", "*").stdout  # fmt: skip
    assert "ALLOW\tUser:ANONYMOUS\tDESCRIBE\thost=*\tTOPIC:LITERAL:*" in added, added


class SecureCluster(Cluster):
    def __init__(self, root: Path, zk_connect: str) -> None:
        certs = make_certs(root / "certs")
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="broker" password="{PASSWORDS["broker"]}";'
        )
        super().__init__(
            root,
            zk_connect,
            overrides=[
                "listener.security.protocol.map="
                "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CLIENT:SASL_PLAINTEXT",
                "inter.broker.listener.name=INTERNAL",
                "sasl.enabled.mechanisms=SCRAM-SHA-512",
                "listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
                f"listener.name.internal.scram-sha-512.sasl.jaas.config={jaas}",
                f"ssl.keystore.location={certs.server_keystore}",
                f"ssl.truststore.location={certs.ca}",
                "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                "super.users=User:broker;User:admin",
                "connection.failed.authentication.delay.ms=10",
            ],
        )
        self.client_ports: list[int] = []
        for b in self.brokers:
            internal, client = free_port(), free_port()
            self.client_ports.append(client)
            b.overrides.append(
                f"listeners=PLAINTEXT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{internal},"
                f"CLIENT://127.0.0.1:{client}"
            )

    def client(self, broker: int) -> str:
        return f"127.0.0.1:{self.client_ports[broker]}"

    def sasl(self, broker: int, user: str, password: str) -> dict[str, str]:
        return {
            "bootstrap.servers": self.client(broker),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
        }


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer
) -> Iterator[SecureCluster]:
    zk_connect = fresh_chroot_connect(zookeeper)
    seed(zk_connect)
    c = SecureCluster(tmp_path_factory.mktemp("secure-cluster"), zk_connect)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def produce(config: dict[str, str], topic: str, count: int = 5) -> list[KafkaError | None]:
    outcomes: list[KafkaError | None] = []
    p = Producer({**config, "acks": "all", "message.timeout.ms": "20000"})
    for i in range(count):
        p.produce(topic, f"m{i}".encode(), on_delivery=lambda err, _msg: outcomes.append(err))
    p.flush(30)
    return outcomes


def login(cluster: SecureCluster, broker: int, user: str, password: str) -> tuple[WireClient, int]:
    w = WireClient(cluster.client(broker))
    return w, int(scram_login(w, user, password).error_code)


def metadata_error(w: WireClient, topic: str) -> int:
    md = request(w, ApiKey.METADATA, 9, {"topics": [{"name": topic}]})
    return int(md.topics[0].error_code)


def test_replication_runs_over_the_sasl_ssl_inter_broker_listener(cluster: SecureCluster) -> None:
    cluster.create_topic("replicated", partitions=3, replication=3, **{"min.insync.replicas": "3"})
    # acks=all with min.insync.replicas=3: every record is on all three brokers.
    admin = cluster.sasl(0, "admin", PASSWORDS["admin"])
    assert produce(admin, "replicated", 30) == [None] * 30
    leaders = {cluster.leader("replicated", p) for p in range(3)}
    for p in range(3):
        assert cluster.isr("replicated", p) == {0, 1, 2}
    for i in leaders:
        # Its followers authenticated as the broker principal on INTERNAL, nowhere else.
        lines = [line for line in cluster.brokers[i].lines if "User:broker authenticated" in line]
        assert lines and all("on INTERNAL" in line for line in lines), (i, lines)
    # Each broker registered every listener, Kafka's way.
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    try:
        registration = json.loads(zk.get("/brokers/ids/1")[0])
    finally:
        zk.stop()
        zk.close()
    assert registration["listener_security_protocol_map"] == {
        "PLAINTEXT": "PLAINTEXT",
        "INTERNAL": "SASL_SSL",
        "CLIENT": "SASL_PLAINTEXT",
    }
    assert f"CLIENT://{cluster.client(1)}" in registration["endpoints"]


def test_a_user_and_acl_made_through_one_broker_apply_on_the_others(
    cluster: SecureCluster,
) -> None:
    cluster.create_topic("shared", replication=3)
    cluster.create_topic("private", replication=3)
    admin = AdminClient(cluster.sasl(0, "admin", PASSWORDS["admin"]))
    for user in ("alice", "bob"):
        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), f"{user}-pw".encode()
        )
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)
    write = AclBinding(
        ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL,
        "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip
    for future in admin.create_acls([write]).values():
        future.result(30)
    for broker in (1, 2):
        # The credential made through broker 0 authenticates here...
        w, code = wait_for(
            lambda b=broker: (r := login(cluster, b, "alice", "alice-pw"))[1] == 0 and r,
            timeout=10,
            what=f"alice's credential on broker {broker}",
        )
        # ... and the ACL decides here: WRITE implies DESCRIBE on "shared" only.
        wait_for(lambda w=w: metadata_error(w, "shared") == 0, timeout=10, what="alice's ACL")
        assert metadata_error(w, "private") == 29
        w.close()
        _, wrong = login(cluster, broker, "alice", "not-her-password")
        assert wrong == 58
    assert produce(cluster.sasl(2, "alice", "alice-pw"), "shared") == [None] * 5
    denied = produce(cluster.sasl(1, "bob", "bob-pw"), "shared", 1)
    assert denied[0] is not None
    assert denied[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Removing the ACL through broker 2 takes it away on broker 1.
    gone = AclBindingFilter(
        ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL,
        "User:alice", None, AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    admin2 = AdminClient(cluster.sasl(2, "admin", PASSWORDS["admin"]))
    for future in admin2.delete_acls([gone]).values():
        future.result(30)
    w, code = login(cluster, 1, "alice", "alice-pw")
    assert code == 0
    started = time.monotonic()
    wait_for(lambda: metadata_error(w, "shared") == 29, timeout=10, what="ACL removal")
    print(f"ACL removal seen on broker 1 after {time.monotonic() - started:.2f} s")
    w.close()
