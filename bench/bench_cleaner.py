"""Log cleaner speed, memory and event-loop stalls (issue 16).

1. **Throughput and memory.** Writes ``--size`` bytes (default 1 GB) of 1 KB
   records whose keys repeat (``--distinct`` of them, default 1% of the
   records) into a compacted partition log through ``Log.append``, in
   16-record batches, then cleans it in a fresh process with one
   :class:`~headwater.log.cleaner.Cleaner` (the dedupe buffer of a default
   broker, 128 MiB): MB of log cleaned per second (input size / wall time of
   map pass + clean pass + swap), and the process's peak RSS growth during
   the clean (``VmHWM`` after ``clear_refs``).
2. **Stalls.** Puts the same log under a real broker (``headwater serve``)
   as a ``delete`` topic and switches it to ``compact`` live
   (IncrementalAlterConfigs); the broker's cleaner then cleans it, while a pinger process sends
   ApiVersions every 10 ms on its own connection (the method of
   bench_stalls.py): the worst round trip is the longest any client waited
   for the cleaner. Beside it, the same pings on the idle broker for
   ``--idle-seconds`` just before (what the machine alone does), the broker's
   own ``headwater_event_loop_lag_max_seconds`` in both windows, and the
   clean's longest step on the event loop (from its log line).

Run: ``.venv/bin/python bench/bench_cleaner.py [--size 1G] [--cases throughput,stall]``
(``--size 200M`` for a quick run). Prints the figures and writes
bench/results/cleaner.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stalls import pinger
from brokers import Headwater, ScratchDir, free_port, machine_info

from headwater.log.cleaner import Cleaner
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.log import Log
from headwater.records import RecordBatchBuilder

RESULTS = Path(__file__).parent / "results" / "cleaner.json"
RECORD_BYTES = 1024
BATCH_RECORDS = 16
SEGMENT_BYTES = 128 << 20
DEDUPE_BUFFER = 128 << 20


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def log_config() -> LogConfig:
    return LogConfig(cleanup_policy=("compact",), segment_bytes=SEGMENT_BYTES)


def write_log(directory: Path, size: int, distinct: int) -> tuple[int, int]:
    """The compacted log to clean: (records, bytes). The last batch goes to an active segment."""
    log = Log(directory, log_config(), FileHandleCache(64))
    value = os.urandom(RECORD_BYTES - 24)
    now = int(time.time() * 1000)
    records = 0
    i = 0
    while log.size_bytes < size:
        builder = RecordBatchBuilder()
        for _ in range(BATCH_RECORDS):
            builder.append(now, b"key-%08d" % (i % distinct), value)
            i += 1
        log.append(builder.build(), now)
        records += BATCH_RECORDS
    log._roll(now)  # the active segment is never cleaned
    builder = RecordBatchBuilder()
    builder.append(now, b"tail", b"t")
    log.append(builder.build(), now)
    total = log.size_bytes
    log.close()
    return records, total


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def clean_in_child(directory: str, out: Any) -> None:
    """One clean of the whole log in this (fresh) process: seconds, bytes, peak RSS growth."""
    from headwater.log.offset_map import kernels

    kernels()  # compiled (or loaded from numba's cache) before the clock starts
    log = Log(Path(directory), log_config(), FileHandleCache(64))
    state = log.cleanable_state(int(time.time() * 1000))
    assert state is not None
    before = _rss_kb("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
    except OSError:
        pass
    start = time.perf_counter()
    cleaner = Cleaner(DEDUPE_BUFFER)
    pending = log.begin_clean(int(time.time() * 1000), state)
    result = cleaner.clean(pending.task)
    assert log.finish_clean(pending, result)
    seconds = time.perf_counter() - start
    peak = _rss_kb("VmHWM")
    out.send(
        {
            "seconds": seconds,
            "bytes_read": result.bytes_read,
            "bytes_written": result.bytes_written,
            "records_read": result.records_read,
            "records_kept": result.records_kept,
            "peak_rss_growth_mb": (peak - before) / 1024,
            "offset_map_mb": cleaner.offset_map.memory_bytes / 2**20,
        }
    )


def throughput(size: int, distinct: int | None) -> dict[str, Any]:
    with ScratchDir("cleaner") as data:
        directory = data / "t-0"
        per_key = distinct or max(1, size // RECORD_BYTES // 100)
        t0 = time.perf_counter()
        records, total = write_log(directory, size, per_key)
        print(f"wrote {total / 1e6:,.0f} MB, {records:,} records, {per_key:,} keys "
              f"in {time.perf_counter() - t0:.1f} s")  # fmt: skip
        parent, child = mp.Pipe()
        proc = mp.get_context("spawn").Process(target=clean_in_child, args=(str(directory), child))
        proc.start()
        row: dict[str, Any] = parent.recv()
        proc.join()
        row.update(log_bytes=total, records=records, keys=per_key)
        row["mb_per_s"] = total / 1e6 / row["seconds"]
        print(
            f"cleaned {total / 1e6:,.0f} MB in {row['seconds']:.2f} s: "
            f"{row['mb_per_s']:,.0f} MB/s; kept {row['records_kept']:,} of "
            f"{row['records_read']:,} records ({row['bytes_written'] / 1e6:,.1f} MB); "
            f"peak RSS growth {row['peak_rss_growth_mb']:,.0f} MB "
            f"(offset map {row['offset_map_mb']:,.0f} MB)"
        )
        return row


def stall(size: int, distinct: int | None, idle_seconds: float) -> dict[str, Any]:
    """The topic is written as ``delete`` and switched to ``compact`` live, pinger running."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
    )

    with ScratchDir("cleaner-stall") as data:
        broker = Headwater(data, ["num.partitions=1"]).start(timeout=60)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = NewTopic("compacted", 1, 1, config={"cleanup.policy": "delete"})
        admin.create_topics([topic])["compacted"].result(30)
        broker.stop()
        per_key = distinct or max(1, size // RECORD_BYTES // 100)
        write_log(data / "compacted-0", size, per_key)
        metrics_port = free_port()
        broker = Headwater(
            data,
            [
                "log.cleaner.backoff.ms=200",
                f"headwater.metrics.listen=127.0.0.1:{metrics_port}",
            ],
        )
        parent, child = mp.Pipe()
        broker.start(timeout=60)
        try:
            ping = mp.Process(target=pinger, args=(broker.port, child), daemon=True)
            ping.start()
            time.sleep(1.0)
            parent.send("report")
            parent.recv()
            loop_lag_max(metrics_port)  # resets the broker's worst-since-last-scrape
            time.sleep(idle_seconds)  # what this machine's load alone does to a ping
            parent.send("report")
            idle = sorted(parent.recv())
            idle_lag = loop_lag_max(metrics_port)
            start = time.perf_counter()
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            resource = ConfigResource(ConfigResource.Type.TOPIC, "compacted")
            resource.add_incremental_config(
                ConfigEntry(
                    "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET
                )
            )
            admin.incremental_alter_configs([resource])[resource].result(30)
            deadline = start + 600
            while not any("log cleaner cleaned compacted-0" in line for line in broker.lines):
                if time.perf_counter() > deadline:
                    raise RuntimeError("the broker's cleaner did not clean:\n" + broker.log_tail())
                time.sleep(0.05)
            took = time.perf_counter() - start
            time.sleep(0.3)
            parent.send("report")
            samples = sorted(parent.recv())
            clean_lag = loop_lag_max(metrics_port)
            parent.send("stop")
            ping.join(5)
        finally:
            broker.stop()
        line = next(line for line in broker.lines if "log cleaner cleaned compacted-0" in line)
        worst = samples[-1] if samples else float("nan")
        p99 = samples[int(len(samples) * 0.99)] if samples else float("nan")
        idle_worst = idle[-1] if idle else float("nan")
        idle_p99 = idle[int(len(idle) * 0.99)] if idle else float("nan")
        match = re.search(r"longest step on the event loop ([\d.]+) ms", line)
        on_loop = float(match.group(1)) if match else float("nan")
        print(f"idle broker, {idle_seconds:.0f} s: {len(idle)} pings, worst {idle_worst:.1f} ms, "
              f"p99 {idle_p99:.1f} ms, event-loop lag max {idle_lag * 1000:.1f} ms")  # fmt: skip
        print(f"broker cleaning {size / 1e6:,.0f} MB: {took:.1f} s, {len(samples)} pings, "
              f"worst {worst:.1f} ms, p99 {p99:.1f} ms, event-loop lag max "
              f"{clean_lag * 1000:.1f} ms, the clean's longest step on the loop "
              f"{on_loop:.1f} ms")  # fmt: skip
        print("  " + line.split(" - ")[-1])
        return {"seconds": took, "pings": len(samples), "worst_ms": worst, "p99_ms": p99,
                "loop_lag_max_ms": clean_lag * 1000, "on_loop_ms": on_loop,
                "idle_seconds": idle_seconds, "idle_pings": len(idle),
                "idle_worst_ms": idle_worst, "idle_p99_ms": idle_p99,
                "idle_loop_lag_max_ms": idle_lag * 1000, "log_line": line}  # fmt: skip


def loop_lag_max(port: int) -> float:
    """The broker's ``headwater_event_loop_lag_max_seconds``: its worst since the last scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for row in text.splitlines():
        if row.startswith("headwater_event_loop_lag_max_seconds "):
            return float(row.split()[1])
    raise RuntimeError("the broker does not report headwater_event_loop_lag_max_seconds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=1 << 30)
    parser.add_argument("--distinct", type=int, default=None, help="default: 1%% of records")
    parser.add_argument("--cases", default="throughput,stall")
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="the idle baseline before the clean"
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    out: dict[str, Any] = {"machine": machine_info(), "size": args.size}
    if "throughput" in cases:
        out["throughput"] = throughput(args.size, args.distinct)
    if "stall" in cases:
        out["stall"] = stall(args.size, args.distinct, args.idle_seconds)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
