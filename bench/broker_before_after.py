"""Before/after table from two ``bench_broker.py --compare-tree`` runs in swapped order.

Why: in ``bench_broker.py`` every round visits the brokers in a fixed order
(the default broker first, the compare tree last), and on this machine the
position alone moves produce throughput by 25-40% (the default broker and its
zero-copy-off twin run the same code: that pair is an A/A control). So the
before/after comparison is run twice, once with each checkout as the default
broker, and each ratio is the geometric mean of the two orders, which
cancels a position effect that multiplies both alike.

How sure: a permutation test on the pooled rounds (18 per checkout, half in
each position) gives the chance that a median ratio at least this far from 1
comes from shuffling the same rounds between the two labels.

Broker CPU per GB is pooled over all rounds (total CPU-seconds over total
bytes): /proc counts CPU in 10 ms ticks, coarse for one round's 50-200 MB.

Run: ``.venv/bin/python bench/broker_before_after.py RUN_AFTER_FIRST.json
RUN_BEFORE_FIRST.json`` (each written by ``bench_broker.py --compare-tree``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

GB = 1e9


def pooled_cpu_per_gb(rounds: list[dict[str, Any]]) -> float:
    return float(sum(r["broker_cpu_s"] for r in rounds) / (sum(r["bytes"] for r in rounds) / GB))


def mb_per_s(rounds: list[dict[str, Any]]) -> list[float]:
    return [r["bytes"] / r["seconds"] / 1e6 for r in rounds]


def permutation_p(after: list[float], before: list[float], trials: int = 5000) -> float:
    """Two-sided: how often a random relabelling moves log(median ratio) as far."""

    def distance(a: list[float], b: list[float]) -> float:
        return abs(math.log(statistics.median(a) / statistics.median(b)))

    observed = distance(after, before)
    pool = after + before
    rng = random.Random(18)
    hits = 0
    for _ in range(trials):
        rng.shuffle(pool)
        if distance(pool[: len(after)], pool[len(after) :]) >= observed - 1e-12:
            hits += 1
    return hits / trials


def tree_key(results: dict[str, Any]) -> str:
    return next(k for k in results if k.startswith("headwater_tree_"))


def combine(after_first: dict[str, Any], before_first: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per workload and phase: medians per order, ratios, pooled CPU."""
    a1, b2 = after_first["results"], before_first["results"]
    sides = {
        # (run, key of the after broker, key of the before broker)
        "after_first": (a1, "headwater", tree_key(a1)),
        "before_first": (b2, tree_key(b2), "headwater"),
    }
    rows = []
    for label in a1["headwater"]:
        for phase in ("produce", "consume"):
            row: dict[str, Any] = {"workload": label, "phase": phase}
            ratios = []
            cpu: dict[str, list[dict[str, Any]]] = {"after": [], "before": []}
            for order, (run, after_key, before_key) in sides.items():
                after = run[after_key][label][phase]["rounds"]
                before = run[before_key][label][phase]["rounds"]
                twin = run["headwater_zero_copy_off"][label][phase]["rounds"]
                a, b = statistics.median(mb_per_s(after)), statistics.median(mb_per_s(before))
                row[order] = {
                    "after_mb_per_s": round(a, 1),
                    "before_mb_per_s": round(b, 1),
                    "after_over_before": round(a / b, 2),
                    # A/A: the same code in positions 1 and 2 (produce only; zero
                    # copy changes consume).
                    "default_over_zero_copy_off_twin": round(
                        statistics.median(mb_per_s(run["headwater"][label][phase]["rounds"]))
                        / statistics.median(mb_per_s(twin)),
                        2,
                    ),
                }
                ratios.append(a / b)
                cpu["after"] += after
                cpu["before"] += before
            row["after_over_before_geomean"] = round(math.sqrt(ratios[0] * ratios[1]), 2)
            after_all = mb_per_s(cpu["after"])
            before_all = mb_per_s(cpu["before"])
            row["after_mb_per_s_all"] = round(statistics.median(after_all), 1)
            row["before_mb_per_s_all"] = round(statistics.median(before_all), 1)
            row["permutation_p"] = round(permutation_p(after_all, before_all), 3)
            row["cpu_s_per_gb_after"] = round(pooled_cpu_per_gb(cpu["after"]), 3)
            row["cpu_s_per_gb_before"] = round(pooled_cpu_per_gb(cpu["before"]), 3)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("after_first", type=Path, help="run with the after tree as default")
    parser.add_argument("before_first", type=Path, help="run with the before tree as default")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = combine(
        json.loads(args.after_first.read_text()), json.loads(args.before_first.read_text())
    )
    head = (
        f"{'size':>5} {'phase':<8} {'after-first a/b':>16} {'before-first a/b':>17} "
        f"{'geomean':>8} {'A/A 1st/2nd':>12} {'MB/s after':>11} {'before':>7} "
        f"{'CPU-s/GB after':>15} {'before':>7} {'p':>6}"
    )
    print(head + "\n" + "-" * len(head))
    for r in rows:
        cells = []
        for order in ("after_first", "before_first"):
            o = r[order]
            cells.append(
                f"{o['after_mb_per_s']:6.0f}/{o['before_mb_per_s']:<4.0f}"
                f"={o['after_over_before']:4.2f}"
            )
        twins = " ".join(
            f"{r[o]['default_over_zero_copy_off_twin']:5.2f}"
            for o in ("after_first", "before_first")
        )
        print(
            f"{r['workload']:>5} {r['phase']:<8} {cells[0]:>16} {cells[1]:>17} "
            f"{r['after_over_before_geomean']:8.2f} {twins:>12} "
            f"{r['after_mb_per_s_all']:11.1f} {r['before_mb_per_s_all']:7.1f} "
            f"{r['cpu_s_per_gb_after']:15.3f} {r['cpu_s_per_gb_before']:7.3f} "
            f"{r['permutation_p']:6.3f}"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
