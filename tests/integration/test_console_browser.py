"""The web console in a real browser against a real 3-broker cluster on ZooKeeper.

Each test walks what an operator does and asserts on what the page shows
(visible text, roles), with a screenshot of each step in the artifacts dir.
One cluster and one console serve the whole module; the test that kills a
broker runs last.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KafkaNewTopic

from headwater.cluster.zookeeper_server import ZooKeeperServer
from headwater.console.auth import hash_password_scrypt
from headwater.console.server import ConsoleServer, ConsoleSettings
from tests.integration.broker_process import free_port
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.zookeeper import fresh_chroot_connect

pytestmark = [pytest.mark.cluster, pytest.mark.browser]
#: The ``browser`` and ``web`` (a fresh page) fixtures.
pytest_plugins = ("tests.integration.console_browser",)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("console-cluster"),
        fresh_chroot_connect(zookeeper),
        metrics=True,
        racks=["rack-a", "rack-b", "rack-c"],
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def console(cluster: Cluster) -> Iterator[str]:
    server = ConsoleServer(
        ConsoleSettings(
            bootstrap=cluster.bootstrap,
            listen="127.0.0.1:0",
            metrics={i: f"127.0.0.1:{port}" for i, port in enumerate(cluster.metrics_ports)},
        )
    ).start()
    try:
        yield server.url.rstrip("/")
    finally:
        server.stop()


def cli_produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "produce", topic, "--bootstrap", bootstrap],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def consume_and_commit(bootstrap: str, group: str, topic: str, expected: int) -> None:
    """A confluent-kafka member of ``group`` reads ``expected`` records, commits, and leaves."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 90
    try:
        while seen < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen += 1
        assert seen >= expected, f"read {seen} of {expected}"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def test_create_a_topic_produce_with_the_cli_and_see_the_messages(
    web: Any, console: str, cluster: Cluster
) -> None:
    from playwright.sync_api import expect

    page = web

    page.goto(f"{console}/topics")
    expect(page.get_by_role("heading", name="Topics")).to_be_visible()
    page.get_by_label("Name").fill("orders")
    page.get_by_label("Partitions").fill("3")
    page.get_by_label("Replication factor").fill("3")
    page.get_by_label("Configs").fill("retention.ms=3600000")
    page.snap("1-create-form")
    page.get_by_role("button", name="Create topic").click()
    expect(page.get_by_role("heading", name="Topic orders")).to_be_visible()
    expect(page.get_by_text("created topic orders")).to_be_visible()
    partitions = page.locator("#partitions tbody tr")
    expect(partitions).to_have_count(3)
    retention = page.get_by_role("row", name=re.compile(r"^retention\.ms "))
    expect(retention).to_contain_text("topic override")

    cli_produce(cluster.bootstrap, "orders", [f"order-{i}" for i in range(1, 31)])
    page.reload()  # log end offsets are live too: 30 records over 3 partitions
    expect(page.locator("#partitions")).to_contain_text("ok")
    page.snap("2-topic", "topic")

    page.goto(f"{console}/topics?q=ord")
    row = page.get_by_role("row").filter(has_text="orders")
    expect(row).to_contain_text("3")  # partitions and replication factor
    expect(row).to_contain_text("1.0 h")  # retention
    expect(row).to_contain_text("delete")  # cleanup policy
    page.snap("3-topics", "topics")

    page.goto(f"{console}/topics/orders/messages")
    page.get_by_label("Show").fill("50")
    page.get_by_role("button", name="Browse").click()
    for i in (1, 17, 30):
        expect(page.get_by_role("cell", name=f"order-{i}", exact=True)).to_be_visible()
    expect(page.get_by_text("30 record(s)")).to_be_visible()
    page.get_by_label("Key or value contains").fill("order-2")
    page.get_by_role("button", name="Browse").click()
    expect(page.get_by_text("11 record(s) containing “order-2”")).to_be_visible()
    page.snap("4-filtered", "messages")

    # Produce with a key, a JSON value and a header; see it pretty-printed.
    page.get_by_label("Key", exact=True).fill("customer-7")
    page.get_by_label("Value", exact=True).fill('{"item": "kettle", "qty": 2}')
    page.get_by_label("Headers").fill("source=console")
    page.get_by_role("button", name="Produce").click()
    expect(page.get_by_text(re.compile(r"produced to orders-\d at offset \d+"))).to_be_visible()
    page.get_by_label("Key or value contains").fill("kettle")
    page.get_by_label("As").select_option("json")
    page.get_by_role("button", name="Browse").click()
    expect(page.get_by_text('"item": "kettle",')).to_be_visible()
    expect(page.get_by_role("cell", name="customer-7")).to_be_visible()
    expect(page.get_by_text("=console")).to_be_visible()
    page.snap("5-produced-json")

    # A long value is cut in the list, with a way to see it whole.
    page.get_by_label("Value", exact=True).fill("long-" + "x" * 995)
    page.get_by_role("button", name="Produce").click()
    expect(page.get_by_text(re.compile(r"produced to orders-\d at offset \d+"))).to_be_visible()
    page.get_by_label("Key or value contains").fill("long-")
    page.get_by_label("As").select_option("text")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("link", name="Show all 1000 B").click()
    expect(page.get_by_text("long-" + "x" * 995, exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Download the value")).to_be_visible()


def test_a_groups_lag_rises_then_falls_live_and_its_offsets_reset(
    web: Any, console: str, cluster: Cluster
) -> None:
    from playwright.sync_api import expect

    page = web

    # One partition: the CLI's sticky partitioner would otherwise leave some partitions
    # with no records, hence no committed offset and no lag to count (as in Kafka's tool).
    cluster.create_topic("events", partitions=1, replication=3)
    cli_produce(cluster.bootstrap, "events", [f"e{i}" for i in range(100)])
    consume_and_commit(cluster.bootstrap, "readers", "events", 100)

    page.goto(f"{console}/groups/readers")
    lag = page.locator(".stat").filter(has_text="Total lag")
    expect(lag).to_contain_text("0")
    cli_produce(cluster.bootstrap, "events", [f"late{i}" for i in range(200)])
    # No reload: the live fragment shows the lag rising...
    expect(lag).to_contain_text("200")
    expect(page.locator(".uplot")).to_be_visible()
    page.snap("1-lag-risen")
    consume_and_commit(cluster.bootstrap, "readers", "events", 200)
    # ...and falling once the group has read and committed.
    expect(lag).to_have_text(re.compile(r"Total lag\s*0$"))
    expect(page.get_by_role("row").filter(has_text="events").first).to_contain_text("300")
    page.snap("2-lag-fallen", "group")

    page.goto(f"{console}/groups")
    expect(page.get_by_role("row").filter(has_text="readers")).to_contain_text("Empty")
    page.snap("3-groups", "groups")

    # Reset: preview first, then execute.
    page.goto(f"{console}/groups/readers")
    page.get_by_label(re.compile(r"^Reset to")).select_option("earliest")
    page.get_by_role("button", name="Preview").click()
    preview = page.get_by_role("table", name="Reset preview")
    expect(preview.get_by_role("row")).to_have_count(2)
    expect(preview.get_by_role("row").filter(has_text="events")).to_contain_text("-300")
    expect(page.locator(".stat").filter(has_text="Total lag")).to_contain_text("0")
    page.snap("4-reset-preview", "reset-preview")
    page.get_by_role("button", name="Execute reset").click()
    expect(page.get_by_text("reset the offsets of 1 partition(s) of readers")).to_be_visible()
    expect(page.locator(".stat").filter(has_text="Total lag")).to_contain_text("300")
    page.snap("5-reset-done")

    # Shift needs a number: the form says so, nothing changes.
    page.get_by_label(re.compile(r"^Reset to")).select_option("shift")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_text("reset to shift needs a number")).to_be_visible()

    page.get_by_label("Type readers to confirm").fill("readers")
    page.get_by_role("button", name="Delete group").click()
    expect(page.get_by_text("deleted group readers")).to_be_visible()
    expect(page.get_by_role("link", name="readers")).to_have_count(0)


def test_an_active_groups_offsets_are_not_reset(web: Any, console: str, cluster: Cluster) -> None:
    from playwright.sync_api import expect

    page = web

    cluster.create_topic("live", partitions=1, replication=3)
    cli_produce(cluster.bootstrap, "live", ["a", "b"])
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "busy",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["live"])
    try:
        wait_for(lambda: consumer.poll(0.5) is not None and consumer.assignment(), 60, "assignment")
        page.goto(f"{console}/groups/busy")
        expect(page.locator(".stat").filter(has_text="Members")).to_contain_text("1")
        expect(page.get_by_role("cell", name="live[0]")).to_be_visible()
        page.get_by_label(re.compile(r"^Reset to")).select_option("earliest")
        page.get_by_role("button", name="Preview").click()
        expect(page.get_by_text("stop its consumers first")).to_be_visible()
        expect(page.get_by_role("button", name="Execute reset")).to_have_count(0)
    finally:
        consumer.close()


