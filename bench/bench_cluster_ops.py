"""Operating a cluster: restarts with and without controlled shutdown, partition moves.

Why: issue 17 asks that a rolling restart leaves no partition without an ack for
long (Kafka promises "a few milliseconds" of unavailability with controlled
shutdown), that a partition move runs at a known speed which the KIP-73
replication throttle can cap, and that a move does not starve other clients.

Measures, on real broker processes and a real ZooKeeper (ZooKeeper sessions of
3 s, as the cluster tests use):
- rolling SIGTERM restart of 3 brokers under an idempotent acks=all producer
  (6 partitions, replication 3, min.insync.replicas 2): the longest gap between
  two acks of one partition during each broker's stop, controlled shutdown on
  and off, and SIGTERM-to-exit times; failed deliveries must be 0;
- reassignment throughput: one partition of ``--move-mb`` MB moved from brokers
  {0, 1} to {2, 3}, without and with a 5 MB/s leader and follower throttle;
- the produce latency p99 (acks=all, one record at a time) of another client on
  another topic before and during each move.

Run: ``.venv/bin/python bench/bench_cluster_ops.py [--move-mb 40]``.
Prints the figures and writes bench/results/cluster_ops.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.test_cluster_operations import AckClock
from tests.integration.zookeeper import fresh_chroot_connect

RESULTS = Path(__file__).parent / "results" / "cluster_ops.json"
THROTTLE = 5 * 1024 * 1024


def rolling_restart(root: Path, zk: ZooKeeperServer, controlled: bool) -> dict[str, object]:
    c = Cluster(root, fresh_chroot_connect(zk), overrides=[
        f"controlled.shutdown.enable={str(controlled).lower()}"]).start()  # fmt: skip
    try:
        c.create_topic("rolling", partitions=6, replication=3, **{"min.insync.replicas": "2"})
        clock = AckClock(c.bootstrap, "rolling", 6).start()
        gaps, rejoin_gaps, exits = [], [], []
        try:
            for broker_id in range(3):
                wait_for(lambda: all(len(p.isrs) == 3 for p in c.partitions("rolling").values()),
                         timeout=120, what="full ISRs")  # fmt: skip
                time.sleep(1.0)
                clock.reset_gaps()
                started = time.monotonic()
                c.brokers[broker_id].stop(timeout=90)
                exits.append(round(time.monotonic() - started, 2))
                if exits[-1] > 5:  # say what the stop waited for (the watchdog's line)
                    print("\n".join(c.brokers[broker_id].lines[-40:]))
                stopped = time.monotonic()
                try:
                    clock.wait_acked_since(stopped, timeout=120)
                    gaps.append(round(max(clock.longest_gap.values()) * 1000))
                except AssertionError:  # some partition took no write for 2 minutes
                    gaps.append(round((time.monotonic() - stopped) * 1000) + 999_999)
                    print("\n".join(c.brokers[(broker_id + 1) % 3].lines[-60:]))
                clock.reset_gaps()
                c.restart(broker_id)
                wait_for(lambda: all(len(p.isrs) == 3 for p in c.partitions("rolling").values()),
                         timeout=120, what="full ISRs")  # fmt: skip
                rejoin_gaps.append(round(max(clock.longest_gap.values()) * 1000))
        finally:
            clock.stop()
        return {"longest_ack_gap_ms_per_stop": gaps, "longest_ack_gap_ms": max(gaps),
                "longest_ack_gap_ms_per_rejoin": rejoin_gaps,
                "sigterm_to_exit_s": exits, "failed_deliveries": len(clock.errors)}  # fmt: skip
    finally:
        c.stop()


class LatencyProbe:
    """One acks=all record at a time to its own topic; latencies in ms."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.topic = topic
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self.producer.produce(self.topic, b"x" * 100)
            self.producer.flush(30)
            self.samples.append((time.monotonic(), (time.perf_counter() - started) * 1000))
            time.sleep(0.005)

    def start(self) -> LatencyProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def p99(self, start: float, end: float) -> float:
        window = sorted(ms for t, ms in self.samples if start <= t <= end)
        if len(window) < 10:
            return float("nan")
        return round(statistics.quantiles(window, n=100)[98], 1)


def move(root: Path, zk: ZooKeeperServer, mb: int, throttled: bool) -> dict[str, object]:
    rates = [f"{side}.replication.throttled.rate={THROTTLE}" for side in ("leader", "follower")]
    overrides = rates if throttled else []
    c = Cluster(root, fresh_chroot_connect(zk), size=4, overrides=overrides).start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        configs = {"leader.replication.throttled.replicas": "*",
                   "follower.replication.throttled.replicas": "*"} if throttled else {}  # fmt: skip
        admin.create_topics([
            NewTopic("big", replica_assignments={0: [0, 1]}, topic_configs=configs),
            NewTopic("others", replica_assignments={0: [2, 3]},
                     topic_configs={"min.insync.replicas": "2"}),
        ])  # fmt: skip
        wait_for(lambda: c.all_have_leaders("big", 1) and c.all_have_leaders("others", 1))
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 20,
                             "batch.size": 1 << 20, "compression.type": "none"})  # fmt: skip
        value = bytes(range(256)) * 40  # 10 KB
        for _ in range(mb * 100):
            while True:
                try:
                    producer.produce("big", value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush(120)
        probe = LatencyProbe(c.bootstrap, "others").start()
        time.sleep(5.0)
        before = time.monotonic()
        admin.alter_partition_reassignments({KTopicPartition("big", 0): [2, 3]})
        wait_for(lambda: set(c.partitions("big")[0].replicas) == {2, 3}
                 and set(c.partitions("big")[0].isrs) == {2, 3}, timeout=900)  # fmt: skip
        moved_s = time.monotonic() - before
        probe.stop()
        admin.close()
        return {"mb": mb, "seconds": round(moved_s, 2), "mb_per_s": round(mb / moved_s, 1),
                "throttle_bytes_per_s": THROTTLE if throttled else None,
                "other_client_p99_ms_before": probe.p99(before - 5.0, before),
                "other_client_p99_ms_during": probe.p99(before, before + moved_s)}  # fmt: skip
    finally:
        c.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--move-mb", type=int, default=40)
    parser.add_argument("--skip-restarts", action="store_true")
    args = parser.parse_args()
    results: dict[str, object] = {"python": platform.python_version()}
    with tempfile.TemporaryDirectory() as tmp, ZooKeeperServer(Path(tmp) / "zk") as zk:
        root = Path(tmp)
        if not args.skip_restarts:
            for controlled in (True, False):
                key = f"rolling_restart_controlled_{'on' if controlled else 'off'}"
                results[key] = rolling_restart(root / key, zk, controlled)
                print(key, results[key])
        for throttled in (False, True):
            key = f"move_{'throttled' if throttled else 'unthrottled'}"
            results[key] = move(root / key, zk, args.move_mb, throttled)
            print(key, results[key])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
