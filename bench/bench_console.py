"""How long each console page takes to render with 10,000 partitions (issue 32).

One ``headwater serve`` process (a cluster of one, its own /metrics) on a
fresh data dir holds ``--topics`` topics of ``--partitions-per-topic``
partitions plus one ``big`` topic (together ``--total`` partitions, 10,000
by default) with a little data in each of a few partitions, and one
consumer group. A console (``ConsoleServer``, in this process, as
``headwater console`` runs it) serves them; each page is fetched over HTTP
``--rounds`` times after a first, unmeasured fetch, and the median and the
worst wall time of the server's answer are printed, with the size of the
HTML. Live fragments (what htmx polls) are timed too.

    .venv/bin/python bench/bench_console.py [--total 10000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from headwater.client.admin import AdminClient
from headwater.client.producer import Producer
from headwater.console.server import ConsoleServer, ConsoleSettings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.integration.broker_process import free_port


def start_broker(data: Path, port: int, metrics: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(data), "--metrics-listen", f"127.0.0.1:{metrics}",
         "-o", "offsets.topic.num.partitions=8", "-o", "transaction.state.log.num.partitions=4"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == f"listening on 127.0.0.1:{port}":
            return proc
    raise SystemExit(f"broker did not start (exit {proc.wait()})")


def fetch(url: str) -> tuple[float, int, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
        status = response.status
    return time.perf_counter() - started, status, len(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=10_000, help="partitions in all")
    ap.add_argument("--topics", type=int, default=50, help="topics besides 'big'")
    ap.add_argument("--partitions-per-topic", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    big = args.total - args.topics * args.partitions_per_topic
    assert big > 0, "--total must exceed --topics x --partitions-per-topic"

    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        port, metrics = free_port(), free_port()
        broker = start_broker(Path(tmp) / "data", port, metrics)
        bootstrap = f"127.0.0.1:{port}"
        try:
            started = time.perf_counter()
            with AdminClient(bootstrap, request_timeout_ms=600_000) as admin:
                admin.create_topics([("big", big, None, 1)])
                for i in range(args.topics):
                    admin.create_topics([(f"topic-{i:03d}", args.partitions_per_topic, None, 1)])
            print(f"created {args.total} partitions in {time.perf_counter() - started:.1f} s")
            with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
                for p in range(20):
                    for n in range(50):
                        producer.send("big", f'{{"n": {n}, "p": {p}}}'.encode(), b"k", partition=p)
                producer.flush()
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-readers",
                                 "enable.auto.commit": False})  # fmt: skip
            consumer.assign([KafkaTopicPartition("big", p, 10) for p in range(20)])
            consumer.commit(
                offsets=[KafkaTopicPartition("big", p, 10) for p in range(20)],
                asynchronous=False,
            )
            consumer.close()

            server = ConsoleServer(
                ConsoleSettings(bootstrap=bootstrap, listen="127.0.0.1:0",
                                metrics={0: f"127.0.0.1:{metrics}"})
            ).start()  # fmt: skip
            base = server.url.rstrip("/")
            pages = [
                ("overview", "/"),
                ("overview fragment (live)", "/fragment/overview"),
                ("topics, page 1", "/topics"),
                ("topics, internal, page 2", "/topics?internal=1&page=2"),
                ("topics search", "/topics?q=topic-04"),
                (f"topic 'big' ({big} partitions), page 1", "/topics/big"),
                ("topic 'big', page 30 fragment (live)", "/topics/big/fragment?page=30"),
                ("messages, latest 20 of all of 'big'", "/topics/big/messages"),
                ("messages, partition 3 from offset 10",
                 "/topics/big/messages?partition=3&mode=offset&value=10"),
                ("messages, filter '\"n\": 7,' (json)",
                 "/topics/big/messages?search=%22n%22%3A+7%2C&format=json&limit=50"),
                ("consumer groups", "/groups"),
                ("group", "/groups/bench-readers"),
                ("security", "/security"),
                ("operations", "/operations"),
                ("metrics", "/metrics"),
            ]  # fmt: skip
            print(f"\n{args.total} partitions on one broker, {args.rounds} rounds after a warm-up")
            print(f"{'page':52} {'median':>8} {'worst':>8} {'first':>8} {'HTML':>9}")
            try:
                for name, path in pages:
                    first, status, size = fetch(base + path)
                    assert status == 200, (path, status)
                    times = [fetch(base + path)[0] for _ in range(args.rounds)]
                    print(
                        f"{name:52} {statistics.median(times) * 1000:6.0f} ms "
                        f"{max(times) * 1000:6.0f} ms {first * 1000:6.0f} ms {size / 1024:7.0f} KiB"
                    )
            finally:
                server.stop()
        finally:
            broker.terminate()
            broker.wait(60)


if __name__ == "__main__":
    main()
