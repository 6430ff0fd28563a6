"""Follower fetches per acked write at RF 3, side by side for several checkouts.

Why: a change to what wakes a parked follower fetch shows first as a change
in the number of follower round trips per write (CPU on all three brokers)
and in the tail of acks=all latency (a write whose follower fetch is not
woken waits for ``replica.fetch.wait.max.ms``, 500 ms). This counts both.

Per checkout (``--tree NAME=PATH``), a three-broker cluster on its own
ZooKeeper; rounds alternate between them. Per round: idempotent
``acks=all``, ``linger.ms=0``, 1 KB records paced at ``--rate`` to one RF 3
partition (``min.insync.replicas=2``) for ``--seconds``; the three brokers'
``FetchFollower`` and ``Produce`` request counts (Kafka's RequestMetrics
``RequestsPerSec``, from each broker's metrics endpoint) before and after,
the partitions their fetch paths read per follower fetch
(``headwater_fetch_partitions_read``: a parked fetch reads once, and once
more when woken; a spurious wake-up adds a read), and the acks=all latency
distribution with the number of acks over 200 ms.

Run: ``cd bench && ../.venv/bin/python bench_follower_fetches.py --tree
before=/tmp/before --tree after=/tmp/after``. Writes
bench/results/follower_fetches.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import urllib.request
from pathlib import Path
from typing import Any

from bench_replication import LocalCluster, paced_ack_latencies, parse_trees
from brokers import ScratchDir, machine_info

RESULTS = Path(__file__).parent / "results" / "follower_fetches.json"
#: A counter: the exposition adds ``_total``.
REQUESTS = "kafka_network_requestmetrics_requestspersec_total"
#: Partitions the brokers' fetch paths read (every read of a parked fetch counts).
PARTITIONS_READ = "headwater_fetch_partitions_read_total"


def requests(cluster: LocalCluster, name: str) -> float:
    """Requests of one Kafka request name answered by all brokers (every version)."""
    total = 0.0
    for port in cluster.metrics_ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(REQUESTS + "{") and f'request="{name}"' in line:
                    total += float(line.rsplit(" ", 1)[1])
    return total


def one_round(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, float]:
    before = {n: requests(cluster, n) for n in ("FetchFollower", "Produce")}
    read_before = cluster.metric(PARTITIONS_READ)
    cpu = cluster.cpu_seconds()
    lat = paced_ack_latencies(cluster.bootstrap, "f3", args.seconds, args.rate, args.size)
    cpu = cluster.cpu_seconds() - cpu
    after = {n: requests(cluster, n) for n in ("FetchFollower", "Produce")}
    read = cluster.metric(PARTITIONS_READ) - read_before
    produces = after["Produce"] - before["Produce"]
    follower = after["FetchFollower"] - before["FetchFollower"]
    return {
        **lat,
        "produce_requests": produces,
        "follower_fetches": follower,
        "follower_fetches_per_produce": follower / produces if produces else float("nan"),
        # Reads per fetch: a parked follower fetch reads once, then once more when
        # the leader's append wakes it; a spurious wake-up adds a read.
        "partitions_read_per_follower_fetch": read / follower if follower else float("nan"),
        "brokers_cpu_s": cpu,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tree",
        action="append",
        metavar="NAME=PATH",
        help="a checkout whose brokers to run (PYTHONPATH); repeat (default: this checkout)",
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rate", type=float, default=1000.0, help="records per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    trees = parse_trees(args.tree)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    result: dict[str, Any] = {"machine": machine_info(), "config": vars(args) | {"out": None}}
    with contextlib.ExitStack() as stack:
        clusters: dict[str, LocalCluster] = {}
        for name, path in trees.items():
            root = stack.enter_context(ScratchDir(f"hw-bench-ff-{name}-"))
            cluster = stack.enter_context(LocalCluster(root, 3, [], pythonpath=path))
            cluster.create_topic("f3", 1, 3, **{"min.insync.replicas": "2"})
            clusters[name] = cluster
        for n in range(args.rounds):
            order = list(clusters.items())
            if n % 2:
                order.reverse()
            for name, cluster in order:
                r = one_round(cluster, args)
                rounds[name].append(r)
                print(
                    f"round {n + 1} {name:<7} follower fetches/produce "
                    f"{r['follower_fetches_per_produce']:5.2f} "
                    f"({r['follower_fetches']:.0f}/{r['produce_requests']:.0f}), "
                    f"reads/fetch {r['partitions_read_per_follower_fetch']:.2f}, acks=all p50 "
                    f"{r['p50_ms']:.2f} p99 {r['p99_ms']:.1f} max {r['max_ms']:.0f} ms, "
                    f"{r['over_200ms']:.0f} over 200 ms, brokers {r['brokers_cpu_s']:.1f} CPU-s "
                    f"(load {r['load']:.1f})",
                    flush=True,
                )
    result["results"] = {
        name: {
            "median": {k: statistics.median(r[k] for r in rs) for k in rs[0]},
            "rounds": rs,
        }
        for name, rs in rounds.items()
    }
    for name, s in result["results"].items():
        m = s["median"]
        print(
            f"{name:<7} median: follower fetches/produce {m['follower_fetches_per_produce']:.2f}, "
            f"partitions read per follower fetch {m['partitions_read_per_follower_fetch']:.2f}, "
            f"p50 {m['p50_ms']:.2f} p99 {m['p99_ms']:.1f} ms, {m['over_200ms']:.0f} over 200 ms, "
            f"brokers {m['brokers_cpu_s']:.1f} CPU-s per round"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
