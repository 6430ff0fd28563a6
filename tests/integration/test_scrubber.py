"""Bit rot in a closed segment (issue 31 item 4), on a real broker and a real file: one
byte of a closed segment is flipped on disk while the broker is stopped; after the
restart the scrubber finds the batch by its CRC-32C, ``headwater health``, the metric
and a log line name it, and a confluent-kafka consumer gets CORRUPT_MESSAGE (librdkafka's
INVALID_MSG, 2) at that offset, with ``check.crcs`` false and true: never the bad
bytes, and never silently stuck (the application sees the error on every poll round).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.records import iter_batch_headers
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.cluster_process import wait_for

FAST_SCRUB = "headwater.log.scrub.bytes.per.second=100000000"


def health(bootstrap: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "health", "--json", "--bootstrap", bootstrap],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + " ", name + "{"))
    )


def read_until_error(
    bootstrap: str, topic: str, check_crcs: bool, timeout: float = 60
) -> tuple[list[bytes], list[KafkaError]]:
    """Values read from the start, and the errors the application saw, until an error
    has been seen three times (it keeps coming: the consumer is told, not stuck)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"r-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "check.crcs": check_crcs,
            "fetch.error.backoff.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    errors: list[KafkaError] = []
    deadline = time.monotonic() + timeout
    try:
        while len(errors) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(msg.error())
            elif msg.value() is not None:
                values.append(msg.value())  # type: ignore[arg-type]
    finally:
        consumer.close()
    return values, errors


def test_rot_in_a_closed_segment_at_rf1_is_reported_and_never_served(tmp_path: Path) -> None:
    metrics_port = free_port()
    broker = BrokerProcess(
        tmp_path / "data",
        overrides=[FAST_SCRUB],
        args=["--metrics-listen", f"127.0.0.1:{metrics_port}"],
    ).start(timeout=60)
    everything = [b"b%03d-%d" % (batch, i) for batch in range(30) for i in range(10)]
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = NewTopic("rot", 1, 1, config={"segment.bytes": "1024"})
        admin.create_topics([topic], request_timeout=30)["rot"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for batch in range(30):
            for i in range(10):
                producer.produce("rot", b"b%03d-%d" % (batch, i), partition=0)
            assert producer.flush(30) == 0  # one batch per flush
        broker.stop()
        segments = sorted((tmp_path / "data" / "rot-0").glob("*.log"))
        assert len(segments) >= 3
        closed = segments[1]
        data = bytearray(closed.read_bytes())
        headers = list(iter_batch_headers(data))
        bad = headers[len(headers) // 2]
        data[bad.position + bad.size - 1] ^= 0xFF  # a record byte: only the CRC tells
        closed.write_bytes(bytes(data))
        broker.start(timeout=60)
        report = wait_for(
            lambda: (h := health(broker.bootstrap))["corrupt_partitions"] and h,
            timeout=90,
            what="health to name the corrupt range",
        )
        assert report["corrupt_partitions"] == [f"0:rot-0:{bad.base_offset}-{bad.last_offset}"]
        assert report["healthy"] is False
        assert metric(metrics_port, "headwater_log_corrupt_batches") == 1
        assert any("scrubber: rot-0" in line for line in broker.lines)
        before = everything[: bad.base_offset]
        bad_values = set(everything[bad.base_offset : bad.last_offset + 1])
        for check_crcs in (False, True):
            values, errors = read_until_error(broker.bootstrap, "rot", check_crcs)
            assert values == before, (check_crcs, len(values), len(before))
            assert not bad_values & set(values)
            assert errors and all(e.code() == KafkaError.INVALID_MSG for e in errors), errors
    finally:
        broker.stop()
