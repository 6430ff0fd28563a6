"""CPU per request on the produce path and the follower fetch path (issue 33, item 3).

The cost that saturates two cores at RF 3 ``acks=all`` with small requests
is per request, not per byte, so this measures it per request: for each
checkout given with ``--tree NAME=PATH`` (default this one) a three-broker
cluster of its own; a one-partition RF 3 topic (``min.insync.replicas=2``);
confluent-kafka producing 1 KB records one per ProduceRequest
(``linger.ms=0``, idempotent ``acks=all``) paced at ``--rate`` for
``--seconds``. Over that phase each broker's CPU (user + system, from its
POSIX CPU clock) is divided by the requests it took part in, counted from the
leader's ``headwater_requests_total`` by API:

* leader CPU-µs per ProduceRequest (it also answers the followers' fetches,
  which a produce causes);
* each follower's CPU-µs per follower FetchRequest it sent (the leader's
  FETCH count over the phase, halved: there are two followers and no
  consumer).

Also the idle CPU of each role over ``--idle-seconds`` before the phase
(reported as CPU-µs per second), and the ack latency p50/p99. Rounds
alternate between the checkouts; medians are reported. ``--profile DIR``
runs ``py-spy record`` on the first checkout's leader and one follower during
its first round.

Run: ``.venv/bin/python bench/bench_request_cost.py --tree base=/tmp/hw-281c48c
--tree this=.``; writes bench/results/request_cost.json and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench_replication import LocalCluster, paced_ack_latencies, parse_trees
from brokers import ProcessCpuClock, ScratchDir, machine_info, user_and_system_seconds

RESULTS = Path(__file__).parent / "results" / "request_cost.json"
PY_SPY = Path(sys.executable).parent / "py-spy"


def requests_by_api(port: int) -> dict[str, float]:
    """``headwater_requests_total`` of one broker, by API name."""
    out: dict[str, float] = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("headwater_requests_total{"):
                api = line.split('api="', 1)[1].split('"', 1)[0]
                out[api] = float(line.rsplit(" ", 1)[1])
    return out


def start_profiles(pids: dict[str, int], seconds: float, directory: Path) -> list[Any]:
    """py-spy on each named process for ``seconds`` (raw, collapsed stacks), in the background."""
    directory.mkdir(parents=True, exist_ok=True)
    procs = []
    for role, pid in pids.items():
        cmd = [str(PY_SPY), "record", "-r", "200", "-d", str(int(seconds)), "--format", "raw"]
        cmd += ["-o", str(directory / f"{role}.txt"), "-p", str(pid)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def one_round(
    cluster: LocalCluster, topic: str, args: argparse.Namespace, profile: Path | None
) -> dict[str, float]:
    """Idle CPU, then the paced phase's CPU per request of each role, and its latencies."""
    meta = cluster.admin().list_topics(topic, timeout=30).topics[topic].partitions[0]
    leader = meta.leader
    followers = [i for i in range(len(cluster.brokers)) if i != leader]
    clocks = [ProcessCpuClock(b.pid) for b in cluster.brokers]
    idle0 = [c.ns() for c in clocks]
    time.sleep(args.idle_seconds)
    idle1 = [c.ns() for c in clocks]
    port = cluster.metrics_ports[leader]
    before_req = requests_by_api(port)
    before = [c.ns() for c in clocks]
    split_before = [user_and_system_seconds(b.pid) for b in cluster.brokers]
    spies = []
    if profile is not None:
        pids = {"leader": cluster.brokers[leader].pid}
        pids["follower"] = cluster.brokers[followers[0]].pid
        spies = start_profiles(pids, min(20.0, args.seconds - 1), profile)
    lat = paced_ack_latencies(cluster.bootstrap, topic, args.seconds, args.rate, args.size)
    after = [c.ns() for c in clocks]
    split_after = [user_and_system_seconds(b.pid) for b in cluster.brokers]
    after_req = requests_by_api(port)
    for spy in spies:
        spy.wait(60)
    produces = after_req.get("produce", 0) - before_req.get("produce", 0)
    fetches = after_req.get("fetch", 0) - before_req.get("fetch", 0)
    cpu_us = [(a - b) / 1000 for a, b in zip(after, before, strict=True)]
    idle_us_per_s = [(a - b) / 1000 / args.idle_seconds for a, b in zip(idle1, idle0, strict=True)]
    follower_fetches = fetches / len(followers)
    system = [a[1] - b[1] for a, b in zip(split_after, split_before, strict=True)]
    both = [sum(a) - sum(b) for a, b in zip(split_after, split_before, strict=True)]
    return {
        "produce_requests": produces,
        "follower_fetch_requests": fetches,
        "leader_us_per_produce": cpu_us[leader] / produces,
        "follower_us_per_fetch": statistics.mean(cpu_us[i] for i in followers) / follower_fetches,
        "fetches_per_produce": fetches / produces,
        "records_per_produce": lat["samples"] / produces,
        # The kernel's part (loopback TCP, page cache), from /proc's 10 ms ticks.
        "leader_system_share": system[leader] / both[leader] if both[leader] else 0.0,
        "follower_system_share": sum(system[i] for i in followers)
        / max(sum(both[i] for i in followers), 1e-9),
        "leader_idle_us_per_s": idle_us_per_s[leader],
        "follower_idle_us_per_s": statistics.mean(idle_us_per_s[i] for i in followers),
        "p50_ms": lat["p50_ms"],
        "p99_ms": lat["p99_ms"],
        "max_ms": lat["max_ms"],
        "samples": lat["samples"],
        "load": os.getloadavg()[0],
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    trees = parse_trees(args.tree)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with contextlib.ExitStack() as stack:
        clusters: dict[str, LocalCluster] = {}
        for name, path in trees.items():
            root = stack.enter_context(ScratchDir(f"hw-bench-reqcost-{name}-"))
            clusters[name] = stack.enter_context(LocalCluster(root, 3, [], pythonpath=path))
            print(f"  {name}: pids {[b.pid for b in clusters[name].brokers]}", flush=True)
        for cluster in clusters.values():
            cluster.create_topic("cost", 1, 3, **{"min.insync.replicas": "2"})
            # Untimed warm-up: connections, first segment, imports on first use.
            paced_ack_latencies(cluster.bootstrap, "cost", 3, args.rate, args.size)
        for n in range(args.rounds):
            order = list(clusters.items())
            if n % 2:
                order.reverse()
            for name, cluster in order:
                profile = None
                if args.profile is not None and n == 0 and name == next(iter(trees)):
                    profile = args.profile
                r = one_round(cluster, "cost", args, profile)
                rounds[name].append(r)
                print(
                    f"  round {n + 1} {name}: leader {r['leader_us_per_produce']:.0f} CPU-us/"
                    f"produce, follower {r['follower_us_per_fetch']:.0f} CPU-us/fetch "
                    f"({r['fetches_per_produce']:.2f} fetches and {r['records_per_produce']:.2f} "
                    f"records/produce, system {r['leader_system_share']:.0%} / "
                    f"{r['follower_system_share']:.0%}), p50 {r['p50_ms']:.2f} "
                    f"ms, p99 {r['p99_ms']:.2f} ms, idle leader "
                    f"{r['leader_idle_us_per_s']:.0f} follower "
                    f"{r['follower_idle_us_per_s']:.0f} us/s (load {r['load']:.1f})",
                    flush=True,
                )
    out: dict[str, Any] = {
        "rate": args.rate,
        "seconds": args.seconds,
        "record_size": args.size,
        "rounds": args.rounds,
        "trees": trees,
        "machine": machine_info(),
    }
    for name, rs in rounds.items():
        out[name] = {
            "median": {k: statistics.median(r[k] for r in rs) for k in rs[0]},
            "rounds": rs,
        }
    return out


def print_table(result: dict[str, Any]) -> None:
    print(
        f"{'tree':<12}{'leader us/produce':>19}{'follower us/fetch':>19}"
        f"{'fetch/produce':>15}{'records/produce':>17}{'p50 ms':>9}{'p99 ms':>9}"
    )
    for name in result["trees"]:
        m = result[name]["median"]
        print(
            f"{name:<12}{m['leader_us_per_produce']:>19.0f}{m['follower_us_per_fetch']:>19.0f}"
            f"{m['fetches_per_produce']:>15.2f}{m['records_per_produce']:>17.2f}{m['p50_ms']:>9.2f}{m['p99_ms']:>9.2f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", metavar="NAME=PATH")
    parser.add_argument("--rate", type=float, default=1000.0, help="produce requests per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="paced phase per round")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=1000, help="record size in bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="py-spy raw profiles go here")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = bench(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
