"""What record validation on append costs (issue 12, item 1).

For each codec, appends the same producer batches to a fresh partition log
twice: once with full validation (``validate_append``: decompress and walk
every record) and once with only the header and CRC checks the broker did
before (``validate_batches``). The difference is the price of validation on
the produce path. Batches are what real producers send: ``batch.size``
16 KiB of 100-byte values with 10-byte keys (about 130 records).

Run: ``.venv/bin/python bench/bench_validation.py [--seconds S] [--batch-bytes B]``.
Prints a table and writes bench/results/validation.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import headwater.log.log as log_module
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.log import Log
from headwater.records.batch import HEADER_SIZE, parse_batch_header, validate_batches
from headwater.records.compression import Compression, decompress
from headwater.records.record import RecordBatchBuilder
from headwater.records.validation import (
    TimestampPolicy,
    ValidatedAppend,
    prepare,
    validate_append,
)

RESULTS = Path(__file__).parent / "results" / "validation.json"


def make_batches(codec: Compression, batch_bytes: int, count: int) -> list[bytes]:
    now = int(time.time() * 1000)
    out = []
    for n in range(count):
        b = RecordBatchBuilder(codec)
        i = 0
        while b.estimated_size < batch_bytes:
            b.append(now + i, b"key-%06d" % i, os.urandom(50).hex().encode())
            i += 1
        out.append(b.build())
        del n
    return out


def header_only(payload: Any, max_bytes: int, policy: TimestampPolicy, now: int) -> ValidatedAppend:
    """The broker's checks before this issue: headers and CRC, no record walk."""
    del policy, now
    return ValidatedAppend(validate_batches(payload, max_bytes), payload, -1)


def run_appends(batches: list[bytes], seconds: float, validate: bool) -> dict[str, float]:
    log_module.validate_append = validate_append if validate else header_only  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        log = Log(Path(tmp) / "t-0", LogConfig(), FileHandleCache(16))
        now = int(time.time() * 1000)
        appended = records = 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            for raw in batches:
                result = log.append(raw, now)
                records += result.last_offset - result.base_offset + 1
                appended += len(raw)
        elapsed = time.perf_counter() - start
        log.close()
    return {
        "mb_per_s": appended / elapsed / 1e6,
        "records_per_s": records / elapsed,
    }


def validation_only(batches: list[bytes], seconds: float) -> float:
    """Microseconds per batch spent in validate_append alone."""
    now = int(time.time() * 1000)
    policy = TimestampPolicy()
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for raw in batches:
            validate_append(raw, 1 << 30, policy, now)
            n += 1
    return (time.perf_counter() - start) / n * 1e6


def decompress_only(batches: list[bytes], codec: Compression, seconds: float) -> float:
    """Microseconds per batch spent inflating it: the part any validator must pay."""
    bodies = [memoryview(raw)[HEADER_SIZE:] for raw in batches]
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for body in bodies:
            decompress(codec, body)
            n += 1
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--batch-bytes", type=int, default=16384)
    args = parser.parse_args()
    compiled = prepare()
    print(f"record walk: {'numba' if compiled else 'pure Python'}")
    rows = []
    print(
        f"{'codec':8} {'rec/batch':>9} {'validate us':>11} {'inflate us':>10} "
        f"{'rec/s CRC only':>14} {'rec/s validated':>15} {'cost':>6}"
    )
    for codec in Compression:
        batches = make_batches(codec, args.batch_bytes, 20)
        per_batch = validation_only(batches, args.seconds / 2)
        inflate = decompress_only(batches, codec, args.seconds / 4)
        plain = run_appends(batches, args.seconds, validate=False)
        checked = run_appends(batches, args.seconds, validate=True)
        per = parse_batch_header(batches[0]).record_count
        cost = 1 - checked["records_per_s"] / plain["records_per_s"]
        rows.append(
            {
                "codec": codec.name.lower(),
                "records_per_batch": per,
                "wire_bytes_per_batch": len(batches[0]),
                "validate_us_per_batch": per_batch,
                "decompress_us_per_batch": inflate,
                "record_walk": "numba" if compiled else "python",
                "crc_only": plain,
                "validated": checked,
                "throughput_cost": cost,
            }
        )
        print(
            f"{codec.name.lower():8} {per:9d} {per_batch:11.1f} {inflate:10.1f} "
            f"{plain['records_per_s'] / 1e3:13.0f}k {checked['records_per_s'] / 1e3:14.0f}k "
            f"{cost:6.0%}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "python": platform.python_version(),
                "batch_bytes": args.batch_bytes,
                "rows": rows,
                "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            },
            indent=2,
        )
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
