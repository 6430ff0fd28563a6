"""py-spy profiles of a replication leader and its followers, checkouts side by side.

For each checkout given with ``--tree NAME=PATH``: a ZooKeeper and three
brokers started with that checkout on PYTHONPATH, a 1-partition topic at
replication factor 3, and a full-speed idempotent ``acks=all`` produce while
``py-spy record --gil`` samples every broker. Prints, per checkout and role,
the samples that held the GIL (the process's Python work) and the functions
with the most of them; writes the raw stacks to ``--profiles`` and a summary
to bench/results/profile_replication.json.

Run: ``.venv/bin/python bench/profile_replication.py --tree main=/work/main
--tree this=.`` (needs py-spy, in the bench extra; py-spy needs ptrace rights).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_replication import LocalCluster, parse_trees, produce_throughput
from brokers import ScratchDir, machine_info

RESULTS = Path(__file__).parent / "results" / "profile_replication.json"
FRAME = re.compile(r"(.*) \((.*):\d+\)")


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("py-spy not found: pip install the bench extra")
    return found


def short(frame: str) -> str:
    m = FRAME.match(frame)
    if m is None:
        return frame
    name, path = m.groups()
    return f"{name} ({path.split('site-packages/')[-1].split('headwater/')[-1]})"


def summarize(path: Path, top: int) -> dict[str, Any]:
    """Total samples, and the functions with the most samples (self and inclusive)."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [short(f) for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    return {
        "samples": total,
        "self": own.most_common(top),
        "inclusive": [(f, n) for f, n in inclusive.most_common(top * 3) if n < total][:top],
    }


def profile_tree(name: str, path: str, args: argparse.Namespace, round_no: int) -> dict[str, Any]:
    with (
        ScratchDir(f"hw-prof-{name}-") as root,
        LocalCluster(root, 3, [], pythonpath=path) as cluster,
    ):
        cluster.create_topic("prof", 1, 3, **{"min.insync.replicas": "2"})
        produce_throughput(cluster.bootstrap, "prof", args.records // 10, args.size, 1)
        topic = cluster.admin().list_topics("prof", timeout=30).topics["prof"]
        leader = topic.partitions[0].leader
        recorders = []
        outputs: dict[str, Path] = {}
        for i, broker in enumerate(cluster.brokers):
            role = "leader" if i == leader else f"follower-{i}"
            out = args.profiles / f"{name}-{round_no}-{role}.txt"
            outputs[role] = out
            recorders.append(
                subprocess.Popen(
                    [
                        py_spy(),
                        "record",
                        *("--pid", str(broker.pid), "--gil", "--rate", "200", "--format", "raw"),
                        *("--duration", str(args.seconds), "-o", str(out)),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(1)  # py-spy attaches
        cpu_before = cluster.cpu_seconds()
        rate = produce_throughput(cluster.bootstrap, "prof", args.records, args.size, 1)
        cpu = cluster.cpu_seconds() - cpu_before
        for recorder in recorders:
            recorder.wait()
        gb = args.records * args.size / 1e9
        return {
            "records_per_s": rate,
            "broker_cpu_s_per_gb": cpu / gb,
            "load": os.getloadavg()[0],
            "roles": {role: summarize(out, args.top) for role, out in outputs.items()},
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", metavar="NAME=PATH")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=12, help="py-spy duration")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--profiles", type=Path, default=Path("/tmp/headwater-profiles"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.profiles.mkdir(parents=True, exist_ok=True)
    trees = parse_trees(args.tree)
    result: dict[str, Any] = {"machine": machine_info(), "trees": trees, "runs": {}}
    for n in range(args.rounds):
        for name, path in trees.items():
            run = profile_tree(name, path, args, n)
            result["runs"].setdefault(name, []).append(run)
            samples = {role: r["samples"] for role, r in run["roles"].items()}
            print(
                f"  round {n + 1} {name}: {run['records_per_s']:,.0f} records/s, "
                f"{run['broker_cpu_s_per_gb']:.2f} broker CPU-s/GB, load {run['load']:.1f}; "
                f"GIL samples {samples}",
                flush=True,
            )
            for role, r in run["roles"].items():
                top = ", ".join(f"{f} {n}" for f, n in r["self"][:5])
                print(f"    {role}: {top}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