def test_topic_configs_partitions_and_a_typed_delete(
    web: Any, console: str, cluster: Cluster
) -> None:
    from playwright.sync_api import expect

    page = web

    cluster.create_topic("scratch", partitions=1, replication=2)
    page.goto(f"{console}/topics/scratch")
    page.get_by_label("Set").fill("cleanup.policy=compact")
    page.get_by_role("button", name="Alter configs").click()
    expect(page.get_by_text("altered configs of scratch: cleanup.policy=compact")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text="cleanup.policy")).to_contain_text("compact")
    page.get_by_label("New total").fill("4")
    page.get_by_role("button", name="Add partitions").click()
    expect(page.get_by_text("scratch now has 4 partitions")).to_be_visible()
    expect(page.locator("#partitions tbody tr")).to_have_count(4)
    page.get_by_label("Type scratch to confirm").fill("scratc")
    page.get_by_role("button", name="Delete topic").click()
    expect(
        page.get_by_text("not deleted: type the topic's name (scratch) to confirm")
    ).to_be_visible()
    page.get_by_label("Type scratch to confirm").fill("scratch")
    page.get_by_role("button", name="Delete topic").click()
    expect(page.get_by_text("deleted topic scratch")).to_be_visible()
    wait_for(lambda: "scratch" not in cluster.admin().list_topics(timeout=5).topics, 30, "delete")
    page.goto(f"{console}/topics?q=scratch")
    expect(page.get_by_text("No topics match “scratch”.")).to_be_visible()


