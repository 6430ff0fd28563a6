"""Operating a three-broker cluster on a real ZooKeeper: DeleteRecords on leaders reaching
followers, ``topics describe`` with a dead broker, controlled shutdown, leader elections."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
)
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic

from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build, decode_response, encode_request, request_class
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.wire import WireClient

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect).start()
    try:
        yield c
    finally:
        c.stop()


def _produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})  # fmt: skip
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(60) == 0


def _earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, partition)
    return int(admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset)


def test_delete_records_reaches_the_followers(cluster: Cluster) -> None:
    cluster.create_topic("trimmed", partitions=1, replication=3, **{"min.insync.replicas": "2"})
    _produce(cluster.bootstrap, "trimmed", 200)
    admin = cluster.admin()
    tp = TopicPartition("trimmed", 0)
    assert (
        admin.delete_records([TopicPartition("trimmed", 0, 150)])[tp].result(30).low_watermark
        == 150
    )  # type: ignore[index]
    # Followers copy the new log start from their fetches (and keep it on disk):
    # after the leader dies, the new leader starts at 150 too.
    leader = cluster.leader("trimmed")

    def followers_start() -> set[str]:
        return {
            (b.data_dir / "trimmed-0" / "log-start-offset").read_text().strip()
            for i, b in enumerate(cluster.brokers)
            if i != leader
        }

    wait_for(lambda: followers_start() == {"150"}, what="followers' log start 150")
    cluster.kill(leader)
    wait_for(lambda: cluster.leader("trimmed") not in (leader, -1), what="a new leader")
    wait_for(lambda: _earliest(cluster.bootstrap, "trimmed") == 150, what="log start 150")


def test_topics_describe_works_right_after_a_broker_dies(cluster: Cluster) -> None:
    cluster.create_topic("described", partitions=3, replication=3)
    cluster.kill(0)
    live = ",".join(b.bootstrap for b in cluster.brokers[1:])
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "topics", "describe", "described",
         "--bootstrap", live],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("Partition:") == 3
    assert time.monotonic() - started < 30


class AckClock:
    """An idempotent acks=all producer writing numbered records to every partition,
    remembering when each partition last got an ack and its longest gap between acks."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.acked: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self.last_ack: dict[int, float] = {}
        self.longest_gap: dict[int, float] = dict.fromkeys(range(partitions), 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(bootstrap,), daemon=True)

    def start(self) -> AckClock:
        self._thread.start()
        wait_for(lambda: all(self.acked.values()), what="first acks on every partition")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    def reset_gaps(self) -> None:
        self.longest_gap = dict.fromkeys(range(self.partitions), 0.0)

    def wait_acked_since(self, moment: float, timeout: float = 120.0) -> None:
        """Until every partition has an ack after ``moment`` (so a gap in progress
        then is over and counted)."""
        wait_for(lambda: all(self.last_ack.get(p, 0.0) > moment for p in range(self.partitions)),
                 timeout=timeout, what="acks on every partition")  # fmt: skip

    def _delivered(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        p = int(msg.partition())  # type: ignore[attr-defined]
        now = time.monotonic()
        last = self.last_ack.get(p)
        if last is not None:
            self.longest_gap[p] = max(self.longest_gap[p], now - last)
        self.last_ack[p] = now
        self.acked[p].append(int(msg.value()))  # type: ignore[attr-defined]

    def _run(self, bootstrap: str) -> None:
        producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2, "message.timeout.ms": 120_000,
        })  # fmt: skip
        i = 0
        while not self._stop.is_set():
            for p in range(self.partitions):
                try:
                    producer.produce(self.topic, value=str(i).encode(), partition=p,
                                     on_delivery=self._delivered)  # fmt: skip
                except BufferError:
                    producer.poll(0.05)
            i += 1
            producer.poll(0)
            time.sleep(0.005)
        assert producer.flush(120) == 0


