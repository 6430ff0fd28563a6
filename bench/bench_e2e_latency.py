"""End-to-end latency on a single broker: from a producer's send to a consumer's receipt.

Why this shape: what a user of one broker feels is the time a record takes
from ``produce()`` to a waiting consumer, which crosses the produce path, the
append, the high-watermark move and the wake-up of a long-polling fetch. The
machine is small and noisy, so brokers from several checkouts (``--tree
NAME=PATH``, each run with that checkout first on PYTHONPATH) run at once and
rounds alternate between them (the order flips every round), so drift hits
them all alike.

Per round and broker: a fresh confluent-kafka consumer (``fetch.wait.max.ms``
500, librdkafka's default; ``fetch.queue.backoff.ms=0``) assigned at the
partition's end, a few untimed records until it is reading, then an
idempotent ``acks=all``, ``linger.ms=0`` producer sends 1 KB records paced at
``--rate`` for ``--seconds``, each carrying its send time
(``time.perf_counter_ns``, one process). The consumer thread takes the time
each record comes out of ``poll()``. p50/p90/p99/max of send to receipt, and
of send to delivery report (the acks=all latency), per round; medians over
rounds and the pooled distribution per broker.

``--peer kafka`` and ``--peer tansu`` add Apache Kafka 4.x (``kafka_peer.py``,
one KRaft combined-mode node) and tansu to the brokers that take turns, with
the same clients and pacing.

Run: ``.venv/bin/python bench/bench_e2e_latency.py --tree before=/tmp/before
--tree after=/tmp/after`` (defaults: 6 rounds of 10 s per broker, ~3
minutes). Prints a table and writes bench/results/e2e_latency.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from brokers import BrokerUnderTest, Headwater, ScratchDir, Tansu, machine_info
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka_peer import Kafka, peer_info

RESULTS = Path(__file__).parent / "results" / "e2e_latency.json"
TOPIC = "e2e"
#: Sequence number (-1 for warm-up records) and send time in ns, ahead of the padding.
HEADER = struct.Struct(">qq")
WARMUP_RECORDS = 20


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def distribution(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(values, 0.50),
        "p90_ms": percentile(values, 0.90),
        "p99_ms": percentile(values, 0.99),
        "max_ms": max(values) if values else float("nan"),
        "samples": len(values),
    }


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)], operation_timeout=10).values():
        future.result(timeout=30)


class Receiver:
    """A consumer on its own thread that times each record as ``poll()`` hands it over."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"e2e-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 500,
                # librdkafka otherwise pauses fetching for 1 s whenever its
                # queue passes a threshold (shared/notes/real-clients.md).
                "fetch.queue.backoff.ms": 0,
            }
        )
        _low, high = self.consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
        self.consumer.assign([TopicPartition(TOPIC, 0, high)])
        self.latencies_ms: list[float] = []
        self.warmups = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.1)
            if msg is None:
                continue
            now = time.perf_counter_ns()
            if msg.error() is not None:
                self.errors.append(str(msg.error()))
                continue
            seq, sent = HEADER.unpack_from(msg.value() or b"")
            if seq < 0:
                self.warmups += 1
            else:
                self.latencies_ms.append((now - sent) / 1e6)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def wait_for(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def one_round(broker: BrokerUnderTest, args: argparse.Namespace) -> dict[str, Any]:
    """Send ``rate * seconds`` paced records; time each to its receipt and to its ack."""
    receiver = Receiver(broker.bootstrap)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
        }
    )
    padding = b"x" * (args.size - HEADER.size)
    try:
        # The producer-id handshake and the consumer's first fetches stay out of the clock.
        for _ in range(WARMUP_RECORDS):
            producer.produce(TOPIC, HEADER.pack(-1, 0) + padding, partition=0)
        producer.flush(30)
        if not wait_for(lambda: receiver.warmups >= WARMUP_RECORDS, 30):
            raise RuntimeError(f"consumer of {broker.bootstrap} got no warm-up records")
        acks_ms: list[float] = []

        def delivered(sent: int) -> Any:
            def callback(err: KafkaError | None, _msg: object) -> None:
                if err is None:
                    acks_ms.append((time.perf_counter_ns() - sent) / 1e6)

            return callback

        count = int(args.rate * args.seconds)
        interval = 1 / args.rate
        cpu_before = broker.cpu_seconds()
        next_at = time.perf_counter()
        for seq in range(count):
            # Wait in poll() (whole milliseconds; 0 would spin a core away from the brokers).
            while (wait := next_at - time.perf_counter()) > 0:
                producer.poll(max(wait, 0.001))
            next_at += interval
            sent = time.perf_counter_ns()
            producer.produce(
                TOPIC, HEADER.pack(seq, sent) + padding, partition=0, on_delivery=delivered(sent)
            )
            producer.poll(0)
        producer.flush(60)
        received = wait_for(lambda: len(receiver.latencies_ms) >= count, 30)
        broker_cpu = broker.cpu_seconds() - cpu_before
    finally:
        receiver.close()
    if receiver.errors or not received:
        raise RuntimeError(
            f"{broker.bootstrap}: received {len(receiver.latencies_ms)}/{count}, "
            f"errors {receiver.errors[:3]}"
        )
    return {
        "e2e": distribution(receiver.latencies_ms),
        "ack": distribution(acks_ms),
        "broker_cpu_s": broker_cpu,
        "e2e_samples_ms": receiver.latencies_ms,
    }