def test_operations_and_metrics_pages(web: Any, console: str, cluster: Cluster) -> None:
    from playwright.sync_api import expect

    page = web

    page.goto(f"{console}/operations")
    expect(page.get_by_text("No reassignment in progress.")).to_be_visible()
    page.get_by_role("button", name="Elect preferred leaders").click()
    expect(page.get_by_text(re.compile(r"preferred leader election: \d+ moved"))).to_be_visible()
    page.get_by_role("button", name="Find hanging transactions").click()
    expect(page.get_by_text("No hanging transactions.")).to_be_visible()
    page.snap("1-operations", "operations")

    cluster.create_topic("ticks", partitions=3, replication=3)
    page.goto(f"{console}/metrics")
    stop = threading.Event()

    def traffic() -> None:  # a steady trickle, so the charts have something to show
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
        reader = Consumer(
            {"bootstrap.servers": cluster.bootstrap, "group.id": "ticker", "fetch.wait.max.ms": 100}
        )
        reader.subscribe(["ticks"])
        while not stop.is_set():
            for i in range(20):
                producer.produce("ticks", f"tick-{i}".encode())
            producer.poll(0)
            reader.poll(0.05)
            stop.wait(0.1)  # about 200 records/s
        producer.flush(10)
        reader.close()

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    try:
        # Six charts once two scrapes of each broker have been made (a few seconds).
        expect(page.locator(".uplot")).to_have_count(6)
        # Enough points for lines (each chart carries its data as JSON), then the picture.
        page.wait_for_function(
            "JSON.parse(document.querySelector('[data-chart] script').textContent).x.length >= 5"
        )
        expect(page.get_by_role("table", name="Broker metrics")).to_contain_text(
            re.compile(r"[1-9][\d.]* (B|KiB)/s")
        )
    finally:
        stop.set()
        thread.join(15)
    for broker_id in range(3):
        expect(
            page.get_by_role("row").filter(has_text=f"127.0.0.1:{cluster.metrics_ports[broker_id]}")
        ).to_be_visible()
    page.snap("2-metrics", "metrics")


def test_a_read_only_console_hides_and_refuses_writes(web: Any, cluster: Cluster) -> None:
    from playwright.sync_api import expect

    page = web

    server = ConsoleServer(
        ConsoleSettings(bootstrap=cluster.bootstrap, listen="127.0.0.1:0", read_only=True)
    ).start()
    try:
        url = server.url.rstrip("/")
        page.goto(f"{url}/topics")
        expect(page.get_by_text("read-only", exact=True)).to_be_visible()
        expect(page.get_by_role("link", name="orders")).to_be_visible()
        expect(page.get_by_role("button", name="Create topic")).to_have_count(0)
        page.goto(f"{url}/topics/orders")
        expect(page.get_by_role("button", name="Delete topic")).to_have_count(0)
        page.snap("1-hidden")
        # A write sent by hand, with the session's own CSRF token, is refused all the same.
        token = page.locator("body").get_attribute("data-csrf")
        answer = page.request.post(
            f"{url}/topics/orders/delete", form={"csrf": token or "", "confirm": "orders"}
        )
        assert answer.status == 403
        assert "this console is read-only" in answer.text()
        page.set_content(answer.text())
        expect(page.get_by_text("refused: this console is read-only")).to_be_visible()
        page.snap("2-refused")
        assert "orders" in cluster.admin().list_topics(timeout=5).topics
    finally:
        server.stop()


