"""KIP-392 on a real cluster: consumers in racks a, b, c fetch from the replica in their rack.

Three brokers in racks a, b and c on a real ZooKeeper, with Kafka's
``RackAwareReplicaSelector``. Each topic here is placed explicitly with its
leader on broker 0 (rack a), so a consumer with ``client.rack=b`` must read
from broker 1's follower copy: the brokers' per-topic bytes-out metrics show
who served it. Clients are confluent-kafka (librdkafka) and raw Fetch requests.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from headwater.cluster.zookeeper_server import ZooKeeperServer
from headwater.protocol.apis import ApiKey
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.fetch_codec import decode_fetch_response, encode_fetch_request
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchRequestData,
    PartitionData,
    PartitionFetch,
)
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.wire import WireClient
from tests.integration.zookeeper import fresh_chroot_connect

pytestmark = pytest.mark.cluster

SELECTOR = "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesoutpersec_total"
#: Long enough that a paused follower keeps the high watermark back while a test looks.
SLOW_ISR = ("zookeeper.session.timeout.ms=12000", "replica.lag.time.max.ms=12000")


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("kip392"),
        fresh_chroot_connect(zookeeper),
        overrides=[SELECTOR, *SLOW_ISR],
        metrics=True,
        racks=["a", "b", "c"],
    ).start()
    try:
        yield c
    finally:
        c.stop()


def _topic(cluster: Cluster, replicas: list[int] | None = None) -> str:
    """A one-partition topic led by broker 0 (rack a), all three brokers in its ISR."""
    name = f"kip392-{uuid.uuid4().hex[:8]}"
    placement = [replicas or [0, 1, 2]]
    admin = cluster.admin()  # alive until the future completes
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replica_assignment=placement)])
    futures[name].result(30)
    wait_for(lambda: cluster.isr(name) == {0, 1, 2}, what=f"full ISR of {name}")
    return name


def _produce(cluster: Cluster, topic: str, values: range, **config: object) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, **config})  # fmt: skip
    for i in values:
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(60) == 0


def _consumer(cluster: Cluster, rack: str, **config: object) -> Consumer:
    return Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
        "client.rack": rack, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000, **config,
    })  # fmt: skip


def _read(consumer: Consumer, count: int, timeout: float = 60.0) -> list[int]:
    """Values of the next ``count`` records, in order (fails on a consumer error)."""
    out: list[int] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            assert err.code() == KafkaError._PARTITION_EOF, err
            continue
        out.append(int(msg.value()))
    assert len(out) == count, f"read {len(out)} of {count} records"
    return out


def _bytes_out(cluster: Cluster, broker: int, topic: str) -> float:
    return cluster.metric(broker, f'{BYTES_OUT}{{topic="{topic}"}}')


def test_a_consumer_in_rack_b_reads_every_record_from_the_rack_b_replica(cluster: Cluster) -> None:
    topic = _topic(cluster)
    _produce(cluster, topic, range(2000))
    consumer = _consumer(cluster, "b")
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert _read(consumer, 2000) == list(range(2000))
    finally:
        consumer.close()
    assert _bytes_out(cluster, 1, topic) > 2000  # the follower in rack b served them
    assert _bytes_out(cluster, 0, topic) == 0  # the leader served no records
    assert _bytes_out(cluster, 2, topic) == 0


def test_a_consumer_in_the_leaders_rack_reads_from_the_leader(cluster: Cluster) -> None:
    topic = _topic(cluster)
    _produce(cluster, topic, range(300))
    consumer = _consumer(cluster, "a")
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert _read(consumer, 300) == list(range(300))
    finally:
        consumer.close()
    assert _bytes_out(cluster, 0, topic) > 0
    assert _bytes_out(cluster, 1, topic) == _bytes_out(cluster, 2, topic) == 0


def _raw_fetch(
    cluster: Cluster,
    broker: int,
    topic: str,
    offset: int,
    *,
    rack: str = "",
    isolation_level: int = 0,
    version: int = 12,
) -> PartitionData:
    req = FetchRequestData(
        version=version,
        max_wait_ms=0,
        isolation_level=isolation_level,
        partitions=[PartitionFetch(ZERO_UUID, topic, 0, offset, partition_max_bytes=1 << 20)],
        rack_id=rack,
    )
    client = WireClient(cluster.brokers[broker].bootstrap)
    try:
        body = client.request(ApiKey.FETCH, version, encode_fetch_request(req, version))
    finally:
        client.close()
    (data,) = decode_fetch_response(body, 0, version).partitions
    return data


def test_the_leader_answers_a_consumer_with_a_rack_with_its_preferred_replica(
    cluster: Cluster,
) -> None:
    topic = _topic(cluster)
    _produce(cluster, topic, range(10))
    # The follower must have heard the high watermark before it is preferred.
    wait_for(
        lambda: _raw_fetch(cluster, 0, topic, 0, rack="b").preferred_read_replica == 1,
        what="broker 1 preferred for rack b",
    )
    data = _raw_fetch(cluster, 0, topic, 0, rack="c")
    assert (data.preferred_read_replica, data.records_size) in ((2, 0), (-1, data.records_size))
    assert _raw_fetch(cluster, 0, topic, 0, rack="a").preferred_read_replica == -1
    assert _raw_fetch(cluster, 0, topic, 0).preferred_read_replica == -1
    # Fetch v10 has no client metadata: served by the leader only.
    old = _raw_fetch(cluster, 1, topic, 0, version=10)
    assert old.error_code == ErrorCode.not_leader_or_follower
    served = wait_for(
        lambda: (d := _raw_fetch(cluster, 1, topic, 0, rack="b")).high_watermark == 10 and d,
        what="the follower's high watermark at 10",
    )
    assert served.error_code == 0 and _last_offset(served) == 9


def test_a_lagging_follower_serves_no_uncommitted_record(cluster: Cluster) -> None:
    """Broker 2 stops (SIGSTOP) while in the ISR, so the high watermark stays at 10 while
    broker 1 copies 10 more acks=1 records: broker 1 serves consumers the first 10 only,
    and answers OFFSET_NOT_AVAILABLE for an offset it holds but does not know committed."""
    topic = _topic(cluster)
    _produce(cluster, topic, range(10))
    wait_for(lambda: _raw_fetch(cluster, 1, topic, 10).high_watermark == 10, what="HW on b")
    cluster.pause(2)
    try:
        _produce(cluster, topic, range(10, 20), acks=1, **{"enable.idempotence": False})
        # Broker 1 has the records (a follower fetch at log end would show them) ...
        end = wait_for(
            lambda: (
                _raw_fetch(cluster, 1, topic, 11).error_code == ErrorCode.offset_not_available
                or None
            ),
            what="broker 1 holding offsets above its high watermark",
            timeout=8,
        )
        assert end
        # ... but a consumer reading from offset 0 gets no record at or past offset 10.
        data = _raw_fetch(cluster, 1, topic, 0, rack="b")
        assert data.error_code == 0 and data.high_watermark == 10
        assert _last_offset(data) == 9
        assert _raw_fetch(cluster, 1, topic, 20).error_code == ErrorCode.offset_not_available
        assert _raw_fetch(cluster, 1, topic, 10).error_code == 0  # at its HW: a normal wait
        # An offset beyond its log: out of range, with its high watermark (librdkafka then
        # goes back to the leader instead of resetting).
        beyond = _raw_fetch(cluster, 1, topic, 50)
        assert (beyond.error_code, beyond.high_watermark) == (ErrorCode.offset_out_of_range, 10)
    finally:
        cluster.resume(2)
    wait_for(lambda: _raw_fetch(cluster, 1, topic, 20).high_watermark == 20, what="HW 20 on b")


def _last_offset(data: PartitionData) -> int:
    """The last offset in a v2 record set (base offset + last offset delta)."""
    records = bytes(data.records or b"")
    pos = last = -1
    pos = 0
    while pos + 61 <= len(records):
        base = int.from_bytes(records[pos : pos + 8], "big")
        length = int.from_bytes(records[pos + 8 : pos + 12], "big")
        delta = int.from_bytes(records[pos + 23 : pos + 27], "big")
        last = base + delta
        pos += 12 + length
    return last


def test_a_read_committed_consumer_on_a_follower_stops_at_the_last_stable_offset(
    cluster: Cluster,
) -> None:
    topic = _topic(cluster)
    _produce(cluster, topic, range(5))
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})  # fmt: skip
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5, 10):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(30) == 0
    # The follower holds the open transaction's records and the high watermark past them.
    wait_for(lambda: _raw_fetch(cluster, 1, topic, 0).high_watermark >= 10, what="HW on b")
    on_follower = _raw_fetch(cluster, 1, topic, 0, rack="b", isolation_level=1)
    assert on_follower.last_stable_offset == 5
    assert _last_offset(on_follower) == 4
    consumer = _consumer(cluster, "b", **{"isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert _read(consumer, 5) == list(range(5))
        pending = consumer.poll(1.0)  # the open transaction's records must not arrive
        assert pending is None or pending.error() is not None
        producer.commit_transaction(30)
        assert _read(consumer, 5) == list(range(5, 10))
    finally:
        consumer.close()
    assert _bytes_out(cluster, 1, topic) > 0 and _bytes_out(cluster, 0, topic) == 0


def _produce_in_background(
    cluster: Cluster, topic: str, count: int, stop: threading.Event
) -> threading.Thread:
    def run() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 120000})  # fmt: skip
        for i in range(count):
            if stop.is_set():
                break
            producer.produce(topic, value=b"%d" % i)
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(120)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_rack_consumer_reads_every_record_once_through_a_kill_of_its_follower_and_a_leader_change(
    cluster: Cluster,
) -> None:
    """kill -9 of the preferred follower sends the consumer back to the leader; a leader
    change moves it on; every record arrives once, in order."""
    topic = _topic(cluster)
    total = 3000
    stop = threading.Event()
    consumer = _consumer(cluster, "b")
    producing = _produce_in_background(cluster, topic, total, stop)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = _read(consumer, 500)
        assert _bytes_out(cluster, 1, topic) > 0  # it was reading from rack b
        cluster.kill(1)  # the rack-b follower the consumer reads from
        seen += _read(consumer, 1000)
        cluster.restart(1)
        wait_for(lambda: cluster.isr(topic) == {0, 1, 2}, timeout=60, what="broker 1 back")
        cluster.kill(0)  # the leader: broker 1 or 2 takes over
        seen += _read(consumer, 500, timeout=90)
        cluster.restart(0)
        producing.join(180)
        assert not producing.is_alive()
        seen += _read(consumer, total - len(seen), timeout=90)
    finally:
        stop.set()
        consumer.close()
    assert seen == list(range(total))
    wait_for(lambda: cluster.isr(topic) == {0, 1, 2}, timeout=60, what="full ISR at the end")


def test_a_consumer_whose_follower_is_moved_away_goes_back_to_the_leader(
    cluster: Cluster,
) -> None:
    """A reassignment removes the rack-b replica: the consumer reading from it falls
    back to the leader and reads on, every record once, in order."""
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient

    topic = _topic(cluster)
    _produce(cluster, topic, range(500))
    consumer = _consumer(cluster, "b")
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = _read(consumer, 500)
        assert _bytes_out(cluster, 1, topic) > 0 and _bytes_out(cluster, 0, topic) == 0
        assert kadmin.alter_partition_reassignments({KTopicPartition(topic, 0): [0, 2]}) == {
            KTopicPartition(topic, 0): None
        }
        wait_for(
            lambda: set(cluster.partitions(topic)[0].replicas) == {0, 2}, what="replicas {0, 2}"
        )
        _produce(cluster, topic, range(500, 1000))
        seen += _read(consumer, 500)
    finally:
        kadmin.close()
        consumer.close()
    assert seen == list(range(1000))
    assert _bytes_out(cluster, 0, topic) > 0  # the leader serves it now


def test_describe_configs_shows_the_rack_and_the_selector(cluster: Cluster) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = cluster.admin()
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["broker.rack"].value == "b"
    assert configs["broker.rack"].is_read_only
    assert configs["replica.selector.class"].value == SELECTOR.split("=", 1)[1]
    # Where its /metrics is: how the console finds every broker's endpoint.
    assert configs["headwater.metrics.listen"].value == f"127.0.0.1:{cluster.metrics_ports[1]}"
