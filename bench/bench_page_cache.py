"""What a GB written into the page cache costs on this machine, by how fresh the memory is.

Issue 21 found a follower's kernel time far above the copy floor
(``bench_copy_floor.py``). perf on a full-speed RF 3 run put most of it in
``pwrite`` (``copy_folio_from_iter_atomic``): the page cache pages a broker
writes into for the first time. On a VM whose balloon reports free memory to
the host (``VIRTIO_BALLOON_F_REPORTING``; the guest's ``page_reporting``
module), freed pages are handed back within about a second, and the next
first touch of each one faults to the host. A broker writes every byte into
new pages, and an RF 3 cluster writes three copies.

One process, 1 MB ``pwrite``s of a GB into a new file, in cases:

* **recycled**: right after another GB was written and its file deleted
  (the kernel reuses the pages it just freed);
* **after a gap**: the same, but ``--gaps`` seconds after the delete;
* **overwrite**: the same file again, its pages still cached (the copy alone).

Run: ``.venv/bin/python bench/bench_page_cache.py`` (``--mb 1000 --rounds 3
--gaps 0.5 1 2 4 8``). Prints CPU-s per GB, median of the rounds, and the
guest's page-reporting settings; writes bench/results/page_cache.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from brokers import machine_info

RESULTS = Path(__file__).parent / "results" / "page_cache.json"
CHUNK = 1 << 20
REPORTING = Path("/sys/module/page_reporting/parameters")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def write_file(path: Path, chunks: int, data: bytes) -> float:
    """CPU seconds to ``pwrite`` ``chunks`` MB into ``path`` (created or overwritten)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        started = _cpu()
        for i in range(chunks):
            os.pwrite(fd, data, i * CHUNK)
        return _cpu() - started
    finally:
        os.close(fd)


def page_reporting_settings() -> dict[str, str]:
    """The guest's free-page-reporting parameters, when the module is there."""
    if not REPORTING.is_dir():
        return {}
    return {p.name: p.read_text().strip() for p in sorted(REPORTING.iterdir()) if p.is_file()}


def one_round(directory: Path, chunks: int, gaps: list[float], data: bytes) -> dict[str, float]:
    gb = chunks * CHUNK / 1e9
    out: dict[str, float] = {}
    scratch, target = directory / "scratch.bin", directory / "target.bin"
    for gap in [0.0, *gaps]:
        write_file(scratch, chunks, data)
        scratch.unlink()  # a GB of pages freed just now
        time.sleep(gap)
        name = "recycled" if gap == 0.0 else f"after {gap:g} s"
        out[name] = write_file(target, chunks, data) / gb
        if gap == 0.0:
            out["overwrite"] = write_file(target, chunks, data) / gb
        target.unlink()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1000, help="MB written per case")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gaps", type=float, nargs="*", default=[0.5, 1, 2, 4, 8])
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    data = os.urandom(CHUNK)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="hw-page-cache-", dir="/var/tmp") as d:
        for _ in range(args.rounds):
            rounds.append(one_round(Path(d), args.mb, sorted(args.gaps), data))
    cases = list(rounds[0])
    medians = {c: statistics.median(r[c] for r in rounds) for c in cases}
    results: dict[str, Any] = {
        "machine": machine_info(),
        "mb_per_case": args.mb,
        "rounds": args.rounds,
        "page_reporting": page_reporting_settings(),
        "cpu_s_per_gb": {c: round(v, 3) for c, v in medians.items()},
        "all_rounds": [{c: round(r[c], 3) for c in cases} for r in rounds],
    }
    print(f"pwrite of {args.mb} MB in 1 MB pieces, CPU-s per GB, median of {args.rounds} rounds:")
    for case in cases:
        per_round = ", ".join(f"{r[case]:.2f}" for r in rounds)
        print(f"  {case:<14}{medians[case]:>7.3f}   ({per_round})")
    print(f"page reporting: {results['page_reporting'] or 'not present'}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
