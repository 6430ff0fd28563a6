"""Soak: good clients keep working while hostile and careless ones hammer the broker (issue 12).

One broker; a good producer (kafka-python, acks=all) sends numbered records
for the whole run and times each acknowledgement. The first fifth of the
run is a baseline with only the good producer; then bad clients join:

- fuzzers: random bytes, and frames with a valid length but random content;
- pipeliners: 200 Metadata requests, then a reset without reading;
- idlers: connections that never send (closed by ``connections.max.idle.ms``);
- slowloris senders: a request one byte at a time (closed by the receive timeout);
- corrupt producers: batches with a valid CRC and a lying record count.

Sampled every 2 s: the broker's RSS and open descriptors. At the end every
acknowledged record is read back with a consumer. Reported: RSS drift after
warm-up, p99 acknowledgement latency with against without the bad clients,
and how many acknowledged records were lost (must be 0).

Run: ``.venv/bin/python bench/bench_soak.py [--minutes 30]``; CI runs a
3-minute version (tests/integration/test_soak.py). Writes bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextlib

from brokers import Headwater, ScratchDir
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from headwater.protocol.apis import ApiKey
from headwater.protocol.produce_codec import (
    ProducePartitionData,
    ProduceRequestData,
    ProduceTopicData,
    encode_produce_request,
)
from headwater.records.batch import HEADER_STRUCT, write_batch_crc
from headwater.records.record import build_batch

RESULTS = Path(__file__).parent / "results" / "soak.json"
TOPIC = "soak"
PARTITIONS = 4
OVERRIDES = [
    "connections.max.idle.ms=3000",
    "headwater.request.receive.timeout.ms=2000",
    "max.connections.per.ip=400",
    f"num.partitions={PARTITIONS}",
]


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory in MB; ``field="RssAnon"`` leaves out file-backed pages
    (mapped libraries and files), i.e. what the broker itself allocated."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _frame(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation, 4) + b"evil"
    if version >= 9 and api_key == ApiKey.PRODUCE:
        head += b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + body


def _lying_batch() -> bytes:
    raw = bytearray(build_batch([(int(time.time() * 1000), None, b"v")] * 3))
    fields = list(HEADER_STRUCT.unpack_from(raw, 0))
    fields[6], fields[12] = 0, 1  # says 1 record, holds 3
    HEADER_STRUCT.pack_into(raw, 0, *fields)
    write_batch_crc(raw, 0, len(raw))
    return bytes(raw)


class BadClients:
    """Threads that misbehave in the ways issue 12 lists, until stopped."""

    def __init__(self, port: int, seed: int = 12) -> None:
        self.port = port
        self.stop = threading.Event()
        self.random = random.Random(seed)
        self.counts: dict[str, int] = {}
        self.threads = [
            threading.Thread(target=self._loop, args=(name, fn), daemon=True)
            for name, fn in [
                ("fuzz", self.fuzz),
                ("pipeline", self.pipeline),
                ("idle", self.idle),
                ("slowloris", self.slowloris),
                ("corrupt", self.corrupt),
            ]
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def _connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def _loop(self, name: str, fn: Any) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError):
                fn()
            self.counts[name] = self.counts.get(name, 0) + 1

    def fuzz(self) -> None:
        with self._connect() as s:
            r = self.random
            if r.random() < 0.5:
                s.sendall(os.urandom(r.randint(1, 300)))
            else:
                body = os.urandom(r.randint(0, 200))
                head = struct.pack(">hhi", r.randint(0, 70), r.randint(0, 20), 1)
                s.sendall(struct.pack(">i", len(head) + len(body)) + head + body)
            time.sleep(0.05)

    def pipeline(self) -> None:
        s = self._connect()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        name = TOPIC.encode()
        body = struct.pack(">ih", 1, len(name)) + name
        s.sendall(b"".join(_frame(ApiKey.METADATA, 1, i, body) for i in range(200)))
        time.sleep(0.5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()

    def idle(self) -> None:
        socks = [self._connect() for _ in range(20)]
        self.stop.wait(5)
        for s in socks:
            s.close()

    def slowloris(self) -> None:
        with self._connect() as s:
            frame = _frame(ApiKey.API_VERSIONS, 0, 1, b"")
            for byte in frame:
                if self.stop.wait(0.5):
                    return
                s.sendall(bytes([byte]))

    def corrupt(self) -> None:
        lying = _lying_batch()
        with self._connect() as s:
            req = ProduceRequestData(
                acks=1,
                timeout_ms=5000,
                topics=[ProduceTopicData(TOPIC, [ProducePartitionData(0, memoryview(lying))])],
            )
            s.sendall(_frame(ApiKey.PRODUCE, 9, 1, encode_produce_request(req, 9)))
            s.recv(4096)
            time.sleep(0.2)


def run_soak(minutes: float, data_dir: Path) -> dict[str, Any]:
    broker = Headwater(data_dir, OVERRIDES).start(timeout=60)
    try:
        return _run(broker, minutes)
    except BaseException:
        # The broker's side of a failure (did it exit, and with what last words?):
        # pytest shows this only for a failed test.
        code = broker.proc.poll() if broker.proc is not None else None
        print(f"soak failed; broker exit code {code}; its last lines:", file=sys.stderr)
        print("\n".join(broker.lines[-80:]), file=sys.stderr)
        raise
    finally:
        broker.stop()


def _run(broker: Headwater, minutes: float) -> dict[str, Any]:
    total = minutes * 60
    baseline_s = total / 5
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
    acked: set[bytes] = set()
    latencies: dict[str, list[float]] = {"baseline": [], "attack": []}
    phase = ["baseline"]
    samples: list[tuple[float, float, int]] = []
    anon: list[float] = []  # RssAnon at each sample
    start = time.monotonic()
    bad = BadClients(broker.port)
    seq = 0
    next_sample = start
    while (now := time.monotonic()) - start < total:
        if phase[0] == "baseline" and now - start >= baseline_s:
            phase[0] = "attack"
            bad.start()
        value = b"record-%09d" % seq
        sent_at = time.perf_counter()
        future = producer.send(TOPIC, value, partition=seq % PARTITIONS)
        bucket = latencies[phase[0]]

        def done(_meta: Any, value: bytes = value, sent_at: float = sent_at,
                 bucket: list[float] = bucket) -> None:  # fmt: skip
            acked.add(value)
            bucket.append((time.perf_counter() - sent_at) * 1000)

        future.add_callback(done)
        seq += 1
        if now >= next_sample:
            samples.append(
                (now - start, rss_mb(broker.pid), len(os.listdir(f"/proc/{broker.pid}/fd")))
            )
            anon.append(rss_mb(broker.pid, "RssAnon"))
            next_sample = now + 2
        time.sleep(0.002)
    producer.flush(60)
    producer.close()
    bad.join()
    time.sleep(4)  # idle and slowloris connections time out
    samples.append(
        (time.monotonic() - start, rss_mb(broker.pid), len(os.listdir(f"/proc/{broker.pid}/fd")))
    )
    read = read_back(broker.bootstrap, len(acked))
    lost = len(acked - read)
    warm_from = baseline_s + min(60.0, total / 5)
    warm_anon = [a for (t, _, _), a in zip(samples, anon, strict=False) if t >= warm_from]
    warm = [rss for t, rss, _ in samples if t >= warm_from]
    if not warm:
        warm = [rss for _, rss, _ in samples[-3:]]
    p99 = {k: _p99(v) for k, v in latencies.items()}
    return {
        "minutes": minutes,
        "records_sent": seq,
        "records_acked": len(acked),
        "acked_records_lost": lost,
        "rss_after_warmup_min_mb": min(warm),
        "rss_after_warmup_max_mb": max(warm),
        "rss_drift": max(warm) / min(warm) - 1,
        "rss_anon_after_warmup_min_mb": min(warm_anon, default=float("nan")),
        "rss_anon_after_warmup_max_mb": max(warm_anon, default=float("nan")),
        "fds_end": samples[-1][2],
        "fds_max": max(f for _, _, f in samples),
        "p99_ack_ms": p99,
        "p99_ratio": p99["attack"] / p99["baseline"] if p99["baseline"] else float("nan"),
        "bad_client_rounds": dict(bad.counts),
        "broker_alive": broker.proc is not None and broker.proc.poll() is None,
        "samples": samples,
    }


def _sample(broker: Headwater, at: float) -> tuple[float, float, int]:
    return at, rss_mb(broker.pid), len(os.listdir(f"/proc/{broker.pid}/fd"))


def _p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[int(len(ordered) * 0.99)]


def read_back(bootstrap: str, expected: int, timeout_s: float = 120) -> set[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        for records in consumer.poll(1000).values():
            got.update(r.value for r in records)
    consumer.close()
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args()
    with ScratchDir("soak") as data:
        result = run_soak(args.minutes, data)
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    results: Path = args.results
    results.parent.mkdir(exist_ok=True)
    result["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results.write_text(json.dumps(result, indent=2))
    print(f"wrote {results}")


if __name__ == "__main__":
    main()
