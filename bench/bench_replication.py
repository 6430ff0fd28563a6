"""Replication: what a replicated Headwater cluster costs, and what fetch sessions save it.

Four measurements on one host, each side by side in one run (the machine is
small and noisy, so the figures that matter are ratios):

1. **Produce throughput**, replication factor 1 against 3, confluent-kafka
   with ``acks=all`` and idempotence, on the same three-broker cluster,
   rounds alternating between the two topics.
2. **acks=all latency** p50/p99 at a fixed modest rate, RF 1 against RF 3:
   RF 3 adds a follower fetch round trip and the high-watermark hop.
3. **Idle followers** (KIP-227's headline case): a cluster whose brokers
   follow 10,000 partitions with no writes; fetch bytes per second and broker
   CPU per second with follower fetch sessions on, then off
   (``headwater.replica.fetch.sessions.enable=false``), each on a fresh cluster.
4. **Failover**: a leader's ``kill -9`` to the first successful ``acks=all``
   write on the new leader. Dominated by ``zookeeper.session.timeout.ms``
   (the controller learns of the death when the session expires), which is
   printed with the figure.

5. **Side by side** (``--only compare``, issue 21): per checkout given with
   ``--tree NAME=PATH`` (its brokers run with that PYTHONPATH) a cluster of
   its own, rounds alternating: idempotent ``acks=all`` p50/p99 at 2 MB/s of
   1 KB records with ``linger.ms=0``, the leader's and a follower's CPU per
   GB (user and system apart) on one RF 3 partition, then full-speed produce
   with the brokers' and the client's CPU per GB, RF 1 against RF 3 of every
   checkout in alternating turns. Topics are fresh each round and the page
   cache is settled before each timed phase (``brokers.settle_page_cache``:
   this VM's fresh memory is slow). Prints the targets with the figures;
   the CPU and throughput ratios are medians of per-round ratios.
   ``--peer kafka`` adds a three-node Apache Kafka 4.x cluster
   (``kafka_peer.py``: KRaft combined mode, three voters) that takes its turns
   like a checkout, with the same clients.

Run: ``.venv/bin/python bench/bench_replication.py`` (defaults: a few
minutes); ``--help`` for sizes. Prints a table, writes
bench/results/replication.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from brokers import (
    BrokerUnderTest,
    Headwater,
    ScratchDir,
    cpu_seconds,
    free_port,
    machine_info,
    settle_page_cache,
    user_and_system_seconds,
)
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka_peer import KafkaCluster, peer_info

from headwater.cluster.zookeeper_server import ZooKeeperServer

RESULTS = Path(__file__).parent / "results" / "replication.json"
MB = 1e6


class ClusterOps:
    """What the benches do to a running cluster, whichever broker it runs."""

    brokers: Sequence[BrokerUnderTest]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.proc is not None)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int, rf: int, **configs: str) -> None:
        topic = NewTopic(name, partitions, rf, config=configs)
        admin = self.admin()  # alive until the future completes
        admin.create_topics([topic], request_timeout=300)[name].result(300)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            admin = self.admin()
            md = admin.list_topics(name, timeout=30).topics[name]
            if len(md.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()
            ):
                return
            time.sleep(0.5)
        raise RuntimeError(f"topic {name} never got all its leaders and ISRs")

    def delete_topics(self, names: list[str]) -> None:
        """Delete and wait until the metadata no longer lists them (their files go with them)."""
        admin = self.admin()
        for future in admin.delete_topics(names, request_timeout=60).values():
            future.result(60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = self.admin().list_topics(timeout=30).topics
            if not any(name in listed for name in names):
                return
            time.sleep(0.2)
        raise RuntimeError(f"topics {names} still listed 60 s after their deletion")

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(b.pid) for b in self.brokers if b.proc is not None)

    def user_and_system_seconds(self) -> tuple[float, float]:
        split = [user_and_system_seconds(b.pid) for b in self.brokers if b.proc is not None]
        return sum(u for u, _ in split), sum(s for _, s in split)


class KafkaLocalCluster(ClusterOps):
    """Three Apache Kafka nodes in KRaft combined mode (node ids 0-2, every one a voter).

    ``file.delete.delay.ms=1000``: Kafka keeps a deleted topic's files 60 s by
    default, and ``bench_compare`` deletes each round's topics to hand their
    page cache back before the next round, on every cluster.
    """

    def __init__(self, root: Path) -> None:
        self.kafka = KafkaCluster(root, 3, {"file.delete.delay.ms": "1000"})
        self.brokers = self.kafka.brokers

    def __enter__(self) -> KafkaLocalCluster:
        self.kafka.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kafka.stop()


class LocalCluster(ClusterOps):
    """A ZooKeeper server and N Headwater brokers, each with a metrics endpoint."""

    def __init__(
        self,
        root: Path,
        size: int,
        overrides: list[str],
        session_timeout_ms: int = 3000,
        pythonpath: str | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.pythonpath = pythonpath
        #: Each broker's whole output goes to ``<log_dir>/broker-<i>.log`` when set.
        self.log_dir = log_dir
        self.zookeeper = ZooKeeperServer(root / "zookeeper", tick_time_ms=500)
        self.root = root
        self.size = size
        self.overrides = overrides
        self.brokers: list[Headwater] = []
        self.metrics_ports: list[int] = []

    def __enter__(self) -> LocalCluster:
        self.zookeeper.start()
        connect = self.zookeeper.connect_string + "/bench"
        for i in range(self.size):
            port = free_port()
            broker = Headwater(
                self.root / f"broker-{i}",
                [
                    f"broker.id={i}",
                    f"zookeeper.connect={connect}",
                    f"headwater.metrics.listen=127.0.0.1:{port}",
                    f"zookeeper.session.timeout.ms={self.session_timeout_ms}",
                    "offsets.topic.num.partitions=4",
                    *self.overrides,
                ],
            )
            if self.pythonpath is not None:
                broker.env["PYTHONPATH"] = self.pythonpath
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                broker.log_path = self.log_dir / f"broker-{i}.log"
            broker.start(timeout=60)
            self.brokers.append(broker)
            self.metrics_ports.append(port)
        return self

    def __exit__(self, *exc: object) -> None:
        for broker in self.brokers:
            broker.stop()
        self.zookeeper.stop()

    def metric(self, name: str) -> float:
        """The sum of one metric over every live broker."""
        total = 0.0
        for broker, port in zip(self.brokers, self.metrics_ports, strict=True):
            if broker.proc is None:
                continue
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith(name + " ") or line.startswith(name + "{"):
                        total += float(line.rsplit(" ", 1)[1])
        return total


# -- 1. and 2.: throughput and latency, RF 1 against RF 3 -----------------------------


#: The full-speed producers' settings, whichever the client: idempotent acks=all, 1 MB batches.
THROUGHPUT_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 1 << 20,
}


def throughput_producer(bootstrap: str) -> Producer:
    """The confluent-kafka producer of the throughput figures."""
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            **THROUGHPUT_SETTINGS,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )


def produce_throughput(
    bootstrap: str,
    topic: str,
    count: int,
    size: int,
    partitions: int = 6,
    producer: Producer | None = None,
) -> float:
    """Records per second of ``count`` records, all acknowledged (a fresh producer unless given)."""
    if producer is None:
        producer = throughput_producer(bootstrap)
    value = b"x" * size
    failed: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, first: {failed[0]}")
    return count / elapsed


def ack_latencies(bootstrap: str, topic: str, count: int, rate: float) -> list[float]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    latencies: list[float] = []
    lock = threading.Lock()

    def delivered(sent: float) -> Any:
        def callback(err: KafkaError | None, _msg: object) -> None:
            if err is None:
                with lock:
                    latencies.append((time.perf_counter() - sent) * 1000)

        return callback

    interval = 1 / rate
    next_at = time.perf_counter()
    for _ in range(count):
        now = time.perf_counter()
        if now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        producer.produce(topic, b"y" * 100, partition=0, on_delivery=delivered(time.perf_counter()))
        producer.poll(0)
    producer.flush(60)
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_rf(args: argparse.Namespace) -> dict[str, Any]:
    with ScratchDir("hw-bench-rf-") as root, LocalCluster(root, 3, []) as cluster:
        cluster.create_topic("rf1", 6, 1)
        cluster.create_topic("rf3", 6, 3, **{"min.insync.replicas": "2"})
        rates: dict[str, list[float]] = {"rf1": [], "rf3": []}
        produce_throughput(cluster.bootstrap, "rf1", args.records // 10, args.size)  # warm up
        produce_throughput(cluster.bootstrap, "rf3", args.records // 10, args.size)
        for _ in range(args.rounds):
            for topic in ("rf1", "rf3"):
                rate = produce_throughput(cluster.bootstrap, topic, args.records, args.size)
                rates[topic].append(rate)
                print(f"  produce {topic}: {rate:,.0f} records/s", flush=True)
        latency: dict[str, list[float]] = {}
        for topic in ("rf1", "rf3"):
            latency[topic] = ack_latencies(
                cluster.bootstrap, topic, args.latency_records, args.latency_rate
            )
        out: dict[str, Any] = {"record_size": args.size, "records": args.records}
        for topic in ("rf1", "rf3"):
            median = statistics.median(rates[topic])
            out[topic] = {
                "records_per_s": median,
                "mb_per_s": median * args.size / MB,
                "rounds": rates[topic],
                "acks_all_p50_ms": percentile(latency[topic], 0.50),
                "acks_all_p99_ms": percentile(latency[topic], 0.99),
                "latency_samples": len(latency[topic]),
            }
        out["rf3_over_rf1"] = out["rf3"]["records_per_s"] / out["rf1"]["records_per_s"]
        return out


# -- 3.: idle followers, sessions on against off --------------------------------------


def bench_idle(args: argparse.Namespace, sessions: bool) -> dict[str, Any]:
    overrides = [f"headwater.replica.fetch.sessions.enable={str(sessions).lower()}"]
    # A longer ZooKeeper session: creating 10,000 partitions on a loaded 2-core
    # box must not read as a dead broker.
    with (
        ScratchDir("hw-bench-idle-") as root,
        LocalCluster(root, 3, overrides, session_timeout_ms=10_000) as cluster,
    ):
        started = time.monotonic()
        cluster.create_topic("idle", args.idle_partitions, 3)
        settle = time.monotonic() - started
        # Elected in ZooKeeper is not yet settled: each broker takes its 10,000
        # roles in slices and its fetchers build their sessions. Wait for every
        # replica to be in place and a quiet spell before measuring.
        deadline = time.monotonic() + 300
        expected = 3 * args.idle_partitions
        while cluster.metric("kafka_server_replicamanager_partitioncount") < expected:
            if time.monotonic() > deadline:
                raise RuntimeError("replicas never all in place")
            time.sleep(1)
        time.sleep(5)
        bytes_before = cluster.metric("headwater_fetch_request_bytes_total") + cluster.metric(
            "headwater_fetch_response_bytes_total"
        )
        fetches_before = cluster.metric("headwater_requests_total")
        cpu_before = cluster.cpu_seconds()
        time.sleep(args.idle_seconds)
        cpu = cluster.cpu_seconds() - cpu_before
        fetch_bytes = (
            cluster.metric("headwater_fetch_request_bytes_total")
            + cluster.metric("headwater_fetch_response_bytes_total")
            - bytes_before
        )
        requests = cluster.metric("headwater_requests_total") - fetches_before
        followers = cluster.metric("headwater_fetch_sessions_followers")
        return {
            "sessions": sessions,
            "partitions": args.idle_partitions,
            "create_and_elect_s": settle,
            "fetch_bytes_per_s": fetch_bytes / args.idle_seconds,
            "requests_per_s": requests / args.idle_seconds,
            "bytes_per_request": fetch_bytes / requests if requests else 0.0,
            "broker_cpu_s_per_s": cpu / args.idle_seconds,
            "follower_sessions": followers,
        }


# -- 4.: failover -----------------------------------------------------------------------


def bench_failover(args: argparse.Namespace) -> dict[str, Any]:
    with ScratchDir("hw-bench-failover-") as root, LocalCluster(root, 3, []) as cluster:
        cluster.create_topic("failover", 1, 3, **{"min.insync.replicas": "2"})
        admin = cluster.admin()
        md = admin.list_topics("failover", timeout=10).topics["failover"]
        leader = md.partitions[0].leader
        survivors = ",".join(b.bootstrap for i, b in enumerate(cluster.brokers) if i != leader)
        producer = Producer(
            {
                "bootstrap.servers": survivors,
                "acks": "all",
                "message.timeout.ms": 60_000,
                "topic.metadata.refresh.interval.ms": 200,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 200,
            }
        )
        producer.produce("failover", b"before")
        producer.flush(30)
        broker = cluster.brokers[leader]
        assert broker.proc is not None
        killed_at = time.perf_counter()
        broker.proc.kill()
        broker.proc.wait()
        broker.proc = None
        acked: list[float] = []
        producer.produce(
            "failover",
            b"after",
            on_delivery=lambda err, _m: acked.append(time.perf_counter()) if err is None else None,
        )
        producer.flush(60)
        if not acked:
            raise RuntimeError("no write succeeded after the failover")
        return {
            "zookeeper_session_timeout_ms": 3000,
            "kill_to_first_acks_all_write_s": acked[0] - killed_at,
        }


# -- 5.: acks=all latency and CPU per GB, RF 1 against RF 3, checkouts side by side -------

#: Issue 21's targets, printed with the figures.
LATENCY_TARGET_MS = {"p50": 2.0, "p99": 5.0}
CPU_RATIO_TARGET = 3.0
THROUGHPUT_RATIO_TARGET = 0.60


def paced_ack_latencies(
    bootstrap: str, topic: str, seconds: float, rate: float, size: int
) -> dict[str, float]:
    """Idempotent ``acks=all``, ``linger.ms=0``, one record every ``1/rate`` s to partition 0.

    Returns p50/p99 of produce() to delivery callback, and the client's CPU.
    """
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
        }
    )
    producer.produce(topic, b"w", partition=0)  # connect and get a producer id first
    producer.flush(30)
    latencies: list[float] = []
    value = b"y" * size

    def delivered(sent: float) -> Any:
        def callback(err: KafkaError | None, _msg: object) -> None:
            if err is None:
                latencies.append((time.perf_counter() - sent) * 1000)

        return callback

    count = int(seconds * rate)
    interval = 1 / rate
    cpu_before = time.process_time()
    next_at = time.perf_counter()
    for _ in range(count):
        # Wait in poll(), not sleep(): a delivery report is timed when it
        # arrives, not at the next send. poll() counts whole milliseconds (0
        # would spin and take a core from the brokers), so at least 1 ms.
        while (wait := next_at - time.perf_counter()) > 0:
            producer.poll(max(wait, 0.001))
        next_at += interval
        producer.produce(topic, value, partition=0, on_delivery=delivered(time.perf_counter()))
    producer.flush(60)
    return {
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies, default=float("nan")),
        # A missed wake-up of a parked follower fetch shows as an ack near
        # replica.fetch.wait.max.ms (500 ms): count the acks that slow.
        "over_200ms": sum(1 for x in latencies if x > 200),
        "samples": len(latencies),
        "client_cpu_s": time.process_time() - cpu_before,
    }


Target = tuple[ClusterOps, str]
"""A cluster and a topic to produce to."""

#: The clients the throughput turns can use: confluent-kafka's per-record
#: ``produce()`` (the issue's client), or Headwater's own producer sending
#: Arrow columns, which costs about a third as much CPU per GB, so the
#: brokers rather than the client fill the two cores.
CLIENTS = ("confluent", "headwater-arrow")
ARROW_ROWS = 16_384


def arrow_producer(bootstrap: str) -> Any:
    """Headwater's producer with the settings of :func:`throughput_producer`."""
    from headwater.client.producer import Producer as HeadwaterProducer

    return HeadwaterProducer({"bootstrap.servers": bootstrap, **THROUGHPUT_SETTINGS})


