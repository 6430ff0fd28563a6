"""Stray replicas on a real cluster: a broker that was down while its topic was deleted
and re-created, and while another partition was reassigned away from it, comes back,
moves both old copies aside and deletes them, and the re-created topic gets a fresh
copy that a consumer reads without a trace of the old incarnation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition

from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess
from tests.integration.cluster_process import FAST_FAILOVER, Cluster, wait_for
from tests.integration.zookeeper import fresh_chroot_connect

pytestmark = pytest.mark.cluster


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})  # fmt: skip
    for value in values:
        producer.produce(topic, value=value.encode(), partition=0)
    assert producer.flush(60) == 0


def _read(bootstrap: str, topic: str, expected: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[str] = []
    deadline = time.monotonic() + 60
    quiet_until: float | None = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is None or msg.error():
                if len(out) >= expected:
                    quiet_until = quiet_until or time.monotonic() + 1.5
                    if time.monotonic() > quiet_until:
                        break
                continue
            out.append((msg.value() or b"").decode())
    finally:
        consumer.close()
    return out


def _registry_id(data_dir: Path, topic: str) -> str | None:
    entry = json.loads((data_dir / "topics.json").read_text())["topics"].get(topic)
    return None if entry is None else str(entry["topic_id"])


def test_a_broker_back_from_downtime_deletes_its_stray_copies(
    tmp_path: Path, zk_connect: str
) -> None:
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    c = Cluster(tmp_path, zk_connect).start()
    try:
        # x, the broker that will be away, is not the controller: no failover in the way.
        controller = c.controller_id()
        x, z = (b for b in range(3) if b != controller)
        y = controller
        kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        kadmin.create_topics([KNewTopic("reborn", replica_assignments={0: [x, y]}),
                              KNewTopic("moved", replica_assignments={0: [x, y]})])  # fmt: skip
        wait_for(lambda: c.all_have_leaders("reborn", 1) and c.all_have_leaders("moved", 1),
                 what="leaders")  # fmt: skip
        _produce(c.bootstrap, "reborn", [f"old-{i}" for i in range(30)])
        _produce(c.bootstrap, "moved", [f"m-{i}" for i in range(30)])
        wait_for(lambda: c.isr("reborn") == {x, y} and c.isr("moved") == {x, y}, what="ISRs")
        x_dir = c.brokers[x].data_dir
        old_id = _registry_id(x_dir, "reborn")
        assert old_id is not None and (x_dir / "reborn-0").is_dir()
        assert (x_dir / "moved-0").is_dir()

        c.brokers[x].stop()
        kadmin.close()
        kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        # While x is away: "reborn" is deleted and re-created (a new topic id) on {y, z},
        # then reassigned onto {x, y} (waiting for x), and "moved" leaves x for good.
        kadmin.delete_topics(["reborn"])
        wait_for(lambda: "reborn" not in c.admin().list_topics(timeout=5).topics,
                 what="reborn deleted")  # fmt: skip

        def recreate() -> bool:
            response = kadmin.create_topics([KNewTopic("reborn", replica_assignments={0: [y, z]})])
            return not any(err[1] for err in getattr(response, "topic_errors", ()))

        wait_for(recreate, what="reborn re-created")  # until its deletion has finished
        wait_for(lambda: c.all_have_leaders("reborn", 1), what="leader of the new reborn")
        reborn, moved = KTopicPartition("reborn", 0), KTopicPartition("moved", 0)
        assert kadmin.alter_partition_reassignments({reborn: [x, y]}) == {reborn: None}
        assert kadmin.alter_partition_reassignments({moved: [y, z]}) == {moved: None}
        wait_for(lambda: set(c.partitions("moved")[0].replicas) == {y, z}
                 and c.isr("moved") == {y, z}, timeout=60, what="moved onto {y, z}")  # fmt: skip
        new_values = [f"new-{i}" for i in range(20)]
        _produce(c.bootstrap, "reborn", new_values)

        c.restart(x)
        lines = c.brokers[x].lines
        # Within a bounded wait both old copies are gone, moved aside first.
        wait_for(lambda: not (x_dir / "moved-0").exists()
                 and not any(p.name.endswith("-stray") for p in x_dir.iterdir()),
                 timeout=30, what="stray copies deleted")  # fmt: skip
        assert any("stray replica reborn-0: the topic was re-created" in line for line in lines)
        assert any("stray replica moved-0: its replicas are" in line for line in lines)
        # The re-created topic's reassignment onto x completes with a fresh copy.
        wait_for(lambda: set(c.partitions("reborn")[0].replicas) == {x, y}
                 and c.isr("reborn") == {x, y}, timeout=60, what="reborn on {x, y}")  # fmt: skip
        new_id = _registry_id(x_dir, "reborn")
        assert new_id is not None and new_id != old_id
        admin = c.admin()
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("reborn", 0)]).result(30)
        wait_for(lambda: c.leader("reborn") == x, what="x leading reborn")
        # Read from x, the leader now: only the new incarnation's records.
        assert _read(c.bootstrap, "reborn", len(new_values)) == new_values
        kadmin.close()
    finally:
        c.stop()


def test_a_broker_pointed_at_another_cluster_refuses_and_deletes_nothing(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    """A typo in the chroot must not make every local copy a stray: meta.properties
    names the cluster the data directory belongs to, as Kafka's does."""
    data_dir = tmp_path / "data"
    right = fresh_chroot_connect(zookeeper)
    broker = BrokerProcess(data_dir, overrides=["broker.id=0", f"zookeeper.connect={right}",
                                                *FAST_FAILOVER])  # fmt: skip
    broker.start(timeout=60)
    try:
        _produce(broker.bootstrap, "precious", [f"v{i}" for i in range(10)])
    finally:
        broker.stop()
    assert (data_dir / "precious-0").is_dir()
    wrong = fresh_chroot_connect(zookeeper)
    broker.overrides = ["broker.id=0", f"zookeeper.connect={wrong}", *FAST_FAILOVER]
    with pytest.raises(RuntimeError, match="wrong cluster"):
        broker.start(timeout=60)
    assert (data_dir / "precious-0").is_dir()
    assert not any(p.name.endswith("-stray") for p in data_dir.iterdir())
    broker.overrides = ["broker.id=0", f"zookeeper.connect={right}", *FAST_FAILOVER]
    broker.start(timeout=60)
    try:
        assert _read(broker.bootstrap, "precious", 10) == [f"v{i}" for i in range(10)]
    finally:
        broker.stop()
