"""Operating a broker: the data directory lock, DeleteRecords, DescribeProducers,
DescribeCluster per listener, CREATE authorization for existing topics."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build, decode_response, encode_request, request_class
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.wire import WireClient


def test_second_broker_on_a_live_data_dir_refuses_in_one_line(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    port = free_port()
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "serve", "--data-dir", str(broker.data_dir),
         "--listen", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert lines[-1].startswith("error: data directory"), lines
    assert "in use by another process" in lines[-1]
    assert not any("Traceback" in line for line in lines)
    assert not any(f"listening on 127.0.0.1:{port}" in line for line in lines)
    # The first broker is untouched and a restart after it stops works.
    broker.restart()


def _produce(bootstrap: str, topic: str, count: int, **conf: object) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def test_delete_records_moves_the_log_start_and_refuses_past_the_high_watermark(
    broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("trim", 1, 1)])["trim"].result(10)
    _produce(broker.bootstrap, "trim", 100)
    done = admin.delete_records([TopicPartition("trim", 0, 40)])
    result = done[TopicPartition("trim", 0)].result(10)  # type: ignore[index]
    assert result.low_watermark == 40
    earliest = admin.list_offsets({TopicPartition("trim", 0): OffsetSpec.earliest()})
    assert earliest[TopicPartition("trim", 0)].result(10).offset == 40
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.assign([TopicPartition("trim", 0, 0)])
    first = None
    deadline = time.monotonic() + 20
    while first is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            first = msg.offset()
    consumer.close()
    assert first == 40
    beyond = admin.delete_records([TopicPartition("trim", 0, 101)])
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        beyond[TopicPartition("trim", 0)].result(10)  # type: ignore[index]
    # -1: everything below the high watermark; survives a restart.
    all_done = admin.delete_records([TopicPartition("trim", 0, -1)])
    assert all_done[TopicPartition("trim", 0)].result(10).low_watermark == 100  # type: ignore[index]
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    earliest = admin.list_offsets({TopicPartition("trim", 0): OffsetSpec.earliest()})
    assert earliest[TopicPartition("trim", 0)].result(10).offset == 100


def test_describe_producers_lists_idempotent_and_transactional_producers(
    broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("prods", 1, 1)])["prods"].result(10)
    _produce(broker.bootstrap, "prods", 5, **{"enable.idempotence": True})
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t1"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("prods", value=b"open", partition=0)
    txn.flush(30)
    client = WireClient(broker.bootstrap)
    try:
        body = client.request(
            ApiKey.DESCRIBE_PRODUCERS, 0,
            encode_request(build(request_class(ApiKey.DESCRIBE_PRODUCERS, 0),
                                 {"topics": [{"name": "prods", "partition_indexes": [0, 7]}]})),
        )  # fmt: skip
    finally:
        client.close()
    resp = decode_response(ApiKey.DESCRIBE_PRODUCERS, 0, body)
    (topic,) = resp.topics
    p0, p7 = topic.partitions
    assert p0.error_code == 0 and p7.error_code.value == 3  # UNKNOWN_TOPIC_OR_PARTITION
    producers = sorted(p0.active_producers, key=lambda s: s.current_txn_start_offset)
    assert len(producers) == 2
    idempotent, transactional = producers
    assert idempotent.last_sequence == 4 and idempotent.current_txn_start_offset == -1
    assert transactional.current_txn_start_offset == 5
    assert transactional.last_timestamp > 0 and transactional.producer_epoch >= 0
    txn.abort_transaction(30)


def test_describe_cluster_answers_with_the_listener_the_request_came_in_on(
    tmp_path: Path,
) -> None:
    main, other = free_port(), free_port()
    b = BrokerProcess(tmp_path / "two", port=main, overrides=[
        f"listeners=PLAINTEXT://127.0.0.1:{main},EXTERNAL://127.0.0.1:{other}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
    ]).start()  # fmt: skip
    try:
        for port in (main, other):
            client = WireClient(f"127.0.0.1:{port}")
            try:
                req = build(request_class(ApiKey.DESCRIBE_CLUSTER, 0), {})
                body = client.request(ApiKey.DESCRIBE_CLUSTER, 0, encode_request(req))
            finally:
                client.close()
            resp = decode_response(ApiKey.DESCRIBE_CLUSTER, 0, body)
            assert [(b.host, b.port) for b in resp.brokers] == [("127.0.0.1", port)]
    finally:
        b.stop()


def test_listen_with_listeners_serves_both(tmp_path: Path) -> None:
    plain, extra = free_port(), free_port()
    cmd_listen = [sys.executable, "-m", "headwater.cli", "serve", "--data-dir",
                  str(tmp_path / "both"), "--listen", f"127.0.0.1:{plain}",
                  "--override", f"listeners=EXTERNAL://127.0.0.1:{extra}",
                  "--override", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,"
                  "EXTERNAL:PLAINTEXT"]  # fmt: skip
    proc = subprocess.Popen(cmd_listen, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if f"listening on 127.0.0.1:{extra}" in line:
                break
        assert any(f"listening on 127.0.0.1:{plain}" in s for s in seen), seen
        for port in (plain, extra):
            md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
            assert [x.port for x in md.brokers.values()] == [port]
    finally:
        proc.terminate()
        proc.wait(30)
    conflict = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "serve", "--data-dir", str(tmp_path / "c"),
         "--listen", f"127.0.0.1:{plain}", "--override", f"listeners=PLAINTEXT://127.0.0.1:{extra}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert conflict.returncode != 0
    assert conflict.stderr.strip().splitlines()[-1].startswith("error: --listen")
