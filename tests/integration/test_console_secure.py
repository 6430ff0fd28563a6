"""The console on a secured 3-broker cluster: SASL_SSL with SCRAM, ACLs on.

``headwater console --command-config`` logs in exactly as the CLI does (the
properties file of a Kafka client). As the super user ``admin`` it creates
and deletes a SCRAM user and an ACL; as a user with no ACLs, a refused
write names the ACL that is missing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.broker_process import free_port
from tests.integration.test_cluster_security import PASSWORDS, SecureCluster, seed
from tests.integration.zookeeper import fresh_chroot_connect

pytestmark = [pytest.mark.cluster, pytest.mark.browser]
#: The ``browser`` and ``web`` (a fresh page) fixtures.
pytest_plugins = ("tests.integration.console_browser",)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer
) -> Iterator[SecureCluster]:
    zk_connect = fresh_chroot_connect(zookeeper)
    seed(zk_connect)
    c = SecureCluster(tmp_path_factory.mktemp("console-secure"), zk_connect)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _sasl_ssl(cluster: SecureCluster) -> tuple[str, str]:
    """The brokers' SASL_SSL (INTERNAL) addresses and the CA that signed their certificates."""
    addresses, ca = [], ""
    for b in cluster.brokers:
        for item in b.overrides:
            if item.startswith("listeners="):
                addresses += re.findall(r"INTERNAL://([\d.]+:\d+)", item)
            if item.startswith("ssl.truststore.location="):
                ca = item.partition("=")[2]
    return ",".join(addresses), ca


def command_config(cluster: SecureCluster, tmp: Path, user: str, password: str) -> str:
    _, ca = _sasl_ssl(cluster)
    path = tmp / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f"ssl.ca.location={ca}\nsasl.username={user}\nsasl.password={password}\n"
    )
    return str(path)


class ConsoleProcess:
    """``headwater console`` as an operator runs it, on a free loopback port."""

    def __init__(self, bootstrap: str, config: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", "console", "--bootstrap", bootstrap,
             "--command-config", config, "--listen", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert f"console on http://127.0.0.1:{self.port}/" in line, line
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def admin_console(
    cluster: SecureCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    bootstrap, _ = _sasl_ssl(cluster)
    config = command_config(
        cluster, tmp_path_factory.mktemp("console-config"), "admin", PASSWORDS["admin"]
    )
    console = ConsoleProcess(bootstrap, config)
    try:
        yield console
    finally:
        console.stop()


def test_over_sasl_ssl_the_admin_creates_and_deletes_a_user_and_an_acl(
    web: Any, admin_console: ConsoleProcess
) -> None:
    from playwright.sync_api import expect

    page = web
    page.goto(admin_console.url)
    expect(page.locator(".stat").filter(has_text="Brokers up")).to_contain_text("3 of 3")

    page.goto(f"{admin_console.url}/security")
    expect(page.get_by_role("row").filter(has_text="admin")).to_contain_text("SCRAM-SHA-512")
    page.get_by_label("User name").fill("carol")
    page.get_by_label("Password").fill("carol-secret")
    page.get_by_label("Mechanism").select_option("SCRAM-SHA-512")
    page.get_by_role("button", name="Create user").click()
    expect(page.get_by_text("created user carol")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text="carol")).to_contain_text("SCRAM-SHA-512")

    page.get_by_label("Principal").fill("User:carol")
    page.get_by_label("Operation").select_option("READ")
    page.get_by_label("Resource type").select_option("TOPIC")
    page.get_by_label("Resource name").fill("orders")
    page.get_by_role("button", name="Create ACL").click()
    expect(page.get_by_text("created ACL ALLOW User:carol READ on TOPIC:orders")).to_be_visible()
    acl = page.get_by_role("row").filter(has_text="User:carol")
    expect(acl).to_contain_text("TOPIC:LITERAL:orders")
    page.snap("1-user-and-acl", "security")

    acl.get_by_role("button", name=re.compile("^Delete ACL")).click()
    expect(page.get_by_text("deleted 1 ACL(s)")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text="User:carol")).to_have_count(0)
    page.get_by_role("button", name="Delete user carol").click()
    expect(page.get_by_text("deleted user carol")).to_be_visible()
    expect(page.get_by_role("cell", name="carol", exact=True)).to_have_count(0)
    page.snap("2-deleted")


def test_a_denied_write_names_the_missing_acl(
    web: Any, admin_console: ConsoleProcess, cluster: SecureCluster, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = web
    # The admin console creates dave, who has no ACLs at all.
    page.goto(f"{admin_console.url}/security")
    page.get_by_label("User name").fill("dave")
    page.get_by_label("Password").fill("dave-secret")
    page.get_by_label("Mechanism").select_option("SCRAM-SHA-512")
    page.get_by_role("button", name="Create user").click()
    expect(page.get_by_text("created user dave")).to_be_visible()

    bootstrap, _ = _sasl_ssl(cluster)
    dave = ConsoleProcess(bootstrap, command_config(cluster, tmp_path, "dave", "dave-secret"))
    try:
        page.goto(f"{dave.url}/topics")
        page.get_by_label("Name").fill("daves-topic")
        page.get_by_role("button", name="Create topic").click()
        expect(
            page.get_by_text(
                "denied: User:dave needs an ALLOW CREATE ACL on Cluster:kafka-cluster "
                "(or CREATE on Topic:daves-topic)"
            )
        ).to_be_visible()
        page.snap("1-denied-create", "denied")
        page.goto(f"{dave.url}/security")
        expect(
            page.get_by_text(
                "denied: User:dave needs an ALLOW DESCRIBE ACL on Cluster:kafka-cluster"
            ).first
        ).to_be_visible()
    finally:
        dave.stop()
