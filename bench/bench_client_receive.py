"""CPU the headwater client spends receiving fetch responses, checkouts side by side.

Why: every byte a follower replicates, and every byte the Spark source
reads, arrives through ``headwater.client.connection``. How many times the
client copies it shows as CPU per GB. This isolates that path: one broker
(this checkout) holds ``--mb`` MB of ``--record-kb`` KB records in one
partition; per round and checkout (``--tree NAME=PATH``), a fresh process
with that checkout on PYTHONPATH reads them all with ``BrokerConnection``
fetches (Fetch v12, 4 MB per response, records as views, as a replica
fetcher reads) and reports its CPU and wall time. Checkouts alternate within
each round and the order flips between rounds, so a spell of slow machine
falls on both; the figure is the median per-round ratio.

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/bench_client_receive.py
--tree before=/tmp/before --tree after=.``. Writes
bench/results/client_receive.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench_replication import parse_trees
from brokers import Headwater, ScratchDir, machine_info
from confluent_kafka import Producer

RESULTS = Path(__file__).parent / "results" / "client_receive.json"

#: Run in the reader process: read the partition to its end, print CPU and wall time.
READER = """
import asyncio, json, sys, time
from headwater.client.connection import BrokerConnection
from headwater.protocol.fetch_types import FetchRequestData, PartitionFetch, ZERO_UUID

async def main(host, port, topic, end):
    conn = await BrokerConnection.open(host, int(port))
    offset, received = 0, 0
    cpu, wall = time.process_time(), time.perf_counter()
    while offset < end:
        req = FetchRequestData(version=12, max_bytes=4 << 20, partitions=[
            PartitionFetch(ZERO_UUID, topic, 0, offset, partition_max_bytes=4 << 20)])
        resp = await conn.fetch(req, record_views=True)
        part = resp.partitions[0]
        if part.error_code:
            raise SystemExit(f"fetch error {part.error_code}")
        records = part.records
        if records:
            received += len(records)
            # The next offset: the last whole batch's (base offset + last delta + 1).
            view, pos, last = memoryview(records), 0, offset
            while len(view) - pos >= 61:
                base = int.from_bytes(view[pos:pos + 8], "big")
                length = int.from_bytes(view[pos + 8:pos + 12], "big")
                if pos + 12 + length > len(view):
                    break
                last = base + int.from_bytes(view[pos + 23:pos + 27], "big") + 1
                pos += 12 + length
            offset = last
    print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                      "bytes": received}))
    conn.close()

asyncio.run(main(*sys.argv[1:4], int(sys.argv[4])))
"""


def read_once(tree: str, broker: Headwater, topic: str, end: int) -> dict[str, float]:
    host, port = broker.bootstrap.split(":")
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONSAFEPATH": "1"}
    out = subprocess.run(
        [sys.executable, "-c", READER, host, port, topic, str(end)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", metavar="NAME=PATH")
    parser.add_argument("--mb", type=int, default=400)
    parser.add_argument("--record-kb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    trees = parse_trees(args.tree)
    count = args.mb * 1024 // args.record_kb
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with ScratchDir("hw-bench-receive-") as root:
        broker = Headwater(root / "broker", ["log.segment.bytes=1073741824"])
        broker.start(timeout=60)
        try:
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
            value = b"r" * (args.record_kb * 1024)
            for _ in range(count):
                while True:
                    try:
                        producer.produce("receive", value, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.flush(120)
            for name in trees:  # warm: imports compiled, pages cached
                read_once(trees[name], broker, "receive", count)
            for n in range(args.rounds):
                names = list(trees) if n % 2 == 0 else list(trees)[::-1]
                for name in names:
                    r = read_once(trees[name], broker, "receive", count)
                    r["cpu_s_per_gb"] = r["cpu_s"] / (r["bytes"] / 1e9)
                    r["mb_per_s"] = r["bytes"] / 1e6 / r["wall_s"]
                    rounds[name].append(r)
                    print(
                        f"  round {n + 1} {name}: {r['mb_per_s']:.0f} MB/s, "
                        f"{r['cpu_s_per_gb']:.3f} client CPU-s/GB",
                        flush=True,
                    )
        finally:
            broker.stop()
    first = next(iter(trees))
    summary: dict[str, Any] = {}
    for name, rs in rounds.items():
        summary[name] = {
            "cpu_s_per_gb": statistics.median(r["cpu_s_per_gb"] for r in rs),
            "mb_per_s": statistics.median(r["mb_per_s"] for r in rs),
            "cpu_ratio_to_" + first: statistics.median(
                r["cpu_s_per_gb"] / f["cpu_s_per_gb"]
                for r, f in zip(rs, rounds[first], strict=True)
            ),
            "rounds": rs,
        }
        print(
            f"{name}: median {summary[name]['cpu_s_per_gb']:.3f} CPU-s/GB, "
            f"{summary[name]['mb_per_s']:.0f} MB/s, per-round CPU ratio to {first} "
            f"{summary[name]['cpu_ratio_to_' + first]:.2f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "machine": machine_info(),
                "trees": trees,
                "mb": args.mb,
                "record_kb": args.record_kb,
                **summary,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
