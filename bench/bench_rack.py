"""KIP-392: consumers in three racks, fetching from the leader against the closest replica.

Three brokers in racks a, b and c on a real ZooKeeper; three topics ``t0``,
``t1``, ``t2`` of 2 partitions at replication factor 3, topic ``ti`` led by
broker ``i`` (explicit placement, so each broker's per-topic bytes-out metric
tells who served what). One producer writes 1 KB records at a fixed rate to
all three topics; three confluent-kafka consumers, one per rack with
``client.rack`` set, each read every partition. Measured, with
``replica.selector.class`` off and then on (a fresh cluster each, in
alternating rounds):

* consumer bytes served by the leaders against by followers, from the
  brokers' ``kafka_server_brokertopicmetrics_bytesoutpersec_total{topic}``;
* end-to-end latency (a record's CreateTime to its arrival at a consumer)
  p50 and p99 over every record every consumer read;
* the brokers' CPU seconds.

Expected: with the selector on, the leaders serve about a third of the
consumer bytes (the consumer in their own rack) and followers the rest, at
a latency cost: a follower learns the high watermark from the leader one
follower fetch after the record became committed.

Run: ``.venv/bin/python bench/bench_rack.py [--rounds 2 --seconds 20 --rate 1500]``.
Prints a table, writes bench/results/rack.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench_replication import LocalCluster
from brokers import Headwater, ScratchDir, free_port, machine_info
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

RESULTS = Path(__file__).parent / "results" / "rack.json"
RACKS = ("a", "b", "c")
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesoutpersec_total"
TOPICS = ("t0", "t1", "t2")
PARTITIONS = 2


class RackCluster(LocalCluster):
    """``LocalCluster`` whose broker ``i`` is in rack ``RACKS[i]``."""

    def __enter__(self) -> RackCluster:
        self.zookeeper.start()
        try:
            for broker_id, rack in enumerate(RACKS):
                self._start_one(broker_id, rack)
        except BaseException:
            self.__exit__()  # no broker left running when another fails to start
            raise
        return self

    def _start_one(self, broker_id: int, rack: str) -> None:
        port = free_port()
        broker = Headwater(
            self.root / f"broker-{broker_id}",
            [
                f"broker.id={broker_id}",
                f"broker.rack={rack}",
                f"zookeeper.connect={self.zookeeper.connect_string}/bench",
                f"headwater.metrics.listen=127.0.0.1:{port}",
                f"zookeeper.session.timeout.ms={self.session_timeout_ms}",
                "offsets.topic.num.partitions=4",
                *self.overrides,
            ],
        )
        broker.start(timeout=60)
        self.brokers.append(broker)
        self.metrics_ports.append(port)

    def broker_metric(self, broker_id: int, name: str) -> float:
        port = self.metrics_ports[broker_id]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith((name + " ", name + "{"))
        )


def create_topics(cluster: RackCluster) -> None:
    admin = cluster.admin()
    new = []
    for leader, name in enumerate(TOPICS):
        replicas = [[(leader + k) % 3 for k in range(3)] for _ in range(PARTITIONS)]
        new.append(NewTopic(name, num_partitions=PARTITIONS, replica_assignment=replicas))
    for future in admin.create_topics(new, request_timeout=60).values():
        future.result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = cluster.admin().list_topics(timeout=30).topics
        if all(
            name in md
            and len(md[name].partitions) == PARTITIONS
            and all(len(p.isrs) == 3 for p in md[name].partitions.values())
            for name in TOPICS
        ):
            return
        time.sleep(0.5)
    raise RuntimeError("topics never got full ISRs")


def consume(
    bootstrap: str, rack: str, stop: threading.Event, latencies: list[float], counts: list[int]
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{rack}",
            "client.rack": rack,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(t, p, 0) for t in TOPICS for p in range(PARTITIONS)])
    try:
        while not stop.is_set():
            for msg in consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue
                latencies.append(time.time() * 1000 - msg.timestamp()[1])
                counts[0] += 1
    finally:
        consumer.close()


def produce(bootstrap: str, rate: float, seconds: float) -> int:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,
        }
    )
    value = b"x" * 1000
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            producer.produce(TOPICS[sent % 3], value=value, partition=(sent // 3) % PARTITIONS)
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(60)
    return sent


def one_phase(root: Path, selector: bool, rate: float, seconds: float) -> dict[str, Any]:
    overrides = [
        "replica.fetch.wait.max.ms=500",
        "group.initial.rebalance.delay.ms=0",
        *([f"replica.selector.class={SELECTOR}"] if selector else []),
    ]
    with RackCluster(root, 3, overrides) as cluster:
        create_topics(cluster)
        stop = threading.Event()
        latencies: list[list[float]] = [[] for _ in RACKS]
        counts = [[0] for _ in RACKS]
        consumers = [
            threading.Thread(
                target=consume,
                args=(cluster.bootstrap, rack, stop, latencies[i], counts[i]),
                daemon=True,
            )
            for i, rack in enumerate(RACKS)
        ]
        for t in consumers:
            t.start()
        time.sleep(2)  # consumers connected and fetching before the first record
        cpu0 = cluster.cpu_seconds()
        sent = produce(cluster.bootstrap, rate, seconds)
        deadline = time.monotonic() + 60
        while any(c[0] < sent for c in counts) and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu = cluster.cpu_seconds() - cpu0
        stop.set()
        for t in consumers:
            t.join(30)
        leader_bytes = follower_bytes = 0.0
        per_broker = [0.0, 0.0, 0.0]
        for broker in range(3):
            for leader, topic in enumerate(TOPICS):
                served = cluster.broker_metric(broker, f'{BYTES_OUT}{{topic="{topic}"}}')
                per_broker[broker] += served
                if broker == leader:
                    leader_bytes += served
                else:
                    follower_bytes += served
    every = sorted(x for lat in latencies for x in lat)
    return {
        "selector": selector,
        "records_sent": sent,
        "records_read": [c[0] for c in counts],
        "leader_bytes": leader_bytes,
        "follower_bytes": follower_bytes,
        "leader_share": leader_bytes / max(1.0, leader_bytes + follower_bytes),
        "bytes_out_per_broker": per_broker,
        "e2e_p50_ms": statistics.median(every) if every else float("nan"),
        "e2e_p99_ms": every[int(0.99 * (len(every) - 1))] if every else float("nan"),
        "broker_cpu_s": cpu,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=1500.0, help="records/s (1 KB each)")
    args = parser.parse_args()
    phases: list[dict[str, Any]] = []
    with ScratchDir("bench-rack") as scratch:
        for r in range(args.rounds):
            for selector in (False, True):
                phase = one_phase(
                    scratch / f"r{r}-{int(selector)}", selector, args.rate, args.seconds
                )
                phase["round"] = r
                phases.append(phase)
                print(
                    f"round {r} selector {'on ' if selector else 'off'}: "
                    f"leader share {phase['leader_share']:.1%} "
                    f"(leaders {phase['leader_bytes'] / 1e6:.1f} MB, "
                    f"followers {phase['follower_bytes'] / 1e6:.1f} MB), "
                    f"e2e p50 {phase['e2e_p50_ms']:.1f} ms p99 {phase['e2e_p99_ms']:.1f} ms, "
                    f"broker CPU {phase['broker_cpu_s']:.1f} s, "
                    f"read {phase['records_read']} of {phase['records_sent']}",
                    flush=True,
                )
    summary: dict[str, Any] = {}
    for selector in (False, True):
        mine = [p for p in phases if p["selector"] is selector]
        summary["on" if selector else "off"] = {
            key: statistics.median(p[key] for p in mine)
            for key in (
                "leader_share",
                "leader_bytes",
                "follower_bytes",
                "e2e_p50_ms",
                "e2e_p99_ms",
                "broker_cpu_s",
            )
        }
    print()
    print(f"{'':<22}{'selector off':>14}{'selector on':>14}")
    for key, fmt in (
        ("leader_share", "{:.1%}"),
        ("leader_bytes", "{:.0f}"),
        ("follower_bytes", "{:.0f}"),
        ("e2e_p50_ms", "{:.1f}"),
        ("e2e_p99_ms", "{:.1f}"),
        ("broker_cpu_s", "{:.1f}"),
    ):
        off, on = summary["off"][key], summary["on"][key]
        print(f"{key:<22}{fmt.format(off):>14}{fmt.format(on):>14}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"machine": machine_info(), "args": vars(args), "phases": phases, "summary": summary},
            indent=2,
        )
    )
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
