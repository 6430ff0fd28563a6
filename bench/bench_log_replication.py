"""Times the log layer's replication paths in-process (no broker, no sockets).

Why these: a consumer fetch on a replicated log reads through the high-watermark
cap, which must cost next to nothing over today's read; the cap's position is
recomputed on every HW move, which happens once per follower fetch that makes
progress; a follower writes every record through ``append_as_follower``; and
the leader-epoch cache is loaded (or rebuilt from batch headers) on the first
use of every partition after a restart.

Run: ``.venv/bin/python bench/bench_log_replication.py [--batches N] [--repeat R]``.
Prints a table and writes bench/results/log_replication.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE
from headwater.log.log import Log
from headwater.records import RecordBatchBuilder, iter_batch_headers

RESULTS = Path(__file__).parent / "results" / "log_replication.json"
NOW = 1_700_000_000_000


def one_batch(records: int, value_size: int) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(records):
        builder.append(NOW + i, b"key-%d" % i, b"v" * value_size)
    return builder.build()


def best_of(repeat: int, fn: Callable[[], int]) -> float:
    """Median microseconds per operation over ``repeat`` rounds (fn returns its op count)."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        ops = fn()
        samples.append((time.perf_counter() - start) * 1e6 / ops)
    return statistics.median(samples)


def bench_reads(root: Path, batches: int, repeat: int) -> dict[str, float]:
    log = Log(root / "reads-0", LogConfig(segment_bytes=8 << 20), FileHandleCache(64))
    payload = one_batch(1, 100)
    for _ in range(batches):
        log.append(payload, NOW)
    step = max(1, batches // 5000)
    offsets = range(0, batches, step)

    def read_all(isolation: Isolation) -> Callable[[], int]:
        def run() -> int:
            for offset in offsets:
                log.read(offset, 1 << 16, isolation, True)
            return len(offsets)

        return run

    out = {"read_not_replicated_us": best_of(repeat, read_all(Isolation.HIGH_WATERMARK))}
    log.enable_replication(batches)
    out["read_replicated_hw_at_end_us"] = best_of(repeat, read_all(Isolation.HIGH_WATERMARK))
    log.enable_replication(batches // 2)
    out["read_replicated_hw_half_us"] = best_of(repeat, read_all(Isolation.HIGH_WATERMARK))
    out["read_replicated_log_end_us"] = best_of(repeat, read_all(Isolation.LOG_END))

    def move_then_read() -> int:
        log.enable_replication(batches // 2)
        moves = 2000
        for i in range(moves):
            log.update_high_watermark(batches // 2 + i + 1)
            log.read(batches // 2, 1 << 16, Isolation.HIGH_WATERMARK, True)
        return moves

    out["hw_move_plus_read_us"] = best_of(repeat, move_then_read)
    log.close()
    return out


def bench_appends(root: Path, batches: int, repeat: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for records, label in ((1, "1x100B"), (100, "100x100B")):
        payload = one_batch(records, 100)
        count = max(100, batches // records)
        leader = Log(root / f"leader-{label}", LogConfig(), FileHandleCache(64))

        def lead(leader: Log = leader, payload: bytes = payload, count: int = count) -> int:
            for _ in range(count):
                leader.append(payload, NOW)
            return count

        out[f"leader_append_{label}_us"] = best_of(repeat, lead)
        # The follower replays exactly what the leader wrote, in fetch-sized chunks.
        chunks = []
        offset = 0
        while offset < leader.log_end_offset:
            result = leader.read(offset, 1 << 20, Isolation.LOG_END, True)
            assert result.records is not None
            data = result.records.read()
            headers = list(iter_batch_headers(data))
            chunks.append(data[: headers[-1].position + headers[-1].size])
            offset = headers[-1].next_offset
        written = leader.log_end_offset // records
        rounds = []
        for i in range(repeat):
            follower = Log(root / f"follower-{label}-{i}", LogConfig(), FileHandleCache(64))
            start = time.perf_counter()
            for chunk in chunks:
                follower.append_as_follower(chunk, NOW)
            rounds.append((time.perf_counter() - start) * 1e6 / written)
            follower.delete()
        out[f"follower_append_{label}_per_batch_us"] = statistics.median(rounds)
        leader.delete()
    return out


def bench_epoch_load(root: Path, segments: int, repeat: int) -> dict[str, float]:
    out: dict[str, float] = {}
    payload = one_batch(10, 100)
    for label, change_every in (("one_epoch", 0), ("epoch_per_segment", 1)):
        path = root / f"epochs-{label}"
        log = Log(path, LogConfig(segment_bytes=64 << 10), FileHandleCache(64))
        epoch = seen = 0
        while len(log.segments) < segments:
            if change_every and len(log.segments) != seen:  # a new epoch in each segment
                seen = len(log.segments)
                epoch += 1
                log.partition_leader_epoch = epoch
            log.append(payload, NOW)
        log.close()
        size = sum(f.stat().st_size for f in path.iterdir() if f.suffix == ".log")

        def load(rebuild: bool, path: Path = path) -> int:
            if rebuild:
                (path / LEADER_EPOCH_CHECKPOINT_FILE).unlink(missing_ok=True)
            fresh = Log(path, LogConfig(segment_bytes=64 << 10), FileHandleCache(64))
            fresh.latest_epoch  # noqa: B018 - loads the cache
            fresh.close()
            return 1

        out[f"epoch_cache_from_checkpoint_{label}_us"] = best_of(repeat, lambda: load(False))
        out[f"epoch_cache_rebuilt_{label}_us"] = best_of(repeat, lambda: load(True))
        out[f"epoch_cache_log_mb_{label}"] = round(size / 1e6, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--segments", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": os.getloadavg()[0],
        "machine": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "batches": args.batches,
        "segments": args.segments,
        "repeat": args.repeat,
    }
    with tempfile.TemporaryDirectory(prefix="hw-bench-") as tmp:
        root = Path(tmp)
        results.update(bench_reads(root, args.batches, args.repeat))
        results.update(bench_appends(root, args.batches, args.repeat))
        results.update(bench_epoch_load(root, args.segments, args.repeat))
    for key, value in results.items():
        print(f"{key:48} {value:>10.1f}" if isinstance(value, float) else f"{key:48} {value}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
