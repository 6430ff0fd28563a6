"""A three-broker Headwater cluster on a real ZooKeeper, driven by real clients.

Every test starts its own brokers (on a fresh ZooKeeper chroot of the shared
server) and checks what a user of Kafka relies on: acknowledged records
survive the loss of a leader, exactly once and in order; ISRs shrink and grow
as followers stall and return; ``acks=all`` refuses to pretend when too few
replicas are in sync; groups outlive their coordinator; a diverged follower
truncates; the controller is replaced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.cluster_process import Cluster, wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect).start()
    try:
        yield c
    finally:
        c.stop()


def read_all(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> list[bytes]:
    """Every record of ``topic`` (read_committed, as librdkafka reads by default)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            values.append(msg.value())
        # Anything past the expected count would be a duplicate: look a little longer.
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            msg = consumer.poll(0.3)
            if msg is not None and not msg.error():
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_metadata_lists_every_broker_and_each_partitions_replicas(cluster: Cluster) -> None:
    cluster.create_topic("replicated", partitions=6, replication=3)
    assert cluster.live_broker_ids() == {0, 1, 2}
    parts = cluster.partitions("replicated")
    assert sorted(parts) == list(range(6))
    leaders = {p.leader for p in parts.values()}
    assert leaders == {0, 1, 2}  # round-robin assignment spreads leadership
    for p in parts.values():
        assert sorted(p.replicas) == [0, 1, 2]
        assert set(p.isrs) == {0, 1, 2}
        assert p.replicas[0] == p.leader  # the preferred replica leads
    assert cluster.controller_id() in {0, 1, 2}


