"""Corrupt batches with a valid CRC are refused, and real consumers keep reading past them."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from headwater.protocol.apis import ApiKey
from headwater.protocol.produce_codec import (
    ProducePartitionData,
    ProduceRequestData,
    ProduceTopicData,
    decode_produce_response,
    encode_produce_request,
)
from headwater.records.batch import HEADER_SIZE, HEADER_STRUCT, LOG_OVERHEAD, write_batch_crc
from headwater.records.compression import Compression
from headwater.records.record import RecordBatchBuilder
from tests.integration.broker_process import BrokerProcess
from tests.integration.wire import WireClient

CORRUPT_MESSAGE = 2
INVALID_RECORD = 87
INVALID_TOPIC_EXCEPTION = 17


def _batch(values: list[bytes], codec: Compression = Compression.NONE) -> bytes:
    b = RecordBatchBuilder(codec)
    now = int(time.time() * 1000)
    for v in values:
        b.append(now, None, v)
    return b.build()


def _with_count(raw: bytes, count: int) -> bytes:
    """The same batch claiming ``count`` records, with a CRC that still holds."""
    out = bytearray(raw)
    fields = list(HEADER_STRUCT.unpack_from(out, 0))
    fields[6] = count - 1  # last offset delta
    fields[12] = count
    HEADER_STRUCT.pack_into(out, 0, *fields)
    write_batch_crc(out, 0, len(out))
    return bytes(out)


def _with_body(raw: bytes, body: bytes) -> bytes:
    out = bytearray(raw[:HEADER_SIZE] + body)
    struct.pack_into(">i", out, 8, HEADER_SIZE - LOG_OVERHEAD + len(body))
    write_batch_crc(out, 0, len(out))
    return bytes(out)


def _produce(client: WireClient, topic: str, payload: bytes, version: int = 9) -> tuple[int, list]:
    partition = ProducePartitionData(0, memoryview(payload))
    topics = [ProduceTopicData(topic, [partition])]
    req = ProduceRequestData(acks=-1, timeout_ms=5000, topics=topics)
    body = client.request(ApiKey.PRODUCE, version, encode_produce_request(req, version))
    part = decode_produce_response(body, 0, version).topics[0].partitions[0]
    return part.error_code, part.record_errors


#: What a Produce to a topic still being auto-created may answer (a client retries these).
RETRIABLE = {3, 5, 6, 7}  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER, TIMED_OUT


def _produce_first(client: WireClient, topic: str, payload: bytes) -> int:
    """The first Produce to a topic it auto-creates, retried as a client would: the
    broker waits up to 5 s for the new partition's leader, which a loaded machine
    can exceed (one CI run answered an error and wrote nothing)."""
    deadline = time.monotonic() + 60
    while True:
        code = _produce(client, topic, payload)[0]
        if code not in RETRIABLE or time.monotonic() > deadline:
            return code
        time.sleep(0.2)  # retry backoff


BAD_CASES = {
    "count 5 over 1 record": (_with_count(_batch([b"x"]), 5), INVALID_RECORD),
    "count 1 over 3 records": (_with_count(_batch([b"a", b"b", b"c"]), 1), INVALID_RECORD),
    "garbage gzip": (_with_body(_batch([b"x"], Compression.GZIP), b"\x1f\x8b" + b"junk" * 9), 2),
    "garbage zstd": (_with_body(_batch([b"x"], Compression.ZSTD), b"(\xb5/\xfd" + b"junk" * 9), 2),
    "garbage snappy": (_with_body(_batch([b"x"], Compression.SNAPPY), b"\xff" * 40), 2),
    "garbage lz4": (_with_body(_batch([b"x"], Compression.LZ4), b"\x04\x22\x4d\x18" + b"j" * 9), 2),
    "lz4 count 1 over 3": (_with_count(_batch([b"a", b"b", b"c"], Compression.LZ4), 1), 87),
}


def test_bad_batches_are_refused_and_consumers_read_past_them(broker: BrokerProcess) -> None:
    topic = "hostile"
    client = WireClient(broker.bootstrap)
    try:
        assert _produce_first(client, topic, _batch([b"good-0", b"good-1"])) == 0
        for name, (payload, code) in BAD_CASES.items():
            error, record_errors = _produce(client, topic, payload)
            assert error == code, name
            if code == INVALID_RECORD:
                assert record_errors, f"{name}: Produce v8+ names the bad record"
        assert _produce(client, topic, _batch([b"good-2"], Compression.LZ4))[0] == 0
        assert _produce(client, topic, _batch([b"good-3"], Compression.GZIP))[0] == 0
    finally:
        client.close()
    expected = [b"good-0", b"good-1", b"good-2", b"good-3"]

    rd = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "g",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    rd.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 20
    while len(got) < len(expected) and time.monotonic() < deadline:
        msg = rd.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
    rd.close()
    assert got == list(enumerate(expected))

    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    tp = KTopicPartition(topic, 0)
    kc.assign([tp])
    kc.seek(tp, 0)
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < len(expected) and time.monotonic() < deadline:
        for records in kc.poll(500).values():
            values += [r.value for r in records]
    kc.close()
    assert values == expected
    assert any(
        "rejected produce to hostile-0" in line and "wire-test" in line for line in broker.lines
    ), "rejections are logged with the client id"


@pytest.mark.parametrize("name", ["a b", "bang!", "x" * 250, ".", ".."])
def test_illegal_topic_names_get_invalid_topic_exception(broker: BrokerProcess, name: str) -> None:
    client = WireClient(broker.bootstrap)
    try:
        error, _ = _produce(client, name, _batch([b"v"]))
        assert error == INVALID_TOPIC_EXCEPTION
    finally:
        client.close()


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD, Compression.LZ4])
def test_a_decompression_bomb_is_corrupt_message_and_the_partition_goes_on(
    broker_factory: Callable[..., BrokerProcess], codec: Compression
) -> None:
    """1 MiB of room for a batch that claims 32 MiB: refused with CORRUPT_MESSAGE."""
    broker = broker_factory("headwater.log.message.max.decompressed.bytes=1048576")
    bomb = _batch([bytes(32 << 20)], codec)
    assert len(bomb) < 1 << 20  # it passes message.max.bytes on the wire
    client = WireClient(broker.bootstrap)
    try:
        assert _produce_first(client, "bombed", _batch([b"before"], codec)) == 0
        assert _produce(client, "bombed", bomb)[0] == CORRUPT_MESSAGE
        assert _produce(client, "bombed", _batch([b"after"], codec))[0] == 0
    finally:
        client.close()
    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    tp = KTopicPartition("bombed", 0)
    kc.assign([tp])
    kc.seek(tp, 0)
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < 2 and time.monotonic() < deadline:
        for records in kc.poll(500).values():
            values += [r.value for r in records]
    kc.close()
    assert values == [b"before", b"after"]
