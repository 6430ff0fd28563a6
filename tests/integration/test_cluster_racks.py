"""Racks on a real ZooKeeper (KIP-36): shown everywhere, and replicas placed across them.

Three brokers in racks a, b, c, started by ``headwater cluster --racks a,b,c``
(so its output and ``status`` are checked on the way) and shared by the
module. Racks are read the ways operators and clients read them: kafka-python's
DescribeCluster, raw Metadata v1/v9/v12 decoded by kio, ``headwater health``.
Topics created and grown through confluent-kafka land on three racks. A broker
without a rack joins for one test: the mixed cluster refuses topic creation as
Kafka does, and takes it with ``--disable-rack-aware``. Six brokers in three
racks are in ``test_cluster_racks_six``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # type: ignore[attr-defined]
from kafka.admin import KafkaAdminClient

from headwater.cluster.local_cluster import free_port_range
from headwater.cluster.replica_placement import MIXED_RACKS_MESSAGE
from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build, decode_response, encode_request, request_class
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.cluster_process import FAST_FAILOVER, wait_for
from tests.integration.wire import WireClient

pytestmark = pytest.mark.cluster

ZONES = {1: "a", 2: "b", 3: "c"}
UNKNOWN_SERVER_ERROR = -1
ENFORCED_HINT = (
    "Not all brokers have rack information. Add --disable-rack-aware in command line "
    "to make replica assignment without rack information."
)


def hw(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args, "--bootstrap", bootstrap],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def replicas_of(bootstrap: str, topic: str) -> dict[int, list[int]]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: list(m.replicas) for p, m in md.topics[topic].partitions.items()}


def leaders_of(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


def metadata(bootstrap: str, version: int) -> Any:
    """A raw Metadata request (no topics), decoded by kio: what any client reads."""
    c = WireClient(bootstrap.split(",")[0])
    try:
        body = {"topics": [], "allow_auto_topic_creation": False}
        req = build(request_class(ApiKey.METADATA, version), body)
        return decode_response(
            ApiKey.METADATA, version, c.request(ApiKey.METADATA, version, encode_request(req))
        )
    finally:
        c.close()


def create_topics_raw(bootstrap: str, name: str, partitions: int, factor: int) -> Any:
    """CreateTopics v5 on the wire: the exact error code and message a client gets."""
    c = WireClient(bootstrap.split(",")[0])
    try:
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": factor,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": 30_000,
            "validate_only": False,
        }
        req = build(request_class(ApiKey.CREATE_TOPICS, 5), body)
        raw = c.request(ApiKey.CREATE_TOPICS, 5, encode_request(req))
        return decode_response(ApiKey.CREATE_TOPICS, 5, raw).topics[0]  # type: ignore[attr-defined]
    finally:
        c.close()


def assert_spread(replicas: dict[int, list[int]], racks: dict[int, str], factor: int) -> None:
    """Each partition on ``factor`` distinct brokers on ``factor`` distinct racks."""
    for p, rs in replicas.items():
        assert len(set(rs)) == len(rs) == factor, (p, rs)
        assert len({racks[b] for b in rs}) == factor, (p, rs)


# --- three brokers in racks a, b, c: ``headwater cluster --racks a,b,c`` ------------


class DevCluster:
    """``headwater cluster`` running in the background; its output lines as they come."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.base = free_port_range(3)
        self.bootstrap = ",".join(f"127.0.0.1:{self.base + i}" for i in range(3))
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", "cluster", "--brokers", "3",
             "--racks", "a,b,c", "--data-dir", str(data_dir), "--base-port", str(self.base),
             "-o", "offsets.topic.num.partitions=4", "-o", "zookeeper.session.timeout.ms=3000",
             # Its last test leaves partitions on a killed broker: stop without waiting.
             "-o", "controlled.shutdown.enable=false"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def line(self, prefix: str) -> str:
        def found() -> str | None:
            assert self.proc.poll() is None, self.lines
            return next((x for x in self.lines if x.startswith(prefix)), None)

        return str(wait_for(found, timeout=120, what=f"a line {prefix!r}"))

    @property
    def zookeeper(self) -> str:
        return self.line("zookeeper: ").removeprefix("zookeeper: ")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def zones(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    cluster = DevCluster(tmp_path_factory.mktemp("zones"))
    try:
        cluster.line("racks: ")
        yield cluster
    finally:
        cluster.stop()


def test_cluster_command_shows_racks_at_start_and_in_status(zones: DevCluster) -> None:
    assert zones.line("racks: ") == "racks: 1=a,2=b,3=c"
    status = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "cluster", "--data-dir", str(zones.data_dir),
         "status"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    header, *rows = status.stdout.splitlines()[2:]
    assert header.split()[:6] == ["BROKER", "ADDRESS", "PID", "STATE", "RACK", "LOG"]
    assert {int(r.split()[0]): (r.split()[3], r.split()[4]) for r in rows} == {
        1: ("up", "a"),
        2: ("up", "b"),
        3: ("up", "c"),
    }
    state = json.loads((zones.data_dir / "cluster.json").read_text())
    assert {b["id"]: b["rack"] for b in state["brokers"]} == ZONES


def test_metadata_and_describe_cluster_give_every_brokers_rack(zones: DevCluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=zones.bootstrap)
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    assert {b["broker_id"]: b["rack"] for b in described["brokers"]} == ZONES
    for version in (1, 9, 12):  # rack since v1; flexible from v9
        resp = metadata(zones.bootstrap, version)
        assert {int(b.node_id): b.rack for b in resp.brokers} == ZONES, version


def test_health_shows_each_brokers_rack(zones: DevCluster) -> None:
    report = hw(zones.bootstrap, "health", "--json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["racks"] == {"1": "a", "2": "b", "3": "c"}
    text = hw(zones.bootstrap, "health").stdout
    assert "Racks: 1=a,2=b,3=c" in text.splitlines()


def test_created_and_added_partitions_go_on_three_racks(zones: DevCluster) -> None:
    admin = AdminClient({"bootstrap.servers": zones.bootstrap})
    topics = [NewTopic("spread", 6, 3), NewTopic("pairs", 6, 2)]
    for future in admin.create_topics(topics, request_timeout=30).values():
        future.result(30)
    spread = replicas_of(zones.bootstrap, "spread")
    assert_spread(spread, ZONES, 3)
    assert Counter(rs[0] for rs in spread.values()) == {1: 2, 2: 2, 3: 2}
    assert_spread(replicas_of(zones.bootstrap, "pairs"), ZONES, 2)

    grown = admin.create_partitions([NewPartitions("spread", 9)], request_timeout=30)
    grown["spread"].result(30)
    wait_for(lambda: len(replicas_of(zones.bootstrap, "spread")) == 9, what="9 partitions")
    assert_spread(replicas_of(zones.bootstrap, "spread"), ZONES, 3)


def test_a_broker_without_a_rack_makes_creation_refused_unless_rack_unaware(
    zones: DevCluster, tmp_path: Path
) -> None:
    rackless = BrokerProcess(
        tmp_path / "broker-4",
        port=free_port(),
        overrides=["broker.id=4", f"zookeeper.connect={zones.zookeeper}", *FAST_FAILOVER],
    ).start(timeout=60)
    try:
        wait_for(lambda: len(metadata(zones.bootstrap, 9).brokers) == 4, what="broker 4 joined")
        resp = metadata(zones.bootstrap, 9)
        assert {int(b.node_id): b.rack for b in resp.brokers} == {**ZONES, 4: None}

        # CreateTopics: Kafka's ZkAdminManager answers its AdminOperationException as
        # UNKNOWN_SERVER_ERROR; Headwater sends Kafka's message along (Kafka withheld it).
        refused = create_topics_raw(zones.bootstrap, "mixed", 3, 2)
        assert int(refused.error_code) == UNKNOWN_SERVER_ERROR
        assert refused.error_message == MIXED_RACKS_MESSAGE
        admin = AdminClient({"bootstrap.servers": zones.bootstrap})
        with pytest.raises(KafkaException) as info:
            admin.create_topics([NewTopic("mixed", 1, 1)], request_timeout=30)["mixed"].result(30)
        assert info.value.args[0].code() == UNKNOWN_SERVER_ERROR
        with pytest.raises(KafkaException):
            grow = admin.create_partitions([NewPartitions("spread", 12)], request_timeout=30)
            grow["spread"].result(30)

        # The tools say why, with Kafka's hint, and go through rack-unaware.
        cli = hw(zones.bootstrap, "topics", "create", "mixed", "--partitions", "4",
                 "--replication-factor", "2")  # fmt: skip
        assert cli.returncode == 1
        assert cli.stderr.strip() == f"error: {ENFORCED_HINT}"
        cli = hw(zones.bootstrap, "topics", "create", "mixed", "--partitions", "4",
                 "--replication-factor", "2", "--disable-rack-aware")  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        mixed = replicas_of(zones.bootstrap, "mixed")
        assert len(mixed) == 4 and all(len(set(r)) == 2 for r in mixed.values())
        assert {b for r in mixed.values() for b in r} == {1, 2, 3, 4}  # round robin over all
        cli = hw(zones.bootstrap, "topics", "alter", "mixed", "--partitions", "6")
        assert cli.returncode == 1 and ENFORCED_HINT in cli.stderr
        cli = hw(zones.bootstrap, "topics", "alter", "mixed", "--partitions", "6",
                 "--disable-rack-aware")  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        wait_for(lambda: len(replicas_of(zones.bootstrap, "mixed")) == 6, what="6 partitions")

        # Auto-creation is Kafka's RackAwareMode.Safe: placed as if no broker had a rack.
        producer = Producer({"bootstrap.servers": zones.bootstrap})
        producer.produce("auto-created", b"x")
        assert producer.flush(30) == 0
        assert len(replicas_of(zones.bootstrap, "auto-created")) == 1
    finally:
        rackless.kill()  # it leads partitions no one else holds: no controlled shutdown
    wait_for(lambda: len(metadata(zones.bootstrap, 9).brokers) == 3, what="broker 4 gone")


def test_a_cluster_of_one_registers_its_rack(tmp_path: Path) -> None:
    solo = BrokerProcess(tmp_path / "solo", overrides=["broker.rack=solo-zone"]).start()
    try:
        resp = metadata(solo.bootstrap, 9)
        assert [(int(b.node_id), b.rack) for b in resp.brokers] == [(0, "solo-zone")]
    finally:
        solo.stop()