def test_idempotent_acks_all_from_both_clients_reaches_every_replica(cluster: Cluster) -> None:
    cluster.create_topic("both", partitions=3, replication=3, **{"min.insync.replicas": "2"})
    confluent = Producer(
        {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all"}
    )
    for i in range(1000):
        confluent.produce("both", value=f"c{i}".encode(), partition=i % 3)
    assert confluent.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(1000):
        kp.send("both", value=f"k{i}".encode(), partition=i % 3)
    kp.flush(30)
    kp.close()
    values = read_all(cluster.bootstrap, "both", 2000)
    assert sorted(values) == sorted(
        [f"c{i}".encode() for i in range(1000)] + [f"k{i}".encode() for i in range(1000)]
    )
    # Every replica holds the records: take two brokers away in turn and read again.
    for p in cluster.partitions("both").values():
        assert set(p.isrs) == {0, 1, 2}


def produce_numbered(
    bootstrap: str, topic: str, stop: threading.Event, acked: list[int], errors: list[str]
) -> None:
    """Produce 0, 1, 2, ... (idempotent, acks=all) until ``stop``; record what was acked."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
        }
    )

    def delivered(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append(int(msg.value()))  # type: ignore[attr-defined]

    i = 0
    while not stop.is_set():
        try:
            producer.produce(topic, value=str(i).encode(), partition=0, on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
        if i % 50 == 0:
            time.sleep(0.01)
    producer.flush(60)


def test_kill_9_of_the_leader_loses_no_acknowledged_record(cluster: Cluster) -> None:
    cluster.create_topic("failover", partitions=1, replication=3, **{"min.insync.replicas": "2"})
    acked: list[int] = []
    errors: list[str] = []
    stop = threading.Event()
    writer = threading.Thread(
        target=produce_numbered, args=(cluster.bootstrap, "failover", stop, acked, errors)
    )
    writer.start()
    try:
        wait_for(lambda: len(acked) > 2000, what="records before the kill")
        leader = cluster.leader("failover")
        cluster.kill(leader)
        before = len(acked)
        wait_for(lambda: len(acked) > before + 2000, timeout=60, what="records after failover")
        new_leader = cluster.leader("failover")
        assert new_leader not in (leader, -1)
    finally:
        stop.set()
        writer.join(90)
    assert not errors, errors[:5]
    values = [int(v) for v in read_all(cluster.bootstrap, "failover", len(acked))]
    # Exactly once, in order: the idempotent producer's retries were de-duplicated
    # by a leader that rebuilt the producer state from its replicated log.
    assert values == sorted(set(values))
    assert set(acked) <= set(values)
    # The killed broker comes back, catches up and rejoins the ISR.
    cluster.restart(leader)
    wait_for(lambda: leader in cluster.isr("failover"), timeout=60, what="rejoin of the ISR")


def test_a_stalled_follower_leaves_the_isr_and_rejoins_when_it_resumes(cluster: Cluster) -> None:
    cluster.create_topic("stall", partitions=1, replication=3, **{"min.insync.replicas": "2"})
    leader = cluster.leader("stall")
    follower = next(b for b in (0, 1, 2) if b != leader)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    # Bootstrap before the pause: librdkafka asks one broker for the topic's
    # metadata, and if that is the stopped one it waits out socket.timeout.ms
    # (60 s) with every record unassigned, which is the client's rule, not ours.
    producer.produce("stall", value=b"-1")
    assert producer.flush(30) == 0
    cluster.pause(follower)
    try:
        for i in range(200):
            producer.produce("stall", value=str(i).encode())
            producer.poll(0)
            time.sleep(0.02)
        wait_for(lambda: follower not in cluster.isr("stall"), timeout=30, what="ISR shrink")
        # Writes go on with two replicas in sync.
        for i in range(200, 400):
            producer.produce("stall", value=str(i).encode())
        assert producer.flush(30) == 0
    finally:
        cluster.resume(follower)
    wait_for(lambda: follower in cluster.isr("stall"), timeout=60, what="ISR expand")
    assert len(read_all(cluster.bootstrap, "stall", 401)) == 401


def test_acks_all_needs_min_insync_replicas_but_acks_1_does_not(cluster: Cluster) -> None:
    cluster.create_topic("strict", partitions=1, replication=3, **{"min.insync.replicas": "2"})
    leader = cluster.leader("strict")
    others = [b for b in (0, 1, 2) if b != leader]
    for b in others:
        cluster.kill(b)
    wait_for(lambda: cluster.isr("strict") == {leader}, timeout=30, what="ISR of one")
    # NOT_ENOUGH_REPLICAS is retriable: without retries the producer reports it as is.
    strict = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "retries": 0,
            "message.timeout.ms": 10_000,
        }
    )
    failures: list[KafkaError] = []
    strict.produce(
        "strict", value=b"x", on_delivery=lambda err, msg: failures.append(err) if err else None
    )
    strict.flush(10)
    assert failures and failures[0].code() == KafkaError.NOT_ENOUGH_REPLICAS
    relaxed = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})
    relaxed.produce("strict", value=b"y")
    assert relaxed.flush(10) == 0
    consumer = KafkaConsumer(
        "strict",
        bootstrap_servers=cluster.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    assert [m.value for m in consumer] == [b"y"]
    consumer.close()


def test_a_group_survives_the_kill_9_of_its_coordinator(cluster: Cluster) -> None:
    cluster.create_topic("work", partitions=3, replication=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(600):
        producer.produce("work", value=str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0

    def consume(count: int) -> list[int]:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "survivors",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(["work"])
        got: list[int] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append(int(msg.value()))
            if len(got) % 50 == 0:
                consumer.commit(asynchronous=False)
        if len(got) % 50:
            consumer.commit(asynchronous=False)
        consumer.close()
        return got

    first = consume(300)
    assert len(first) == 300
    coordinator = find_coordinator(cluster, "survivors")
    cluster.kill(coordinator)
    wait_for(
        lambda: find_coordinator(cluster, "survivors") not in (coordinator, -1),
        timeout=60,
        what="a new coordinator",
    )
    second = consume(300)
    assert sorted(first + second) == list(range(600))


def find_coordinator(cluster: Cluster, group: str) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = cluster.admin()
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    future.result(10)  # fails while the coordinator moves
    result = admin.describe_consumer_groups([group])[group].result(10)
    del admin
    return int(result.coordinator.id)


def test_the_controller_is_replaced_after_its_kill_9(cluster: Cluster) -> None:
    cluster.create_topic("after-controller", partitions=3, replication=3)
    controller = cluster.controller_id()
    cluster.kill(controller)
    wait_for(
        lambda: cluster.controller_id() in {0, 1, 2} - {controller},
        timeout=30,
        what="a new controller",
    )
    # The new controller moved leadership off the dead broker.
    wait_for(
        lambda: all(
            p.leader not in (controller, -1)
            for p in cluster.partitions("after-controller").values()
        ),
        timeout=30,
        what="leaders off the dead controller",
    )
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce("after-controller", value=b"still writable")
    assert producer.flush(20) == 0


def test_duplicate_broker_id_refuses_to_start(cluster: Cluster, tmp_path: Path) -> None:
    from tests.integration.broker_process import BrokerProcess

    twin = BrokerProcess(
        tmp_path / "twin", overrides=["broker.id=1", f"zookeeper.connect={cluster.zk_connect}"]
    )
    with pytest.raises(RuntimeError) as excinfo:
        twin.start(timeout=30)
    assert "broker.id 1" in str(excinfo.value)
    assert "already registered" in str(excinfo.value)


def test_errors_of_a_non_leader(cluster: Cluster) -> None:
    """NOT_LEADER_OR_FOLLOWER, and on Produce v10 (KIP-951) the current leader and where
    it listens, so a client moves there without asking for Metadata."""
    cluster.create_topic("where", partitions=1, replication=2)
    parts = cluster.partitions("where")
    leader = parts[0].leader
    outsider = ({0, 1, 2} - set(parts[0].replicas)).pop()
    follower = next(r for r in parts[0].replicas if r != leader)
    leader_port = int(cluster.brokers[leader].bootstrap.rsplit(":", 1)[1])
    for broker_id in (follower, outsider):
        version, response = raw_produce(cluster.brokers[broker_id].bootstrap, "where")
        refused = response.topics[0].partitions[0]
        assert int(refused.error_code) == 6, (broker_id, refused)
        assert version == 10
        assert refused.current_leader is not None and refused.current_leader[0] == leader
        assert refused.current_leader[1] >= 0
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [(leader, leader_port)]


def raw_produce(bootstrap: str, topic: str) -> tuple[int, Any]:
    """(Produce version used, the response) of one record to partition 0 of ``topic``
    sent to ``bootstrap`` whether it leads it or not (clients route by Metadata)."""
    import asyncio

    from headwater.client.connection import BrokerConnection
    from headwater.protocol.produce_codec import ProduceRequestData, ProduceTopicData
    from headwater.records.record import RecordBatchBuilder

    async def go() -> tuple[int, Any]:
        host, port = bootstrap.rsplit(":", 1)
        conn = await BrokerConnection.open(host, int(port))
        try:
            builder = RecordBatchBuilder()
            builder.append(1, None, b"v")
            req = ProduceRequestData(
                acks=1, timeout_ms=5000, topics=[ProduceTopicData(topic, [(0, builder.build())])]
            )
            version = conn.version(0)
            resp = await conn.wait(conn.send_produce(req, version))
            assert resp is not None
            return version, resp
        finally:
            conn.close()

    return asyncio.run(go())


def test_truncation_of_a_diverged_follower(cluster: Cluster) -> None:
    """A leader that wrote records nobody else got comes back as a follower and drops them."""
    cluster.create_topic(
        "diverge", partitions=1, replication=3, **{"unclean.leader.election.enable": "true"}
    )
    old_leader = cluster.leader("diverge")
    followers = [b for b in (0, 1, 2) if b != old_leader]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("diverge", value=f"shared-{i}".encode())
    assert producer.flush(20) == 0
    for b in followers:
        cluster.pause(b)
    try:
        wait_for(lambda: cluster.isr("diverge") == {old_leader}, timeout=30, what="followers out")
        lone = Producer({"bootstrap.servers": cluster.brokers[old_leader].bootstrap, "acks": "1"})
        for i in range(50):
            lone.produce("diverge", value=f"lost-{i}".encode())
        assert lone.flush(20) == 0
    finally:
        cluster.kill(old_leader)
        for b in followers:
            cluster.resume(b)
    wait_for(lambda: cluster.leader("diverge") in followers, timeout=60, what="an unclean election")
    new_leader = cluster.leader("diverge")
    again = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        again.produce("diverge", value=f"new-{i}".encode())
    assert again.flush(30) == 0
    cluster.restart(old_leader)
    wait_for(lambda: old_leader in cluster.isr("diverge"), timeout=60, what="old leader in ISR")
    # Leave only the old leader to serve: its log must now be the new leader's.
    for b in followers:
        cluster.kill(b)
    wait_for(lambda: cluster.leader("diverge") == old_leader, timeout=60, what="old leader back")
    values = read_all(cluster.bootstrap, "diverge", 130)
    assert new_leader in followers
    assert [v for v in values if v.startswith(b"lost-")] == []
    assert values == [f"shared-{i}".encode() for i in range(100)] + [
        f"new-{i}".encode() for i in range(30)
    ]


def test_a_flood_of_consumer_sessions_evicts_no_follower_session(
    tmp_path: Path, zk_connect: str
) -> None:
    """KIP-227's privilege: replica fetchers keep their sessions whatever consumers do."""
    slots = 6
    c = Cluster(
        tmp_path,
        zk_connect,
        overrides=[
            f"max.incremental.fetch.session.cache.slots={slots}",
            "min.incremental.fetch.session.eviction.ms=0",  # the cache evicts as eagerly as it can
        ],
        metrics=True,
    ).start()
    consumers: list[KafkaConsumer] = []
    try:
        c.create_topic("flood", partitions=6, replication=3)
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(600):
            producer.produce("flood", value=str(i).encode(), partition=i % 6)
        assert producer.flush(30) == 0
        name = "headwater_fetch_sessions_followers"
        # Each broker leads partitions that both others follow: one session per fetcher.
        wait_for(lambda: all(c.metric(b, name) == 2 for b in (0, 1, 2)), what="follower sessions")
        parts = [TopicPartition("flood", p) for p in range(6)]
        for _ in range(3 * slots):
            consumer = KafkaConsumer(
                bootstrap_servers=c.bootstrap, auto_offset_reset="earliest", group_id=None
            )
            consumer.assign(parts)
            consumers.append(consumer)
        for consumer in consumers:
            got = 0
            deadline = time.monotonic() + 30
            while got < 600 and time.monotonic() < deadline:
                got += sum(len(v) for v in consumer.poll(500).values())
            assert got == 600
        sessions = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
        for b in (0, 1, 2):
            assert c.metric(b, name) == 2, f"broker {b} lost a follower session"
            # The flood filled every cache: consumers took every slot followers left.
            assert c.metric(b, sessions) == slots
    finally:
        for consumer in consumers:
            consumer.close()
        c.stop()


def test_partitions_added_from_any_broker_get_leaders_and_take_writes(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    cluster.create_topic("grows", partitions=2, replication=2)
    admin = AdminClient({"bootstrap.servers": cluster.brokers[2].bootstrap})
    admin.create_partitions([NewPartitions("grows", 5)], request_timeout=30)["grows"].result(30)
    wait_for(lambda: cluster.all_have_leaders("grows", 5), what="leaders of new partitions")

    def every_broker_knows_five() -> bool:
        # Each broker learns from its own ZooKeeper watch, as Kafka brokers learn
        # from UpdateMetadata: a consumer asking a broker that has not heard yet
        # would be assigned two partitions (and refresh only minutes later).
        for b in cluster.brokers:
            md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics("grows", timeout=5)
            if len(md.topics["grows"].partitions) != 5:
                return False
        return True

    wait_for(every_broker_knows_five, what="five partitions in every broker's metadata")
    for p in cluster.partitions("grows").values():
        assert len(p.replicas) == 2
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for partition in range(5):
        producer.produce("grows", value=f"p{partition}".encode(), partition=partition)
    assert producer.flush(20) == 0
    assert sorted(read_all(cluster.bootstrap, "grows", 5)) == [f"p{i}".encode() for i in range(5)]


def describe_topic_config(bootstrap: str, topic: str, key: str) -> str | None:
    """DescribeConfigs sent to exactly this broker (admin clients pick any broker)."""
    from headwater.protocol.apis import ApiKey
    from headwater.protocol.messages import build_request, decode_response, encode_request
    from tests.integration.wire import WireClient

    request = build_request(
        ApiKey.DESCRIBE_CONFIGS,
        1,
        {
            "resources": [
                {"resource_type": 2, "resource_name": topic, "configuration_keys": [key]}
            ],
            "include_synonyms": False,
        },
    )
    client = WireClient(bootstrap)
    try:
        body = client.request(ApiKey.DESCRIBE_CONFIGS, 1, encode_request(request))
    finally:
        client.close()
    (result,) = decode_response(ApiKey.DESCRIBE_CONFIGS, 1, body).results
    assert result.error_code == 0, result
    values = [str(c.value) for c in result.configs if c.name == key]
    return values[0] if values else None


def test_topic_configs_altered_through_one_broker_apply_on_every_broker(
    cluster: Cluster,
) -> None:
    """IncrementalAlterConfigs writes ZooKeeper's /config/topics; every broker follows."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    cluster.create_topic("configured", partitions=1, replication=3)
    cluster.kill(2)  # misses the change; must pick it up from ZooKeeper when back
    first = cluster.brokers[0].bootstrap
    admin = AdminClient({"bootstrap.servers": first})
    resource = ConfigResource(
        ResourceType.TOPIC,
        "configured",
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(30)
    cluster.restart(2)
    for broker in cluster.brokers:
        wait_for(
            lambda b=broker: (
                describe_topic_config(b.bootstrap, "configured", "retention.ms") == "3600000"
            ),
            timeout=30,
            what=f"retention.ms on {broker.bootstrap}",
        )
