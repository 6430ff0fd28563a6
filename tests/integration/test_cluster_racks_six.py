"""Six brokers in three racks on a real ZooKeeper (KIP-36): placement at creation is even
over brokers and racks, a generated reassignment plan (``headwater partitions reassign
--generate``) moves a topic onto three new brokers keeping racks apart and executes,
and each broker's metrics and DescribeCluster say its rack. The brokers start in
parallel and share the module; the three-broker cluster is in ``test_cluster_racks``.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.test_cluster_racks import assert_spread, hw, leaders_of, replicas_of
from tests.integration.zookeeper import fresh_chroot_connect

pytestmark = pytest.mark.cluster

#: The brokers' racks (harness ids 0..5): two brokers in each of a, b, c.
SIX = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}


@pytest.fixture(scope="module")
def six(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("six"),
        fresh_chroot_connect(zookeeper),
        6,
        racks=[SIX[i] for i in range(6)],
        metrics=True,
    )
    try:
        with ThreadPoolExecutor(6) as pool:  # in parallel: six at once on two cores
            list(pool.map(lambda b: b.start(timeout=120), c.brokers))
        wait_for(lambda: len(c.live_broker_ids()) == 6, timeout=60, what="six brokers")
        yield c
    finally:
        c.stop()


def test_six_brokers_get_even_leaders_and_replicas_on_three_racks(six: Cluster) -> None:
    six.create_topic("even", partitions=12, replication=3)
    replicas = replicas_of(six.bootstrap, "even")
    assert_spread(replicas, SIX, 3)
    assert Counter(rs[0] for rs in replicas.values()) == dict.fromkeys(range(6), 2)
    assert Counter(b for rs in replicas.values() for b in rs) == dict.fromkeys(range(6), 6)
    leaders = leaders_of(six.bootstrap, "even")
    assert leaders == {p: rs[0] for p, rs in replicas.items()}


def test_generated_plan_moves_a_topic_onto_new_brokers_keeping_racks_apart(
    six: Cluster, tmp_path: Path
) -> None:
    admin = six.admin()
    on_first_three = NewTopic("moving", 6, replica_assignment=[[0, 1, 2], [1, 2, 0], [2, 0, 1]] * 2)
    admin.create_topics([on_first_three], request_timeout=30)["moving"].result(30)
    wait_for(lambda: six.all_have_leaders("moving", 6), what="leaders of moving")
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "moving"}]}))

    generated = hw(six.bootstrap, "partitions", "reassign", "--generate",
                   "--topics-to-move-json-file", str(topics), "--broker-list", "3,4,5")  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    lines = generated.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[2] == "" and lines[3] == "Proposed partition reassignment configuration"
    current, proposed = json.loads(lines[1]), json.loads(lines[4])
    assert current["version"] == 1 and len(current["partitions"]) == 6
    assert current["partitions"][1] == {
        "topic": "moving", "partition": 1, "replicas": [1, 2, 0], "log_dirs": ["any"] * 3,
    }  # fmt: skip
    assert lines[1] == json.dumps(current, separators=(",", ":"))  # Kafka's compact JSON
    plan = {e["partition"]: e["replicas"] for e in proposed["partitions"]}
    assert sorted(plan) == list(range(6))
    assert all(set(rs) == {3, 4, 5} for rs in plan.values())
    assert_spread(plan, SIX, 3)
    assert Counter(rs[0] for rs in plan.values()) == {3: 2, 4: 2, 5: 2}

    plan_file = tmp_path / "plan.json"
    plan_file.write_text(lines[4])
    started = hw(six.bootstrap, "partitions", "reassign", "--reassignment-json-file",
                 str(plan_file), "--execute")  # fmt: skip
    assert started.returncode == 0, started.stderr
    wait_for(lambda: replicas_of(six.bootstrap, "moving") == plan, timeout=90, what="the move")
    verified = hw(six.bootstrap, "partitions", "reassign", "--reassignment-json-file",
                  str(plan_file), "--verify")  # fmt: skip
    assert verified.returncode == 0, verified.stdout

    # Racks mixed within the chosen brokers are refused unless told to ignore them:
    # here every chosen broker has one, so --disable-rack-aware only changes the placement.
    unaware = hw(six.bootstrap, "partitions", "reassign", "--generate", "--disable-rack-aware",
                 "--topics-to-move-json-file", str(topics), "--broker-list", "0,3")  # fmt: skip
    assert unaware.returncode == 1  # replication factor 3 on two brokers
    assert "Replication factor: 3 larger than available brokers: 2." in unaware.stderr


def test_metrics_carry_each_brokers_rack(six: Cluster) -> None:
    for broker_id, rack in SIX.items():
        url = f"http://127.0.0.1:{six.metrics_ports[broker_id]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        assert f'headwater_broker_info{{broker_id="{broker_id}",rack="{rack}"}} 1.0' in text


def test_describe_cluster_through_confluent_kafka_has_racks(six: Cluster) -> None:
    admin = six.admin()  # alive until the answer is in
    described = admin.describe_cluster(request_timeout=10).result(10)
    assert {n.id: n.rack for n in described.nodes} == SIX
