"""How long a new group coordinator needs to load an offsets partition.

Why it matters: after a coordinator fails over, the groups of its partitions
get COORDINATOR_LOAD_IN_PROGRESS until the new leader has replayed them, so
the replay rate bounds how soon consumers can commit again. The replay runs on
the broker's event loop in steps, so the benchmark also measures the longest
stall the loop sees while a partition loads (a ticker task records the largest
gap between its 1 ms sleeps).

The partition is written the way the coordinator writes it: one batch per
OffsetCommit (`--partitions` offsets per commit) through `PartitionStateLog`
into a real `Log`, then loaded by `GroupService.load_partition`.

Run: ``.venv/bin/python bench/bench_group_load.py`` (defaults take well under
a minute). Prints the figures and writes bench/results/group_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from brokers import machine_info

from headwater.coordinator.partition_state_log import PartitionStateLog
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.group.offsets import OffsetCommitEntry
from headwater.group.service import GroupService
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.log import Log

RESULTS = Path(__file__).parent / "results" / "group_load.json"


def write_partition(log: Log, groups: int, commits: int, partitions: int) -> float:
    """Commit `commits` times per group; returns the seconds the writes took."""
    coordinator = GroupCoordinator(
        PartitionStateLog(log), lambda topic, partition: True, now_ms=0, config=GroupConfig()
    )
    start = time.perf_counter()
    for round_ in range(commits):
        for g in range(groups):
            coordinator.commit_offsets(
                0,
                group_id=f"group-{g}",
                generation_id=-1,
                member_id="",
                entries=[
                    OffsetCommitEntry("orders", p, round_ * 100 + p) for p in range(partitions)
                ],
                timestamp_ms=0,
            ).result()
    return time.perf_counter() - start


async def load_partition(log: Log) -> tuple[float, float, float]:
    """Load through the service: (seconds, CPU seconds, longest event-loop stall in seconds)."""
    service = GroupService.create(
        lambda topic, partition: True, num_partitions=1, node_id=0, host="h", port=1
    )
    stall = 0.0
    done = False

    async def ticker() -> None:
        nonlocal stall
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            stall = max(stall, now - last - 0.001)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    start, cpu_start = time.perf_counter(), time.process_time()
    await service.load_partition(0, PartitionStateLog(log))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    done = True
    await task
    assert service.shards.is_loaded(0)
    return seconds, cpu, stall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--commits", type=int, default=100, help="commits per group")
    parser.add_argument("--partitions", type=int, default=10, help="offsets per commit")
    args = parser.parse_args()
    records = args.groups * args.commits * args.partitions
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "__consumer_offsets-0"
        log = Log(path, LogConfig(), FileHandleCache(16))
        write_s = write_partition(log, args.groups, args.commits, args.partitions)
        size = sum(f.stat().st_size for f in path.iterdir())
        log.close()
        # Opened as after a clean stop: recovery after a crash is the log's cost, paid
        # when the broker opens its logs, not the coordinator's.
        log = Log(path, LogConfig(), FileHandleCache(16))
        log.read(0, 1, Isolation.LOG_END, True)  # the log's lazy open, also not ours
        load_s, cpu_s, stall_s = asyncio.run(load_partition(log))
        log.close()
    result: dict[str, Any] = {
        "machine": machine_info(),
        "groups": args.groups,
        "commits": args.groups * args.commits,
        "records": records,
        "partition_bytes": size,
        "commit_write_per_s": args.groups * args.commits / write_s,
        "load_seconds": load_s,
        "load_records_per_s": records / load_s,
        "load_cpu_seconds": cpu_s,
        "load_records_per_cpu_s": records / cpu_s,
        "load_max_loop_stall_ms": stall_s * 1000,
    }
    print(
        f"{result['commits']} commits ({records} offset records, {size / 1e6:.1f} MB): "
        f"written at {result['commit_write_per_s']:.0f} commits/s (single broker, fsync policy "
        f"default); loaded in {load_s:.2f} s = {result['load_records_per_s']:.0f} records/s "
        f"({cpu_s:.2f} CPU s = {result['load_records_per_cpu_s']:.0f} records per CPU s); "
        f"longest event-loop stall during the load {result['load_max_loop_stall_ms']:.1f} ms"
    )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