def test_bound_off_loopback_it_needs_and_takes_a_login(
    web: Any, cluster: Cluster, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = web

    port = free_port()
    base = [sys.executable, "-m", "headwater.cli", "console", "--bootstrap", cluster.bootstrap,
            "--listen", f"0.0.0.0:{port}"]  # fmt: skip
    refused = subprocess.run(base, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 1
    assert "is not a loopback address" in refused.stderr

    users = tmp_path / "users"
    users.write_text(f"ops:{hash_password_scrypt('console-pw')}\n")
    proc = subprocess.Popen(
        [*base, "--users", str(users)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"console on http://127.0.0.1:{port}/" in line, line
        # Bound to every address; the test only ever talks to 127.0.0.1.
        page.goto(f"http://127.0.0.1:{port}/topics")
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
        page.get_by_label("User").fill("ops")
        page.get_by_label("Password").fill("wrong")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_text("wrong user name or password")).to_be_visible()
        page.snap("1-login", "login")
        page.get_by_label("User").fill("ops")
        page.get_by_label("Password").fill("console-pw")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Topics")).to_be_visible()
        expect(page.get_by_text("ops", exact=True)).to_be_visible()
        page.get_by_role("button", name="Log out").click()
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    finally:
        proc.terminate()
        proc.wait(30)


def test_an_unreachable_cluster_is_a_banner_that_keeps_retrying(web: Any) -> None:
    from playwright.sync_api import expect

    page = web

    port = free_port()  # nothing listens there
    server = ConsoleServer(
        ConsoleSettings(bootstrap=f"127.0.0.1:{port}", listen="127.0.0.1:0")
    ).start()
    try:
        page.goto(server.url)
        banner = page.get_by_role("alert")
        expect(banner).to_contain_text("Cluster unreachable.")
        first = banner.inner_text()
        # It retries on its own: the "last try" time moves on without a reload.
        expect(banner).not_to_have_text(first, timeout=15_000)
        page.snap("1-banner", "unreachable")
    finally:
        server.stop()


def test_zz_a_killed_broker_shows_down_with_under_replicated_partitions(
    web: Any, console: str, cluster: Cluster, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = web

    cluster.create_topic("health", partitions=3, replication=3)
    page.goto(console)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    brokers = page.get_by_role("row").filter(has_text="127.0.0.1:")
    expect(brokers).to_have_count(3)
    expect(page.get_by_role("row").filter(has_text="rack-b")).to_contain_text("up")
    expect(page.locator(".stat").filter(has_text="Under-replicated")).to_contain_text("0")
    expect(page.locator(".stat").filter(has_text="Bytes in")).to_contain_text("/s")
    page.snap("1-healthy", "overview")
    cluster.kill(1)
    # No reload: the live overview marks broker 1 down and counts its partitions.
    expect(page.get_by_role("row").filter(has_text="rack-b")).to_contain_text("down")
    expect(page.locator(".stat").filter(has_text="Brokers up")).to_contain_text("2 of 3")
    expect(page.locator(".stat").filter(has_text="Under-replicated")).not_to_contain_text(
        re.compile(r"partitions\s*0$")
    )
    expect(page.get_by_text("Unhealthy partitions:")).to_be_visible()
    page.snap("2-broker-down", "overview-broker-down")
    page.goto(f"{console}/topics/health")
    expect(page.get_by_text("under-replicated").first).to_be_visible()
    expect(page.get_by_text("(broker 1 down)").first).to_be_visible()
    page.snap("3-topic-under-replicated")

    # A reassignment onto the dead broker waits: it shows as in progress, with its bar.
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    kadmin.create_topics([KafkaNewTopic("moving", replica_assignments={0: [0, 2]})])
    kadmin.close()
    wait_for(lambda: cluster.all_have_leaders("moving", 1), what="leader of moving")
    cli_produce(cluster.bootstrap, "moving", [f"m{i}" for i in range(100)])
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [
            {"topic": "moving", "partition": 0, "replicas": [0, 2, 1]}]})
    )  # fmt: skip
    reassign = [
        *(sys.executable, "-m", "headwater.cli", "partitions", "reassign"),
        *("--reassignment-json-file", str(plan), "--bootstrap", cluster.bootstrap),
    ]
    subprocess.run(reassign, check=True, capture_output=True, timeout=120)
    page.goto(f"{console}/operations")
    moving = page.get_by_role("row").filter(has_text="moving-0")
    expect(moving).to_contain_text("0, 2, 1")
    expect(moving.get_by_role("progressbar")).to_be_visible()
    expect(moving).to_contain_text(re.compile(r"0 B of \d+"))
    page.snap("4-reassignment", "operations-reassignment")
    subprocess.run([*reassign, "--cancel"], check=True, capture_output=True, timeout=120)
    expect(page.get_by_text("No reassignment in progress.")).to_be_visible()