def test_rolling_sigterm_restart_under_acks_all_load_loses_and_stalls_nothing(
    cluster: Cluster,
) -> None:
    partitions = 6
    cluster.create_topic("rolling", partitions=partitions, replication=3,
                         **{"min.insync.replicas": "2"})  # fmt: skip
    clock = AckClock(cluster.bootstrap, "rolling", partitions).start()
    stop_times = []
    gaps = []
    try:
        for broker_id in range(3):
            # Every partition back in full ISR before the next broker goes.
            wait_for(lambda: all(len(p.isrs) == 3 for p in cluster.partitions("rolling").values()),
                     timeout=60, what="full ISRs")  # fmt: skip
            clock.reset_gaps()
            started = time.monotonic()
            assert cluster.brokers[broker_id].stop() == 0
            stop_times.append(time.monotonic() - started)
            clock.wait_acked_since(time.monotonic())
            lines = cluster.brokers[broker_id].lines
            assert any("controlled shutdown succeeded" in line for line in lines), lines[-30:]
            gap = max(clock.longest_gap.values())
            gaps.append(gap)
            print(f"broker {broker_id}: SIGTERM to exit {stop_times[-1]:.2f} s, "
                  f"longest ack gap {gap * 1000:.0f} ms")  # fmt: skip
            cluster.restart(broker_id)
        wait_for(lambda: all(len(p.isrs) == 3 for p in cluster.partitions("rolling").values()),
                 timeout=60, what="full ISRs")  # fmt: skip
    finally:
        clock.stop()
    assert clock.errors == []
    for p, values in clock.acked.items():
        assert values == sorted(set(values)), f"partition {p}: acks out of order or duplicated"
    read = read_all_partitions(cluster.bootstrap, "rolling", sum(map(len, clock.acked.values())))
    for p, values in clock.acked.items():
        assert read[p] == values, f"partition {p}: read back differs from what was acked"
    assert max(stop_times) < 30
    # The gaps are printed, not asserted: on a loaded machine they vary by seconds
    # (bench/bench_cluster_ops.py measures them, controlled shutdown on and off).
    print(f"longest ack gaps per stop (s): {[round(g, 3) for g in gaps]}")


def read_all_partitions(bootstrap: str, topic: str, expected: int) -> dict[int, list[int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    out: dict[int, list[int]] = {}
    count = 0
    deadline = time.monotonic() + 90
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is None or msg.error():
                if count >= expected:
                    quiet_until = quiet_until or time.monotonic() + 1.5
                    if time.monotonic() > quiet_until:
                        break
                continue
            value = msg.value()
            out.setdefault(msg.partition(), []).append(int(value) if value.isdigit() else -1)
            count += 1
    finally:
        consumer.close()
    return out


def test_controlled_shutdown_with_no_other_in_sync_replica_gives_up_saying_why(
    tmp_path: Path, zk_connect: str
) -> None:
    c = Cluster(tmp_path, zk_connect, size=2, overrides=[
        "controlled.shutdown.max.retries=2", "controlled.shutdown.retry.backoff.ms=200",
    ]).start()  # fmt: skip
    try:
        c.create_topic("lonely", partitions=1, replication=2)
        _produce(c.bootstrap, "lonely", 50)
        leader = c.leader("lonely")
        other = 1 - leader
        c.kill(other)
        wait_for(lambda: c.isr("lonely") == {leader}, what="ISR of the leader alone")
        started = time.monotonic()
        assert c.brokers[leader].stop() == 0
        assert time.monotonic() - started < 30
        lines = c.brokers[leader].lines
        assert any("no other in-sync replica to lead them: lonely-0" in x for x in lines)
        assert any("no other replica of them is alive and staying" in x for x in lines)
        c.restart(leader)
        wait_for(lambda: c.leader("lonely") == leader, what="the leader back")
        assert _earliest(c.bootstrap, "lonely") == 0
        assert len(read_all_partitions(c.bootstrap, "lonely", 50).get(0, [])) == 50
    finally:
        c.stop()


def test_elect_leaders_preferred_after_a_restart_and_unclean(cluster: Cluster) -> None:
    cluster.create_topic("skewed", partitions=3, replication=3)
    preferred = {p: m.replicas[0] for p, m in cluster.partitions("skewed").items()}
    cluster.brokers[0].stop()
    cluster.restart(0)
    wait_for(lambda: all(len(p.isrs) == 3 for p in cluster.partitions("skewed").values()),
             what="full ISRs")  # fmt: skip
    skewed = [p for p, m in cluster.partitions("skewed").items() if m.leader != preferred[p]]
    assert skewed, "broker 0 led nothing before its restart"
    admin = cluster.admin()
    results = admin.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition("skewed", p) for p in range(3)]
    ).result(30)
    for tp, error in results.items():
        if tp.partition in skewed:
            assert error is None, (tp, error)
        else:
            assert error is not None and error.code() == KafkaError.ELECTION_NOT_NEEDED
    assert {p: m.leader for p, m in cluster.partitions("skewed").items()} == preferred
    # All partitions (None): nothing left to do.
    again = admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    assert all(e is not None for e in again.values())
    # UNCLEAN for a partition that has a live leader: not needed.
    unclean = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("skewed", 0)]).result(30)
    (error,) = unclean.values()
    assert error is not None and error.code() == KafkaError.ELECTION_NOT_NEEDED


def _start_three_of_four(tmp_path: Path, zk_connect: str, *overrides: str) -> Cluster:
    c = Cluster(tmp_path, zk_connect, size=4, overrides=overrides)
    for b in c.brokers[:3]:
        b.start(timeout=60)
    wait_for(lambda: len(c.live_broker_ids()) == 3, what="three brokers")
    return c