def parse_trees(values: list[str] | None) -> dict[str, Path]:
    """``NAME=PATH`` pairs: the checkouts whose brokers run side by side (default: this one)."""
    if not values:
        return {"this": Path(__file__).resolve().parent.parent}
    trees: dict[str, Path] = {}
    for value in values:
        name, _, path = value.partition("=")
        if not path:
            raise SystemExit(f"--tree wants NAME=PATH, got {value!r}")
        trees[name] = Path(path).resolve()
    return trees


def run(args: argparse.Namespace) -> dict[str, Any]:
    trees = parse_trees(args.tree)
    result: dict[str, Any] = {
        "machine": machine_info(),
        "config": {
            "record_size": args.size,
            "rate_per_s": args.rate,
            "seconds_per_round": args.seconds,
            "rounds": args.rounds,
            "warmup_seconds": args.warmup_seconds,
            "producer": "confluent-kafka, acks=all, enable.idempotence=true, linger.ms=0",
            "consumer": "confluent-kafka, fetch.wait.max.ms=500, fetch.queue.backoff.ms=0, "
            "explicit assignment at the end offset",
            "trees": {name: str(path) for name, path in trees.items()},
        },
    }
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for peer in args.peer:
        rounds[peer] = []
    if "kafka" in args.peer:
        result["config"]["kafka"] = peer_info()
    if "tansu" in args.peer:
        result["config"]["tansu"] = "0.6.0, --storage-engine memory://tansu/"
    with contextlib.ExitStack() as stack:
        brokers: dict[str, BrokerUnderTest] = {}
        for name, path in trees.items():
            data = stack.enter_context(ScratchDir(f"hw-bench-e2e-{name}-"))
            brokers[name] = stack.enter_context(Headwater(data, source_tree=path))
        for peer in args.peer:
            if peer == "kafka":
                data = stack.enter_context(ScratchDir("hw-bench-e2e-kafka-"))
                brokers[peer] = stack.enter_context(Kafka(data))
            else:
                brokers[peer] = stack.enter_context(Tansu())
        for broker in brokers.values():
            create_topic(broker.bootstrap)
        if args.warmup_seconds > 0:
            # Untimed: a JVM broker compiles its hot paths during its first seconds of traffic.
            warm = argparse.Namespace(**{**vars(args), "seconds": args.warmup_seconds})
            for name, broker in brokers.items():
                one_round(broker, warm)
                print(f"warm-up {name}: {args.warmup_seconds:.0f} s", flush=True)
        for n in range(args.rounds):
            order = list(brokers.items())
            if n % 2:
                order.reverse()
            for name, broker in order:
                load = os.getloadavg()[0]
                r = one_round(broker, args)
                r["load"] = load
                rounds[name].append(r)
                e, a = r["e2e"], r["ack"]
                print(
                    f"round {n + 1} {name:<8} e2e p50 {e['p50_ms']:6.2f} p99 {e['p99_ms']:7.2f} "
                    f"max {e['max_ms']:7.2f} ms | ack p50 {a['p50_ms']:6.2f} "
                    f"p99 {a['p99_ms']:7.2f} ms | broker {r['broker_cpu_s']:.2f} CPU-s "
                    f"(load {load:.1f})",
                    flush=True,
                )
    summary: dict[str, Any] = {}
    for name, rs in rounds.items():
        pooled = [x for r in rs for x in r.pop("e2e_samples_ms")]
        summary[name] = {
            "median_of_rounds": {
                kind: {
                    k: statistics.median(r[kind][k] for r in rs)
                    for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")
                }
                for kind in ("e2e", "ack")
            },
            "e2e_pooled": distribution(pooled),
            "broker_cpu_s_median": statistics.median(r["broker_cpu_s"] for r in rs),
            "rounds": rs,
        }
    result["results"] = summary
    return result


def print_report(result: dict[str, Any]) -> None:
    head = (
        f"{'tree':<8} {'e2e p50':>8} {'p90':>7} {'p99':>7} {'max':>7} "
        f"{'ack p50':>8} {'p99':>7} {'pooled p99':>11} {'CPU-s':>6}"
    )
    print("\nmedians of rounds, ms\n" + head + "\n" + "-" * len(head))
    for name, s in result["results"].items():
        e, a = s["median_of_rounds"]["e2e"], s["median_of_rounds"]["ack"]
        print(
            f"{name:<8} {e['p50_ms']:8.2f} {e['p90_ms']:7.2f} {e['p99_ms']:7.2f} "
            f"{e['max_ms']:7.2f} {a['p50_ms']:8.2f} {a['p99_ms']:7.2f} "
            f"{s['e2e_pooled']['p99_ms']:11.2f} {s['broker_cpu_s_median']:6.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tree",
        action="append",
        metavar="NAME=PATH",
        help="a checkout whose broker to run (its directory first on PYTHONPATH); repeat "
        "(default: this checkout)",
    )
    parser.add_argument(
        "--peer",
        action="append",
        choices=["kafka", "tansu"],
        default=[],
        help="also run this broker, in turn with the others (kafka: Apache Kafka 4.x, fetched "
        "by mvn on first use)",
    )
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=0.0,
        help="an untimed paced round of this length per broker before the timed rounds",
    )
    parser.add_argument("--rounds", type=int, default=6, help="rounds per broker")
    parser.add_argument("--rate", type=float, default=1000.0, help="records per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="per round")
    parser.add_argument("--size", type=int, default=1024, help="record size in bytes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = run(args)
    print_report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
