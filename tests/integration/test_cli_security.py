"""Every client command of the CLI on a SASL_SSL listener with ACLs (issue 19, point 1).

One broker with a SASL_SSL listener only reachable with TLS and SCRAM, ACLs
enforced, ``admin`` a super user. Each command logs in through
``--command-config`` (Kafka client properties), or through ``HEADWATER_*``
environment variables; the same commands over the wrong protocol, or without
DESCRIBE on a topic, fail with one line saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.tls_certs import Certs, make_certs

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


def cli(
    *args: str, check: bool = True, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args],
        capture_output=True, text=True, timeout=90, input=stdin,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    if check and result.returncode != 0:
        raise AssertionError(f"{args} exited {result.returncode}: {result.stderr}")
    return result


class Broker:
    def __init__(self, tmp: Path, certs: Certs) -> None:
        self.certs = certs
        self.data = tmp / "data"
        self.plain_port, self.sasl_port = free_port(), free_port()
        self.proc = BrokerProcess(
            self.data,
            port=self.plain_port,
            overrides=[
                f"listeners=PLAINTEXT://127.0.0.1:{self.plain_port},"
                f"SASL_SSL://127.0.0.1:{self.sasl_port}",
                f"ssl.keystore.location={certs.server_keystore}",
                f"ssl.truststore.location={certs.ca}",
                "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
                "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                # PLAINTEXT is anonymous and has no rights: only the SASL_SSL port is usable.
                "super.users=User:admin",
                "allow.everyone.if.no.acl.found=false",
                "connection.failed.authentication.delay.ms=50",
            ],
        )

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def plain(self) -> str:
        return f"127.0.0.1:{self.plain_port}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    b = Broker(tmp_path_factory.mktemp("cli-secure"), certs)
    for user, password in PASSWORDS.items():
        cli("users", "add", user, "--password", password, "--data-dir", str(b.data))
    b.proc.start()
    try:
        yield b
    finally:
        b.proc.stop()


def command_config(broker: Broker, tmp: Path, user: str, *, jaas: bool = False) -> str:
    password = PASSWORDS[user]
    login = (
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";\n'
        if jaas
        else f"sasl.username={user}\nsasl.password={password}\n"
    )
    path = tmp / f"{user}{'-jaas' if jaas else ''}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f"ssl.truststore.location={broker.certs.ca}\n" + login
    )
    return str(path)


def test_every_client_command_through_command_config(broker: Broker, tmp_path: Path) -> None:
    admin = [
        "--bootstrap",
        broker.sasl,
        "--command-config",
        command_config(broker, tmp_path, "admin"),
    ]
    jaas = ["--bootstrap", broker.sasl,
            "--command-config", command_config(broker, tmp_path, "admin", jaas=True)]  # fmt: skip

    assert cli("topics", "create", "orders", "--partitions", "2", *admin).stdout == (
        "created topic orders\n"
    )
    assert "orders" in cli("topics", "list", *jaas).stdout.split()
    described = cli("topics", "describe", "orders", *admin).stdout
    assert described.startswith("Topic: orders\t") and "Partition: 1" in described

    produced = cli("produce", "orders", "--key-separator", ":", *admin, stdin="k1:a\nk2:b\nk3:c\n")
    assert "produced 3 of 3 records" in produced.stderr
    consumed = cli("consume", "orders", "--from-beginning", "--max-messages", "3",
                   "--format", "{key}={value}", *admin)  # fmt: skip
    assert sorted(consumed.stdout.split()) == ["k1=a", "k2=b", "k3=c"]

    # A group with a committed offset, made by a real client on the same listener.
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": broker.sasl, "group.id": "billing",
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "admin", "sasl.password": PASSWORDS["admin"],
        "ssl.ca.location": str(broker.certs.ca), "enable.auto.commit": False,
    })  # fmt: skip
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    assert "billing" in cli("groups", "list", *admin).stdout
    group = cli("groups", "describe", "billing", *admin).stdout
    assert "  orders\t0\t1\t" in group

    assert cli("transactions", "list", *admin).stdout.startswith("TransactionalId")
    assert "admin\t" in cli("users", "list", *admin).stdout
    cli("acls", "add", "--allow-principal", "User:alice", "--operation", "READ",
        "--operation", "DESCRIBE", "--topic", "orders", *admin)  # fmt: skip
    acls = cli("acls", "list", "--principal", "User:alice", *admin).stdout
    assert "ALLOW\tUser:alice\tREAD\thost=*\tTOPIC:LITERAL:orders" in acls
    as_json = json.loads(cli("acls", "list", "--principal", "User:alice", "--json", *admin).stdout)
    assert {
        "resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL",
        "principal": "User:alice", "host": "*", "operation": "READ", "permission_type": "ALLOW",
    } in as_json  # fmt: skip
    users = json.loads(cli("users", "list", "--json", *admin).stdout)
    assert "admin" in {u["user"] for u in users}
    assert all(c["iterations"] > 0 for u in users for c in u["credentials"])


def test_environment_variables_log_in_too(broker: Broker) -> None:
    env = {
        "HEADWATER_SECURITY_PROTOCOL": "SASL_SSL",
        "HEADWATER_SASL_MECHANISM": "SCRAM-SHA-512",
        "HEADWATER_SASL_USERNAME": "admin",
        "HEADWATER_SASL_PASSWORD": PASSWORDS["admin"],
        "HEADWATER_SSL_CA_LOCATION": str(broker.certs.ca),
    }
    cli("topics", "create", "from-env", "--bootstrap", broker.sasl, env=env)
    assert "from-env" in cli("topics", "list", "--bootstrap", broker.sasl, env=env).stdout.split()


def test_a_tls_port_reached_without_tls_gets_a_hint(broker: Broker) -> None:
    refused = cli("topics", "list", "--bootstrap", broker.sasl, check=False)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("error: NETWORK_EXCEPTION (13)")
    assert "hint: if this is a TLS or SASL listener" in lines[0]
    assert "Traceback" not in refused.stderr


def test_reading_a_topic_without_describe_says_not_authorized(
    broker: Broker, tmp_path: Path
) -> None:
    admin = [
        "--bootstrap",
        broker.sasl,
        "--command-config",
        command_config(broker, tmp_path, "admin"),
    ]
    alice = [
        "--bootstrap",
        broker.sasl,
        "--command-config",
        command_config(broker, tmp_path, "alice"),
    ]
    cli("topics", "create", "payroll", *admin)
    for command in (
        ["consume", "payroll", "--from-beginning", "--timeout-ms", "2000"],
        ["topics", "describe", "payroll"],
    ):
        refused = cli(*command, *alice, check=False)
        assert refused.returncode == 1, refused
        assert refused.stderr.strip() == (
            "error: TOPIC_AUTHORIZATION_FAILED (29): not authorized to describe topic 'payroll'"
        )
    missing = cli("topics", "describe", "no-such-topic", *admin, check=False)
    assert missing.stderr.strip() == (
        "error: UNKNOWN_TOPIC_OR_PARTITION (3): topic 'no-such-topic' does not exist"
    )


def test_a_denied_acls_add_names_the_acl_not_a_dict(broker: Broker, tmp_path: Path) -> None:
    alice = ["--bootstrap", broker.sasl, "--command-config",
             command_config(broker, tmp_path, "alice")]  # fmt: skip
    denied = cli("acls", "add", "--allow-principal", "User:alice", "--operation", "ALL",
                 "--topic", "payroll", *alice, check=False)  # fmt: skip
    assert denied.returncode == 1
    line = one = denied.stderr.strip()
    assert len(one.splitlines()) == 1 and "{" not in line, line
    assert line.startswith("error: CLUSTER_AUTHORIZATION_FAILED (31)"), line
