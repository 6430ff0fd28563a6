"""Run every Headwater benchmark with its default sizes (``make bench``).

Each benchmark runs in its own process, as a user would run it, so one
benchmark's broker processes, page cache and heap do not leak into the next.
Results land in bench/results/*.json; docs/benchmarks.md explains them.

``--kafka`` adds Apache Kafka 4.x as a peer to the benchmarks that have one
(:data:`KAFKA_PEER_ARGS`); its jars are fetched by mvn on first use into
bench/.kafka-cache/. Without it nothing downloads Kafka.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent

#: In order; a script not (yet) in the tree is skipped with a note.
SCRIPTS = [
    "bench_codec.py",
    "bench_broker.py",
    "bench_fetch_sessions.py",
    "bench_spark.py",
    "bench_cluster_zk.py",
    "bench_log_replication.py",
    "bench_group_load.py",
    "bench_replication.py",
    "bench_security.py",
    "bench_transactions.py",
    "bench_client_transactions.py",
    "bench_read_committed.py",
    "bench_session_memory.py",
    "bench_cleaner.py",
]

#: The arguments that add the Kafka peer, per benchmark that has one (``--kafka``).
KAFKA_PEER_ARGS = {
    "bench_broker.py": ["--peer", "kafka", "--warmup"],
    "bench_e2e_latency.py": ["--peer", "kafka", "--peer", "tansu", "--warmup-seconds", "10"],
    "bench_replication.py": ["--peer", "kafka", "--warmup"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="run only these scripts (e.g. bench_broker.py)")
    parser.add_argument(
        "--kafka",
        action="store_true",
        help="add Apache Kafka as a peer where a benchmark has one (fetched by mvn on first use)",
    )
    args = parser.parse_args()
    failed = []
    for script in args.only or SCRIPTS:
        path = BENCH / script
        if not path.exists():
            print(f"== {script}: missing, skipped", flush=True)
            continue
        print(f"== {script}", flush=True)
        start = time.monotonic()
        extra = KAFKA_PEER_ARGS.get(script, []) if args.kafka else []
        code = subprocess.call([sys.executable, str(path), *extra], cwd=BENCH.parent)
        print(f"== {script}: exit {code} after {time.monotonic() - start:.0f} s", flush=True)
        if code:
            failed.append(script)
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
