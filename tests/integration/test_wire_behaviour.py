"""Exact wire behaviour: bad input, ApiVersions quirks, KIP-74 limits, long-poll, crash safety."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_types import FetchRequestData, PartitionFetch
from tests.integration.broker_process import BrokerProcess
from tests.integration.wire import WireClient

OFFSET_OUT_OF_RANGE = 1


def _produce(broker: BrokerProcess, topic: str, values: list[bytes], **kw: object) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, **kw)
    for v in values:
        producer.send(topic, v, partition=0)
    producer.flush()
    producer.close()


def _fetch_req(topic: str, offset: int, **kw: object) -> FetchRequestData:
    defaults: dict = dict(version=11, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20)
    defaults.update(kw)
    return FetchRequestData(
        partitions=[
            PartitionFetch(
                topic_id=__import__("uuid").UUID(int=0),
                topic=topic,
                partition=0,
                fetch_offset=offset,
            )
        ],
        **defaults,
    )


def _assert_serving(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    try:
        body = c.request(ApiKey.API_VERSIONS, 0, b"")
        assert struct.unpack_from(">h", body, 0)[0] == 0
    finally:
        c.close()


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_oversized_frame_closes_only_that_connection(broker: BrokerProcess) -> None:
    c = WireClient(broker.bootstrap)
    c.send_raw(struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 16)
    assert _closed(c.sock)
    _assert_serving(broker)


def test_garbage_and_unknown_api_close_the_connection(broker: BrokerProcess) -> None:
    for payload in (b"\x00\x00\x00\x03abc", struct.pack(">ihhih", 10, 999, 0, 1, -1)):
        c = WireClient(broker.bootstrap)
        c.send_raw(payload)
        assert _closed(c.sock)
    _assert_serving(broker)
    assert any("closing connection" in line for line in broker.lines)


def test_api_versions_unsupported_version_gets_error_35_with_v0_body(
    broker: BrokerProcess,
) -> None:
    c = WireClient(broker.bootstrap)
    try:
        body = c.request(ApiKey.API_VERSIONS, 99, b"")
    finally:
        c.close()
    error, count = struct.unpack_from(">hi", body, 0)
    assert error == 35
    keys = [struct.unpack_from(">hhh", body, 6 + 6 * i) for i in range(count)]
    assert any(k[0] == ApiKey.API_VERSIONS for k in keys)
    # Only implemented APIs are advertised (librdkafka probes whatever is listed).
    assert all(k[0] in {int(a) for a in ApiKey} for k in keys)


def test_fetch_with_tiny_max_bytes_returns_one_whole_batch(broker: BrokerProcess) -> None:
    _produce(broker, "tiny", [b"a" * 3000, b"b" * 3000], linger_ms=0, batch_size=1)
    c = WireClient(broker.bootstrap)
    try:
        resp = c.fetch(_fetch_req("tiny", 0, max_bytes=1))
    finally:
        c.close()
    (part,) = resp.partitions
    assert part.error_code == 0
    records = part.records
    assert isinstance(records, bytes | bytearray | memoryview)
    batch_len = struct.unpack_from(">i", records, 8)[0] + 12
    assert len(records) == batch_len, "exactly the first batch, despite max_bytes=1"


def test_offset_past_the_end_is_out_of_range(broker: BrokerProcess) -> None:
    _produce(broker, "oor", [b"x"] * 5)
    c = WireClient(broker.bootstrap)
    try:
        resp = c.fetch(_fetch_req("oor", 500))
    finally:
        c.close()
    assert resp.partitions[0].error_code == OFFSET_OUT_OF_RANGE
    assert resp.partitions[0].high_watermark == 5


def test_long_poll_wakes_soon_after_a_produce(broker: BrokerProcess) -> None:
    _produce(broker, "poll", [b"first"])
    c = WireClient(broker.bootstrap)
    produced_at: list[float] = []

    def produce_later() -> None:
        time.sleep(1.0)
        produced_at.append(time.monotonic())
        _produce(broker, "poll", [b"second"], acks=1)

    t = threading.Thread(target=produce_later)
    try:
        t.start()
        started = time.monotonic()
        resp = c.fetch(_fetch_req("poll", 1, max_wait_ms=10_000, min_bytes=1))
        answered = time.monotonic()
    finally:
        t.join()
        c.close()
    assert resp.partitions[0].records, "the parked fetch returned the new record"
    assert answered - started < 9.0, "woken by the append, not by max_wait_ms"
    # Generous bound for a noisy 2-core machine; typically a few ms.
    assert answered - produced_at[0] < 1.0


@pytest.mark.parametrize("round_", [1])
def test_acknowledged_records_survive_kill_9(tmp_path: Path, round_: int) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    acked: list[int] = []
    stop = threading.Event()

    def produce() -> None:
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap,
            acks="all",
            max_block_ms=2000,
            request_timeout_ms=2000,
            delivery_timeout_ms=3000,
        )
        i = 0
        try:
            while not stop.is_set():
                fut = producer.send("crash", b"%08d" % i, partition=0)
                try:
                    fut.get(timeout=5)
                except Exception:
                    return
                acked.append(i)
                i += 1
        finally:
            # The broker is killed on purpose; unacknowledged batches expire after
            # delivery_timeout_ms, so close() can finish instead of raising.
            producer.close(timeout=10)

    t = threading.Thread(target=produce)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()
    stop.set()
    t.join()
    assert len(acked) >= 300
    broker.start()
    try:
        c = WireClient(broker.bootstrap)
        values: list[bytes] = []
        offset = 0
        from headwater.records.record import decode_batches

        while True:
            resp = c.fetch(_fetch_req("crash", offset))
            part = resp.partitions[0]
            assert part.error_code == 0
            if not part.records:
                break
            for batch in decode_batches(bytes(part.records)):
                for r in batch.records:
                    assert r.offset == offset, "no gaps or duplicates in offsets"
                    values.append(r.value or b"")
                    offset += 1
        c.close()
        assert len(values) >= len(acked)
        assert values[: len(acked)] == [b"%08d" % i for i in acked]
    finally:
        broker.stop()