def arrow_throughput(
    producer: Any, topic: str, count: int, size: int, partitions: int = 6
) -> float:
    """Records per second of ``count`` records sent as Arrow columns, all acknowledged."""
    import pyarrow as pa

    values = pa.array([b"x" * size] * ARROW_ROWS, pa.binary())
    per_partition = count // partitions
    start = time.perf_counter()
    futures = []
    for partition in range(partitions):
        left = per_partition
        while left > 0:
            take = min(ARROW_ROWS, left)
            futures += producer.send_arrow(topic, partition, values[:take])
            left -= take
    producer.flush(300)
    for future in futures:
        future.result()
    return per_partition * partitions / (time.perf_counter() - start)


def interleaved_produce_costs(
    targets: dict[str, Target], count: int, size: int, turns: int, client: str = "confluent"
) -> dict[str, dict[str, float]]:
    """Throughput and brokers' and client's CPU per GB of several clusters and topics,
    produced by :func:`produce_throughput` in alternating turns.

    Why: this host's speed changes between runs tens of seconds apart (the
    same tree's RF 1 ran at 1.1 or at 3.8 broker CPU-s per GB), so RF 1 and
    RF 3, or two checkouts, measured one after the other compare two
    different machines. In turns of ``count / turns`` records, order flipped
    each turn, all targets see the same spells of fast and slow, and their
    sums make the ratios.
    """
    arrow = client == "headwater-arrow"
    make = arrow_producer if arrow else throughput_producer
    producers = {k: make(c.bootstrap) for k, (c, _) in targets.items()}

    def produce(key: str, cluster: ClusterOps, topic: str, records: int) -> float:
        if arrow:
            return arrow_throughput(producers[key], topic, records, size)
        return produce_throughput(cluster.bootstrap, topic, records, size, producer=producers[key])

    for key, (cluster, topic) in targets.items():  # connected, with a producer id
        produce(key, cluster, topic, 600)
    spent = {k: {"seconds": 0.0, "user": 0.0, "system": 0.0, "client": 0.0} for k in targets}
    per_turn = max(1, count // turns)
    keys = list(targets)
    for turn in range(turns):
        for key in keys if turn % 2 == 0 else keys[::-1]:
            cluster, topic = targets[key]
            settle_page_cache()
            (user, system), client_cpu = cluster.user_and_system_seconds(), time.process_time()
            rate = produce(key, cluster, topic, per_turn)
            user_after, system_after = cluster.user_and_system_seconds()
            spent[key]["seconds"] += per_turn / rate
            spent[key]["user"] += user_after - user
            spent[key]["system"] += system_after - system
            spent[key]["client"] += time.process_time() - client_cpu
    if arrow:
        for producer in producers.values():
            producer.close()
    gb = per_turn * turns * size / 1e9
    out: dict[str, dict[str, float]] = {}
    for key, s in spent.items():
        rate = per_turn * turns / s["seconds"]
        out[key] = {
            "records_per_s": rate,
            "mb_per_s": rate * size / MB,
            "broker_cpu_s_per_gb": (s["user"] + s["system"]) / gb,
            "broker_user_s_per_gb": s["user"] / gb,
            "broker_system_s_per_gb": s["system"] / gb,
            "client_cpu_s_per_gb": s["client"] / gb,
        }
    return out


def role_cost(cluster: ClusterOps, topic: str, count: int, size: int) -> dict[str, float]:
    """CPU per GB of the leader and of each follower (mean) of a one-partition topic.

    User and system time apart: the system part is the kernel's copies and
    loopback TCP (on loopback the sender's ``sendfile`` also runs the
    receiving side of the TCP stack), which no Python change removes.
    """
    leader = cluster.admin().list_topics(topic, timeout=30).topics[topic].partitions[0].leader
    pids = [b.pid for b in cluster.brokers]
    settle_page_cache()
    before = [user_and_system_seconds(pid) for pid in pids]
    rate = produce_throughput(cluster.bootstrap, topic, count, size, partitions=1)
    after = [user_and_system_seconds(pid) for pid in pids]
    gb = count * size / 1e9
    user = [(a[0] - b[0]) / gb for a, b in zip(after, before, strict=True)]
    system = [(a[1] - b[1]) / gb for a, b in zip(after, before, strict=True)]
    followers = [i for i in range(len(pids)) if i != leader]
    return {
        "mb_per_s": rate * size / MB,
        "leader_cpu_s_per_gb": user[leader] + system[leader],
        "follower_cpu_s_per_gb": statistics.mean(user[i] + system[i] for i in followers),
        "leader_user_s_per_gb": user[leader],
        "leader_system_s_per_gb": system[leader],
        "follower_user_s_per_gb": statistics.mean(user[i] for i in followers),
        "follower_system_s_per_gb": statistics.mean(system[i] for i in followers),
    }


def parse_trees(values: list[str] | None) -> dict[str, str]:
    """``NAME=PATH`` pairs: the checkouts whose brokers run side by side (default: this one)."""
    if not values:
        return {"this": str(Path(__file__).resolve().parent.parent)}
    trees: dict[str, str] = {}
    for value in values:
        name, _, path = value.partition("=")
        trees[name] = str(Path(path).resolve())
    return trees


def _median_of(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def bench_compare(args: argparse.Namespace) -> dict[str, Any]:
    """Each checkout gets its own three-broker cluster; rounds alternate between them.

    Per round and checkout: paced acks=all latency on RF 1 then RF 3 (1
    partition each) and the per-role cost on one RF 3 partition; then
    full-speed produce with CPU to RF 1 and RF 3 (6 partitions each) of every
    checkout, in alternating turns (:func:`interleaved_produce_costs`).
    Medians over the rounds.
    """
    trees = parse_trees(args.tree)
    rate = args.compare_mb_per_s * MB / args.size
    rounds: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {k: [] for k in ("lat1", "lat3", "thr1", "thr3", "roles")} for name in trees
    }
    for peer in args.peer:
        rounds[peer] = {k: [] for k in ("lat1", "lat3", "thr1", "thr3", "roles")}
    with contextlib.ExitStack() as stack:
        clusters: dict[str, ClusterOps] = {}
        for name, path in trees.items():
            root = stack.enter_context(ScratchDir(f"hw-bench-cmp-{name}-"))
            clusters[name] = stack.enter_context(LocalCluster(root, 3, [], pythonpath=path))
        if "kafka" in args.peer:
            root = stack.enter_context(ScratchDir("hw-bench-cmp-kafka-"))
            clusters["kafka"] = stack.enter_context(KafkaLocalCluster(root))
        for cluster in clusters.values():
            cluster.create_topic("lat1", 1, 1)
            cluster.create_topic("lat3", 1, 3, **{"min.insync.replicas": "2"})
        if args.warmup:
            # Untimed: a JVM broker compiles its hot paths during its first seconds of traffic.
            for name, cluster in clusters.items():
                cluster.create_topic("warmup", 6, 3, **{"min.insync.replicas": "2"})
                produce_throughput(cluster.bootstrap, "warmup", args.records, args.size)
                for topic in ("lat1", "lat3"):
                    paced_ack_latencies(
                        cluster.bootstrap, topic, args.compare_seconds, rate, args.size
                    )
                cluster.delete_topics(["warmup"])
                print(f"  warm-up {name} done", flush=True)
        for n in range(args.rounds):
            order = list(clusters.items())
            if n % 2:
                order.reverse()
            # Fresh topics each round, deleted at its end: this VM touches memory
            # it never used before about 4x slower (see the Machine section of
            # docs/benchmarks.md), so page cache that only grew would turn later
            # rounds slow. Deleted files give their pages back for the next round.
            thr1, thr3, role3 = f"thr1-r{n}", f"thr3-r{n}", f"role3-r{n}"
            for _, cluster in order:
                cluster.create_topic(thr1, 6, 1)
                cluster.create_topic(thr3, 6, 3, **{"min.insync.replicas": "2"})
                cluster.create_topic(role3, 1, 3, **{"min.insync.replicas": "2"})
                produce_throughput(cluster.bootstrap, role3, args.records // 10, args.size, 1)
            for name, cluster in order:
                load = os.getloadavg()[0]
                for rf in ("1", "3"):
                    lat = paced_ack_latencies(
                        cluster.bootstrap, f"lat{rf}", args.compare_seconds, rate, args.size
                    )
                    lat["load"] = load
                    rounds[name][f"lat{rf}"].append(lat)
                    print(
                        f"  round {n + 1} {name} RF {rf}: acks=all p50 {lat['p50_ms']:.2f} ms, "
                        f"p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.0f} ms, "
                        f"{lat['over_200ms']:.0f} over 200 ms (load {load:.1f})",
                        flush=True,
                    )
                roles = role_cost(cluster, role3, args.records, args.size)
                rounds[name]["roles"].append(roles)
                print(
                    f"  round {n + 1} {name} RF 3, 1 partition: leader "
                    f"{roles['leader_cpu_s_per_gb']:.2f} (user {roles['leader_user_s_per_gb']:.2f}"
                    f" + system {roles['leader_system_s_per_gb']:.2f}), each follower "
                    f"{roles['follower_cpu_s_per_gb']:.2f} (user "
                    f"{roles['follower_user_s_per_gb']:.2f} + system "
                    f"{roles['follower_system_s_per_gb']:.2f}) CPU-s/GB",
                    flush=True,
                )
            # Full-speed produce: every checkout's RF 1 and RF 3 in alternating turns.
            targets = {
                f"{name} {rf}": (cluster, topic)
                for name, cluster in order
                for rf, topic in (("1", thr1), ("3", thr3))
            }
            costs = interleaved_produce_costs(
                targets, args.records, args.size, args.turns, args.client
            )
            for key, cost in costs.items():
                name, rf = key.rsplit(" ", 1)
                rounds[name][f"thr{rf}"].append(cost)
                print(
                    f"  round {n + 1} {name} RF {rf}: {cost['mb_per_s']:.1f} MB/s, "
                    f"brokers {cost['broker_cpu_s_per_gb']:.2f} CPU-s/GB (user "
                    f"{cost['broker_user_s_per_gb']:.2f} + system "
                    f"{cost['broker_system_s_per_gb']:.2f}), "
                    f"client {cost['client_cpu_s_per_gb']:.2f} CPU-s/GB",
                    flush=True,
                )
            for _, cluster in order:
                cluster.delete_topics([thr1, thr3, role3])
    out: dict[str, Any] = {
        "record_size": args.size,
        "latency_rate_mb_per_s": args.compare_mb_per_s,
        "latency_seconds": args.compare_seconds,
        "throughput_records": args.records,
        "throughput_turns": args.turns,
        "throughput_client": args.client,
        "throughput_settings": dict(THROUGHPUT_SETTINGS),
        "warmup": args.warmup,
        "trees": {**trees, **{peer: "peer" for peer in args.peer}},
        "kafka": peer_info() if "kafka" in args.peer else None,
        "targets": {
            "acks_all_p50_ms": LATENCY_TARGET_MS["p50"],
            "acks_all_p99_ms": LATENCY_TARGET_MS["p99"],
            "rf3_cpu_per_gb_over_rf1_max": CPU_RATIO_TARGET,
            "rf3_throughput_over_rf1_min": THROUGHPUT_RATIO_TARGET,
        },
    }
    for name, r in rounds.items():
        summary: dict[str, Any] = {k: _median_of(v) for k, v in r.items()}
        summary["rounds"] = r
        # Per round: RF 1 and RF 3 ran in alternating turns, so their ratio
        # holds even when the host's speed changed between rounds.
        cpu_ratios = [
            r3["broker_cpu_s_per_gb"] / r1["broker_cpu_s_per_gb"]
            for r1, r3 in zip(r["thr1"], r["thr3"], strict=True)
        ]
        rate_ratios = [
            r3["records_per_s"] / r1["records_per_s"]
            for r1, r3 in zip(r["thr1"], r["thr3"], strict=True)
        ]
        summary["rf3_cpu_over_rf1"] = {
            "ratio": statistics.median(cpu_ratios),
            "per_round": cpu_ratios,
        }
        summary["rf3_throughput_over_rf1"] = {
            "ratio": statistics.median(rate_ratios),
            "per_round": rate_ratios,
        }
        out[name] = summary
    return out


def print_compare(result: dict[str, Any]) -> None:
    t = result["targets"]
    print(
        f"  targets: RF 3 acks=all p50 <= {t['acks_all_p50_ms']} ms, p99 <= "
        f"{t['acks_all_p99_ms']} ms; RF 3 CPU/GB <= {t['rf3_cpu_per_gb_over_rf1_max']}x RF 1; "
        f"RF 3 throughput >= {t['rf3_throughput_over_rf1_min']:.0%} of RF 1"
    )
    for name in result["trees"]:
        r = result[name]
        lat1, lat3, thr1, thr3 = r["lat1"], r["lat3"], r["thr1"], r["thr3"]
        print(
            f"  {name}: acks=all RF 1 p50 {lat1['p50_ms']:.2f} / p99 {lat1['p99_ms']:.2f} ms, "
            f"RF 3 p50 {lat3['p50_ms']:.2f} / p99 {lat3['p99_ms']:.2f} ms"
        )
        roles = r["roles"]
        print(
            f"  {name}: RF 3 on one partition: leader {roles['leader_cpu_s_per_gb']:.2f}, "
            f"each follower {roles['follower_cpu_s_per_gb']:.2f} CPU-s/GB"
        )
        print(
            f"  {name}: produce RF 1 {thr1['mb_per_s']:.1f} MB/s at "
            f"{thr1['broker_cpu_s_per_gb']:.2f} broker CPU-s/GB "
            f"(client {thr1['client_cpu_s_per_gb']:.2f}), "
            f"RF 3 {thr3['mb_per_s']:.1f} MB/s at {thr3['broker_cpu_s_per_gb']:.2f} "
            f"(client {thr3['client_cpu_s_per_gb']:.2f}); "
            f"CPU ratio {r['rf3_cpu_over_rf1']['ratio']:.2f}x (per round "
            + ", ".join(f"{x:.2f}" for x in r["rf3_cpu_over_rf1"]["per_round"])
            + f"), throughput ratio {r['rf3_throughput_over_rf1']['ratio']:.0%} (per round "
            + ", ".join(f"{x:.0%}" for x in r["rf3_throughput_over_rf1"]["per_round"])
            + ")"
        )


def _setting_value(text: str) -> bool | int | str:
    """A producer setting from the command line: true/false and integers typed."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="per throughput round")
    parser.add_argument("--size", type=int, default=1000, help="record size in bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--client",
        choices=CLIENTS,
        default="confluent",
        help="compare: the client of the full-speed produce turns",
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=2,
        help="compare: --records is produced in this many alternating turns per topic",
    )
    parser.add_argument("--latency-records", type=int, default=2000)
    parser.add_argument("--latency-rate", type=float, default=500.0, help="records/s")
    parser.add_argument("--idle-partitions", type=int, default=10_000)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument(
        "--only",
        choices=["rf", "idle", "failover", "compare"],
        action="append",
        help="run only these (compare: not in the default run)",
    )
    parser.add_argument(
        "--tree",
        action="append",
        metavar="NAME=PATH",
        help="compare: a checkout whose brokers to run (PYTHONPATH); repeat for side by side",
    )
    parser.add_argument(
        "--peer",
        action="append",
        choices=["kafka"],
        default=[],
        help="compare: also run this cluster in turn with the checkouts (kafka: three Apache "
        "Kafka 4.x nodes, KRaft combined mode, fetched by mvn on first use)",
    )
    parser.add_argument(
        "--warmup",
        action="store_true",
        help="compare: an untimed full-speed produce and paced latency run per cluster first",
    )
    parser.add_argument("--compare-mb-per-s", type=float, default=2.0, help="latency rate")
    parser.add_argument("--compare-seconds", type=float, default=5.0, help="per latency run")
    parser.add_argument(
        "--producer-setting",
        action="append",
        metavar="KEY=VALUE",
        help="override one of the full-speed producers' THROUGHPUT_SETTINGS, for both "
        "factors (e.g. enable.idempotence=false: librdkafka's idempotent producer "
        "busy-polls while it waits for acks, see docs/benchmarks.md)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    for setting in args.producer_setting or []:
        key, _, value = setting.partition("=")
        THROUGHPUT_SETTINGS[key] = _setting_value(value)
    only = set(args.only or ["rf", "idle", "failover"])
    result: dict[str, Any] = {}
    if args.only and args.out.exists():
        # A partial run updates its parts of an earlier run's results.
        result = json.loads(args.out.read_text())
    result["machine"] = machine_info()
    if "rf" in only:
        print("== produce throughput and acks=all latency, RF 1 vs RF 3", flush=True)
        result["replication_factor"] = rf = bench_rf(args)
        for topic in ("rf1", "rf3"):
            r = rf[topic]
            print(
                f"  {topic}: {r['records_per_s']:,.0f} records/s ({r['mb_per_s']:.1f} MB/s), "
                f"acks=all p50 {r['acks_all_p50_ms']:.1f} ms, p99 {r['acks_all_p99_ms']:.1f} ms"
            )
        print(f"  RF 3 keeps {rf['rf3_over_rf1']:.0%} of RF 1's throughput")
    if "idle" in only:
        print(f"== idle followers, {args.idle_partitions:,} partitions x RF 3", flush=True)
        on = bench_idle(args, True)
        off = bench_idle(args, False)
        result["idle_followers"] = {"sessions_on": on, "sessions_off": off}
        for r in (on, off):
            print(
                f"  sessions {'on ' if r['sessions'] else 'off'}: "
                f"{r['fetch_bytes_per_s']:,.0f} fetch B/s, "
                f"{r['bytes_per_request']:,.0f} B/request, "
                f"broker CPU {r['broker_cpu_s_per_s']:.3f} s/s, "
                f"{r['follower_sessions']:.0f} follower sessions"
            )
        if on["fetch_bytes_per_s"] > 0:
            ratio = off["fetch_bytes_per_s"] / on["fetch_bytes_per_s"]
            result["idle_followers"]["bytes_ratio_off_over_on"] = ratio
            print(f"  fetch bytes: sessions off / on = {ratio:,.0f}x")
        if on["broker_cpu_s_per_s"] > 0:
            cpu_ratio = off["broker_cpu_s_per_s"] / on["broker_cpu_s_per_s"]
            result["idle_followers"]["cpu_ratio_off_over_on"] = cpu_ratio
            print(f"  broker CPU:  sessions off / on = {cpu_ratio:,.1f}x")
    if "compare" in only:
        print("== acks=all latency and CPU per GB, RF 1 vs RF 3, side by side", flush=True)
        result["compare"] = bench_compare(args)
        print_compare(result["compare"])
    if "failover" in only:
        print("== failover: kill -9 of the leader to the first acks=all write", flush=True)
        result["failover"] = f = bench_failover(args)
        print(
            f"  {f['kill_to_first_acks_all_write_s']:.2f} s "
            f"(zookeeper.session.timeout.ms={f['zookeeper_session_timeout_ms']})"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