def test_scale_out_moves_a_topic_to_new_brokers_under_acks_all_load(
    tmp_path: Path, zk_connect: str
) -> None:
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    c = _start_three_of_four(tmp_path, zk_connect)
    try:
        kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        kadmin.create_topics([NewTopic("moving", replica_assignments={0: [0, 1], 1: [1, 0]},
                                       topic_configs={"min.insync.replicas": "1"})])  # fmt: skip
        wait_for(lambda: c.all_have_leaders("moving", 2), what="leaders")
        clock = AckClock(c.bootstrap, "moving", 2).start()
        try:
            c.brokers[3].start(timeout=60)  # broker 3 joins with no partitions
            wait_for(lambda: len(c.live_broker_ids()) == 4, what="four brokers")
            time.sleep(0.5)  # some records before the move starts
            targets = {KTopicPartition("moving", p): [2, 3] for p in range(2)}
            assert kadmin.alter_partition_reassignments(targets) == dict.fromkeys(targets)
            wait_for(lambda: all(set(m.replicas) == {2, 3} and set(m.isrs) == {2, 3}
                                 for m in c.partitions("moving").values()),
                     timeout=90, what="partitions on {2, 3}")  # fmt: skip
            assert kadmin.list_partition_reassignments() == {}
            wait_for(lambda: not any((c.brokers[b].data_dir / f"moving-{p}").exists()
                                     for b in (0, 1) for p in range(2)),
                     what="old copies deleted")  # fmt: skip
            time.sleep(0.5)  # and some records after it
        finally:
            clock.stop()
        assert clock.errors == []
        read = read_all_partitions(c.bootstrap, "moving", sum(map(len, clock.acked.values())))
        for p, values in clock.acked.items():
            assert read[p] == values, f"partition {p}: read back differs from what was acked"
        kadmin.close()
    finally:
        c.stop()


def test_a_reassignment_is_cancelled_with_a_null_target(tmp_path: Path, zk_connect: str) -> None:
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    c = _start_three_of_four(tmp_path, zk_connect)
    try:
        kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        kadmin.create_topics([NewTopic("stay", replica_assignments={0: [0, 1]})])
        wait_for(lambda: c.all_have_leaders("stay", 1), what="leader")
        _produce(c.bootstrap, "stay", 100)
        tp = KTopicPartition("stay", 0)
        # Broker 3 is down: the move waits, the partition keeps its ISR.
        assert kadmin.alter_partition_reassignments({tp: [0, 3]}) == {tp: None}
        listed = kadmin.list_partition_reassignments()
        assert list(listed) == [tp]
        time.sleep(1.0)
        assert c.isr("stay") == {0, 1}
        assert kadmin.alter_partition_reassignments({tp: None}) == {tp: None}
        wait_for(lambda: kadmin.list_partition_reassignments() == {}, what="no reassignment")
        assert set(c.partitions("stay")[0].replicas) == {0, 1}
        again = kadmin.alter_partition_reassignments({tp: None})
        assert again[tp] is not None and again[tp].errno == 85
        kadmin.close()
    finally:
        c.stop()


def test_a_controller_kill_9_mid_reassignment_resumes_it(tmp_path: Path, zk_connect: str) -> None:
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    c = _start_three_of_four(tmp_path, zk_connect)
    try:
        controller = c.controller_id()
        keep = [b for b in range(3) if b != controller]
        kadmin = KafkaAdminClient(bootstrap_servers=",".join(c.brokers[b].bootstrap for b in keep))
        kadmin.create_topics([NewTopic("resumed", replica_assignments={0: keep})])
        wait_for(lambda: c.all_have_leaders("resumed", 1), what="leader")
        _produce(c.bootstrap, "resumed", 100)
        tp = KTopicPartition("resumed", 0)
        # The target broker 3 is down: the move waits in ZooKeeper.
        assert kadmin.alter_partition_reassignments({tp: [keep[0], 3]}) == {tp: None}
        c.kill(controller)
        wait_for(lambda: c.controller_id() in keep, what="a new controller")
        c.brokers[3].start(timeout=60)
        wait_for(lambda: set(c.partitions("resumed")[0].replicas) == {keep[0], 3}
                 and c.isr("resumed") == {keep[0], 3}, timeout=60,
                 what="the move completed by the new controller")  # fmt: skip
        kadmin.close()
        fresh = KafkaAdminClient(
            bootstrap_servers=c.bootstrap
        )  # the old one knew the dead controller
        assert fresh.list_partition_reassignments() == {}
        fresh.close()
        values = read_all_partitions(c.bootstrap, "resumed", 100).get(0, [])
        assert len(values) == 100
    finally:
        c.stop()


