"""The log side of transactions over the wire, without a transaction coordinator.

A producer id comes from InitProducerId (idempotent, no transactional id);
transactional batches are built by hand and produced raw; COMMIT/ABORT
markers are written with WriteTxnMarkers, as a coordinator would. Real
consumers then read: read_committed (confluent-kafka) sees exactly the
committed records and stops at the last stable offset while a transaction
is open; read_uncommitted (confluent-kafka, kafka-python) sees every data
record and no control record. The open transaction and the LSO survive a
clean restart and a ``kill -9``.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_types import AbortedTransaction, FetchRequestData, PartitionFetch
from headwater.protocol.messages import build_request, decode_response, encode_request
from headwater.protocol.produce_codec import (
    ProducePartitionData,
    ProduceRequestData,
    ProduceTopicData,
    decode_produce_response,
    encode_produce_request,
)
from headwater.records.record import RecordBatchBuilder
from tests.integration.broker_process import BrokerProcess
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.wire import WireClient

TOPIC = "txn-log"
TXN_ID = "txn-log-test"  # Kafka wants one on produce requests with transactional batches
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def _kio(client: WireClient, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
    body = client.request(api, version, encode_request(build_request(api, version, data)))
    return decode_response(api, version, body)


def _init_producer_id(client: WireClient) -> tuple[int, int]:
    resp = _kio(
        client,
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout_ms": 60000},
    )
    assert resp.error_code == 0
    return int(resp.producer_id), int(resp.producer_epoch)


class RawProducer:
    """An idempotent producer id that writes hand-built (transactional) batches."""

    def __init__(self, client: WireClient, topic: str = TOPIC) -> None:
        self.client = client
        self.topic = topic
        self.producer_id, self.epoch = _init_producer_id(client)
        self.seq = 0

    def send(
        self, values: list[bytes], *, transactional: bool = True, txn_id: str | None = TXN_ID
    ) -> int:
        builder = RecordBatchBuilder(
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=transactional,
        )
        now = int(time.time() * 1000)
        for v in values:
            builder.append(now, None, v)
        code, _ = _produce(self.client, builder.build(), txn_id, self.topic)
        if code == 0:
            self.seq += len(values)
        return code

    def marker(self, commit: bool, coordinator_epoch: int = 0) -> int:
        resp = _kio(
            self.client,
            ApiKey.WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": self.producer_id,
                        "producer_epoch": self.epoch,
                        "transaction_result": commit,
                        "topics": [{"name": self.topic, "partition_indexes": [0]}],
                        "coordinator_epoch": coordinator_epoch,
                    }
                ]
            },
        )
        (result,) = resp.markers
        assert result.producer_id == self.producer_id
        (topic,) = result.topics
        (partition,) = topic.partitions
        return int(partition.error_code)


def _produce(
    client: WireClient, payload: bytes, txn_id: str | None, topic: str = TOPIC
) -> tuple[int, int]:
    version = 9
    partition = ProducePartitionData(0, memoryview(payload))
    req = ProduceRequestData(
        transactional_id=txn_id,
        acks=-1,
        timeout_ms=5000,
        topics=[ProduceTopicData(topic, [partition])],
    )
    body = client.request(ApiKey.PRODUCE, version, encode_produce_request(req, version))
    part = decode_produce_response(body, 0, version).topics[0].partitions[0]
    return part.error_code, part.base_offset


def _plain(client: WireClient, value: bytes, topic: str = TOPIC) -> None:
    builder = RecordBatchBuilder()
    builder.append(int(time.time() * 1000), None, value)
    assert _produce(client, builder.build(), None, topic)[0] == 0


def _fetch_committed(
    client: WireClient, offset: int = 0, topic: str = TOPIC
) -> tuple[int, int, list[Any]]:
    """(high watermark, last stable offset, aborted transactions) of a read_committed fetch."""
    resp = client.fetch(
        FetchRequestData(
            version=12,
            max_wait_ms=0,
            isolation_level=1,
            partitions=[PartitionFetch(uuid.UUID(int=0), topic, 0, offset)],
        )
    )
    (part,) = resp.partitions
    assert part.error_code == 0
    return part.high_watermark, part.last_stable_offset, list(part.aborted_transactions or [])


def _confluent_values(
    bootstrap: str, isolation: str, expected: int, wait_s: float = 10, topic: str = TOPIC
) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and len(values) < expected:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            values.append(msg.value())
        # then make sure nothing more arrives
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            msg = consumer.poll(0.3)
            if msg is not None and not msg.error():
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def _kafka_python_values(bootstrap: str, expected: int) -> list:
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
        isolation_level="read_uncommitted",
    )
    try:
        values = [m.value for m in consumer]
    finally:
        consumer.close()
    assert len(values) >= expected
    return values


def _create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(10)


def test_committed_and_aborted_transactions_seen_by_real_consumers(broker: BrokerProcess) -> None:
    _create_topic(broker.bootstrap)
    client = WireClient(broker.bootstrap)
    p = RawProducer(client)
    _plain(client, b"p0")  # 0
    assert p.send([b"a1", b"a2"]) == 0  # 1-2
    assert _fetch_committed(client)[:2] == (3, 1)
    # The transaction is open: read_committed stops at the LSO, read_uncommitted does not.
    assert _confluent_values(broker.bootstrap, "read_committed", 1, wait_s=4) == [b"p0"]
    assert p.marker(commit=True) == 0  # 3
    assert _fetch_committed(client)[:2] == (4, 4)
    assert p.send([b"b1"]) == 0  # 4
    assert p.marker(commit=False) == 0  # 5
    _plain(client, b"p1")  # 6
    assert p.send([b"c1"]) == 0  # 7
    assert p.marker(commit=True) == 0  # 8
    hw, lso, aborted = _fetch_committed(client)
    assert (hw, lso) == (9, 9)
    assert aborted == [AbortedTransaction(p.producer_id, 4)]

    committed = _confluent_values(broker.bootstrap, "read_committed", 5)
    assert committed == [b"p0", b"a1", b"a2", b"p1", b"c1"]
    everything = [b"p0", b"a1", b"a2", b"b1", b"p1", b"c1"]
    assert _confluent_values(broker.bootstrap, "read_uncommitted", 6) == everything
    assert _kafka_python_values(broker.bootstrap, 6) == everything
    client.close()


def test_bad_transactional_input_gets_kafkas_errors(broker: BrokerProcess) -> None:
    _create_topic(broker.bootstrap)
    client = WireClient(broker.bootstrap)
    p = RawProducer(client)
    # transactional batches without a transactional id on the request
    assert p.send([b"x"], txn_id=None) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert p.send([b"x"]) == 0
    # a plain batch from the producer whose transaction is open
    assert p.send([b"y"], transactional=False) == 48  # INVALID_TXN_STATE
    assert p.marker(commit=True, coordinator_epoch=3) == 0
    assert p.send([b"z"]) == 0
    assert p.marker(commit=True, coordinator_epoch=2) == 52  # TRANSACTION_COORDINATOR_FENCED
    p.epoch -= 1
    assert p.marker(commit=True, coordinator_epoch=3) == 47  # INVALID_PRODUCER_EPOCH
    p.epoch += 1
    resp = _kio(
        client,
        ApiKey.WRITE_TXN_MARKERS,
        1,
        {
            "markers": [
                {
                    "producer_id": p.producer_id,
                    "producer_epoch": p.epoch,
                    "transaction_result": True,
                    "topics": [{"name": "no-such-topic", "partition_indexes": [0]}],
                    "coordinator_epoch": 3,
                }
            ]
        },
    )
    assert resp.markers[0].topics[0].partitions[0].error_code == 3
    client.close()


def test_an_open_transaction_and_its_lso_survive_restart_and_kill_9(
    broker: BrokerProcess,
) -> None:
    _create_topic(broker.bootstrap)
    client = WireClient(broker.bootstrap)
    p = RawProducer(client)
    _plain(client, b"p0")  # 0
    assert p.send([b"t1"]) == 0  # 1
    _plain(client, b"p1")  # 2
    assert _fetch_committed(client)[:2] == (3, 1)
    client.close()

    broker.restart()  # clean: the producer snapshot is loaded
    client = WireClient(broker.bootstrap)
    assert _fetch_committed(client)[:2] == (3, 1)
    client.close()

    broker.kill()  # kill -9: recovery replays the log from the last snapshot
    broker.start()
    client = p.client = WireClient(broker.bootstrap)
    assert _fetch_committed(client)[:2] == (3, 1)
    assert _confluent_values(broker.bootstrap, "read_committed", 1, wait_s=4) == [b"p0"]
    assert p.send([b"t2"]) == 0  # 3: the same transaction, sequences continue
    assert p.marker(commit=False) == 0  # 4
    _plain(client, b"p2")  # 5
    hw, lso, aborted = _fetch_committed(client)
    assert (hw, lso) == (6, 6)
    assert aborted == [AbortedTransaction(p.producer_id, 1)]
    client.close()

    broker.kill()
    broker.start()
    client = WireClient(broker.bootstrap)
    assert _fetch_committed(client) == (6, 6, [AbortedTransaction(p.producer_id, 1)])
    client.close()
    assert _confluent_values(broker.bootstrap, "read_committed", 3) == [b"p0", b"p1", b"p2"]


def test_a_consumer_session_sees_the_lso_move_when_a_transaction_commits(
    broker: BrokerProcess,
) -> None:
    """KIP-227: an incremental fetch session treats a new LSO as news (kafka-python)."""
    _create_topic(broker.bootstrap)
    client = WireClient(broker.bootstrap)
    p = RawProducer(client)
    _plain(client, b"p0")
    assert p.send([b"a1", b"a2"]) == 0
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=broker.bootstrap,
        group_id=f"g-{uuid.uuid4()}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=200,
    )
    try:
        seen: list[bytes] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not seen:
            for records in consumer.poll(500).values():
                seen.extend(r.value for r in records)
        for _ in range(4):  # the same session keeps fetching at the LSO
            for records in consumer.poll(300).values():
                seen.extend(r.value for r in records)
        assert seen == [b"p0"]
        assert p.marker(commit=True) == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(seen) < 3:
            for records in consumer.poll(500).values():
                seen.extend(r.value for r in records)
        assert seen == [b"p0", b"a1", b"a2"]
    finally:
        consumer.close()
        client.close()


@pytest.mark.cluster
def test_markers_replicate_and_a_new_leader_keeps_the_open_transaction(
    tmp_path: Path, zk_connect: str
) -> None:
    topic = "txn-replicated"
    cluster = Cluster(tmp_path, zk_connect).start()
    try:
        cluster.create_topic(topic, partitions=1, replication=3, **{"min.insync.replicas": "2"})
        leader = cluster.leader(topic)
        client = WireClient(cluster.brokers[leader].bootstrap)
        p = RawProducer(client, topic)
        builder = RecordBatchBuilder()
        builder.append(int(time.time() * 1000), None, b"p0")
        p0 = builder.build()
        # The leader may learn of its leadership a moment after the metadata says so.
        wait_for(lambda: _produce(client, p0, None, topic)[0] == 0, what="the leader")  # 0
        assert p.send([b"a1"]) == 0  # 1
        assert p.marker(commit=True) == 0  # 2: returns once on the ISR
        assert p.send([b"b1"]) == 0  # 3
        assert p.marker(commit=False) == 0  # 4
        assert p.send([b"c1"]) == 0  # 5: left open
        assert _fetch_committed(client, topic=topic)[1] == 5
        client.close()

        cluster.kill(leader)
        wait_for(lambda: cluster.leader(topic) not in (leader, -1), timeout=60, what="new leader")
        new_leader = cluster.leader(topic)
        client = p.client = WireClient(cluster.brokers[new_leader].bootstrap)

        def settled() -> tuple[int, int, list[Any]] | None:
            found = _fetch_committed(client, topic=topic)
            return found if found[0] == 6 else None

        _, lso, aborted = wait_for(settled, timeout=30, what="the new leader's high watermark")
        assert lso == 5  # the follower knew the open transaction
        assert aborted == [AbortedTransaction(p.producer_id, 3)]
        assert p.marker(commit=True) == 0  # 6
        wait_for(lambda: _fetch_committed(client, topic=topic)[1] == 7, what="the LSO to move")
        values = _confluent_values(cluster.bootstrap, "read_committed", 3, topic=topic)
        assert values == [b"p0", b"a1", b"c1"]
        client.close()
    finally:
        cluster.stop()