def _broker_config(bootstrap: str, broker_id: int, key: str) -> tuple[str | None, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    entry = admin.describe_configs([res])[res].result(10)[key]
    return entry.value, int(entry.source)


def test_a_cluster_default_broker_config_set_through_one_broker_reaches_all(
    cluster: Cluster,
) -> None:
    cluster.create_topic("inherits", partitions=1, replication=3)
    # The cluster default is the BROKER resource named "" (confluent-kafka refuses that name).
    client = WireClient(cluster.brokers[0].bootstrap)
    try:
        req = build(request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1), {
            "resources": [{"resource_type": 4, "resource_name": "", "configs": [
                {"name": "log.retention.ms", "config_operation": 0, "value": "3600000"}]}],
            "validate_only": False,
        })  # fmt: skip
        body = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, encode_request(req))
    finally:
        client.close()
    (answer,) = decode_response(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses
    assert answer.error_code == 0, answer
    for broker_id, b in enumerate(cluster.brokers):
        wait_for(lambda b=b, broker_id=broker_id: _broker_config(b.bootstrap, broker_id,
                 "log.retention.ms") == ("3600000", 3), timeout=15,
                 what=f"the default on broker {broker_id}")  # fmt: skip
        # Applied: the topic inherits it on every replica.
        res = ConfigResource(ConfigResource.Type.TOPIC, "inherits")
        reader = AdminClient({"bootstrap.servers": b.bootstrap})
        assert reader.describe_configs([res])[res].result(10)["retention.ms"].value == "3600000"
    # A per-broker value wins over the default, on that broker only.
    own = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.ms", "7200000",
                    incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    writer = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    writer.incremental_alter_configs([own])[own].result(30)
    assert _broker_config(cluster.brokers[1].bootstrap, 1, "log.retention.ms") == ("7200000", 2)
    # Both survive restarts of every broker.
    for broker_id in range(3):
        cluster.brokers[broker_id].restart()
    wait_for(lambda: len(cluster.live_broker_ids()) == 3, what="all brokers back")
    assert _broker_config(cluster.brokers[1].bootstrap, 1, "log.retention.ms") == ("7200000", 2)
    assert _broker_config(cluster.brokers[2].bootstrap, 2, "log.retention.ms") == ("3600000", 3)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headwater.cli", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_partitions_cli_reassign_list_cancel_elect_and_delete_records(
    tmp_path: Path, zk_connect: str
) -> None:
    """``headwater partitions ...`` against the cluster, with Kafka's JSON files and lines."""
    c = _start_three_of_four(tmp_path, zk_connect)
    try:
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        admin.create_topics([KNewTopic("ops", replica_assignments={0: [0, 1]})])
        admin.close()
        wait_for(lambda: c.all_have_leaders("ops", 1), what="leader")
        _produce(c.bootstrap, "ops", 20)
        boot = ["--bootstrap", c.bootstrap]
        plan = tmp_path / "reassign.json"
        plan.write_text(json.dumps(
            {"version": 1, "partitions": [{"topic": "ops", "partition": 0, "replicas": [0, 3]}]}
        ))  # fmt: skip
        moved = _cli("partitions", "reassign", "--reassignment-json-file", str(plan), *boot)
        assert moved.returncode == 0, moved
        assert "Successfully started partition reassignments for ops-0" in moved.stdout
        listed = _cli("partitions", "list-reassignments", *boot)
        assert "ops-0: replicas: 0,3,1. adding: 3. removing: 1." in listed.stdout, listed
        cancelled = _cli(
            "partitions", "reassign", "--reassignment-json-file", str(plan), "--cancel", *boot
        )
        assert cancelled.returncode == 0, cancelled
        assert "Successfully cancelled partition reassignments for ops-0" in cancelled.stdout
        wait_for(
            lambda: (
                "No partition reassignments found."
                in _cli("partitions", "list-reassignments", *boot).stdout
            ),
            what="the move cancelled",
        )
        elect = _cli("partitions", "elect-leaders", "--election-type", "preferred",
                     "--topic", "ops", "--partition", "0", *boot)  # fmt: skip
        assert elect.returncode == 0, elect
        assert "Valid replica already elected for partitions ops-0" in elect.stdout
        trimmed = _cli("partitions", "delete-records", "--topic", "ops", "--partition", "0",
                       "--offset", "5", *boot)  # fmt: skip
        assert trimmed.returncode == 0, trimmed
        assert "partition: ops-0\tlow_watermark: 5" in trimmed.stdout.splitlines()
        bad = _cli("partitions", "reassign", "--reassignment-json-file", str(tmp_path), *boot)
        assert bad.returncode == 1 and bad.stderr.startswith("error: ")
    finally:
        c.stop()
