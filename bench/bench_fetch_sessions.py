"""Full vs incremental fetches (KIP-227) on sessions of 100 to 100,000 partitions.

What it shows: a sessionless fetch costs bytes and broker CPU in proportion
to the partitions it names, an incremental one in proportion to what
changed. For each session size, one topic with that many partitions is
created through CreateTopics; a sessionless client (session 0, epoch -1) and
a session client (full fetch at epoch 0, then incremental) fetch it on their
own connections. Before each fetch, one Produce request appends a small
record to 0%, 1% or 10% of the partitions (a random sample per cell).

Measured per fetch: request and response bytes on the wire (length prefix
included) and the broker's CPU time, bracketed around each fetch on the
broker process's CPU-time clock (the precise form of utime + stime; the
/proc/PID/stat figure is kept alongside as a cross-check). Appends are not
charged to fetches. ``max_wait_ms`` is 0 so that an idle fetch answers at
once instead of long-polling. ``measure_scale`` says why the two modes run
one after the other and on separate partitions.

Run: ``.venv/bin/python bench/bench_fetch_sessions.py`` (defaults take ~3
minutes). Prints a table, writes bench/results/fetch_sessions.json and
docs/images/fetch_sessions.png.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brokers import Headwater, ProcessCpuClock, ScratchDir, cpu_seconds, machine_info
from fetch_session_client import FETCH_VERSION, TopicFetcher, WireClient

from headwater.records.record import build_batch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "fetch_sessions.json"
PLOT = ROOT / "docs" / "images" / "fetch_sessions.png"


@dataclass
class Cell:
    """Every fetch of one mode at one (session size, change rate)."""

    partitions: int
    changed_fraction: float
    mode: str  # "full" (sessionless) or "incremental"
    request_bytes: list[int] = field(default_factory=list)
    response_bytes: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)
    proc_stat_cpu_s: float = 0.0

    def record(self, request: int, response: int, cpu_ns: int, proc_stat_s: float) -> None:
        self.request_bytes.append(request)
        self.response_bytes.append(response)
        self.cpu_ns.append(cpu_ns)
        self.proc_stat_cpu_s += proc_stat_s

    def summary(self) -> dict[str, Any]:
        n = len(self.cpu_ns)
        request = statistics.fmean(self.request_bytes)
        response = statistics.fmean(self.response_bytes)
        return {
            "partitions": self.partitions,
            "changed_fraction": self.changed_fraction,
            "changed_per_fetch": round(self.partitions * self.changed_fraction),
            "mode": self.mode,
            "fetches": n,
            "request_bytes": round(request),
            "response_bytes": round(response),
            "bytes_per_fetch": round(request + response),
            "broker_cpu_us_per_fetch": round(sum(self.cpu_ns) / n / 1e3, 1),
            "broker_cpu_us_per_fetch_median": round(statistics.median(self.cpu_ns) / 1e3, 1),
            "broker_cpu_us_per_fetch_proc_stat": round(self.proc_stat_cpu_s / n * 1e6, 1),
        }


def measure_scale(
    broker: Headwater, partitions: int, args: argparse.Namespace, rng: random.Random
) -> list[Cell]:
    topic = f"sessions-{partitions}"
    admin = WireClient(broker.bootstrap, "bench-admin")
    admin.create_topic(topic, partitions)
    clients = {
        "full": (
            WireClient(broker.bootstrap, "bench-full"),
            TopicFetcher(topic, partitions, False),
        ),
        "incremental": (
            WireClient(broker.bootstrap, "bench-session"),
            TopicFetcher(topic, partitions, True),
        ),
    }
    clock = ProcessCpuClock(broker.pid)
    batch = build_batch([(int(time.time() * 1000), None, b"x" * args.record_bytes)])

    def fetch(mode: str, cell: Cell | None, expect_with_data: int | None) -> int:
        client, fetcher = clients[mode]
        request = fetcher.next_request()
        stat0, ns0 = cpu_seconds(broker.pid), clock.ns()
        response, exchange = client.fetch(request)
        ns1, stat1 = clock.ns(), cpu_seconds(broker.pid)
        with_data = fetcher.handle_response(request, response)
        if expect_with_data is not None and with_data != expect_with_data:
            raise RuntimeError(
                f"{mode} fetch of {partitions}: {with_data} partitions with data, "
                f"expected {expect_with_data}"
            )
        if mode == "full" and len(response.partitions) != partitions:
            raise RuntimeError(f"sessionless fetch answered {len(response.partitions)} partitions")
        if cell is not None:
            cell.record(exchange.request_bytes, exchange.response_bytes, ns1 - ns0, stat1 - stat0)
        if args.release_responses:
            # Headwater keeps a connection's last response (and the segment files
            # its slices hold open) until the next response on that connection;
            # two fetches of 10,000 partitions with data would then pass the
            # 20,000-descriptor limit (EMFILE). A tiny request in between
            # releases it. Unmeasured; --keep-responses shows the failure.
            client.api_versions()
        return with_data

    def catch_up(mode: str) -> None:
        """Read what the other mode's appends left for this fetcher, a slice at a time.

        Every partition with data in a response holds an open segment file
        until the response is sent; a response of 20,000 such partitions
        would pass the broker's descriptor limit, so cap the response size.
        """
        fetcher = clients[mode][1]
        saved, fetcher.max_bytes = fetcher.max_bytes, args.catch_up_bytes
        try:
            for _ in range(1000):
                if fetch(mode, None, None) == 0:
                    break
        finally:
            fetcher.max_bytes = saved

    # The session client's epoch-0 fetch creates the session; one more round
    # each so that lazily created broker state is not charged to a cell.
    for _ in range(args.warmup):
        for mode in clients:
            fetch(mode, None, None)

    cells: list[Cell] = []
    for fraction in args.changed:
        changed = round(partitions * fraction)
        # Each mode gets its own random partitions, which receive a record
        # before each of its fetches. Own: a read scans the batches appended
        # since the last sparse index entry, so partitions shared with the
        # mode measured first would cost the second one more. Fixed: the first
        # append to a partition creates its log, a produce-path cost that
        # would otherwise dominate the run time.
        sample = rng.sample(range(partitions), 2 * changed)
        hot = {"full": sorted(sample[:changed]), "incremental": sorted(sample[changed:])}
        pair = {mode: Cell(partitions, fraction, mode) for mode in clients}
        cells += pair.values()
        # One mode after the other, not alternating: a full fetch of 100,000
        # partitions evicts the CPU caches, and an incremental fetch right after
        # it would be charged for that (measured: ~2.6x at 100,000). With appends,
        # the second mode makes as many fetches as the first: the same history.
        count = args.max_fetches
        for mode, cell in pair.items():
            catch_up(mode)
            if changed:  # unmeasured: creates the hot logs
                admin.produce(topic, hot[mode], batch)
                fetch(mode, None, changed)
            start = time.monotonic()
            for i in range(count if changed else args.max_fetches):
                elapsed = time.monotonic() - start
                # An idle cell has no history to match: both modes get the time.
                own_budget = mode == "full" or not changed
                if own_budget and i >= args.min_fetches and elapsed > args.cell_seconds:
                    break
                if elapsed > args.cell_limit_seconds:
                    break
                if changed:
                    admin.produce(topic, hot[mode], batch)
                fetch(mode, cell, changed)
            count = len(cell.cpu_ns)
        full, inc = pair["full"].summary(), pair["incremental"].summary()
        print(
            f"{partitions:>7} partitions {fraction:>5.0%} changed: "
            f"full {full['bytes_per_fetch']:>10,} B {full['broker_cpu_us_per_fetch']:>10,.0f} us"
            f" ({full['fetches']} fetches) | incremental {inc['bytes_per_fetch']:>9,} B "
            f"{inc['broker_cpu_us_per_fetch']:>9,.0f} us ({inc['fetches']} fetches)",
            flush=True,
        )
    for client, _ in clients.values():
        client.close()
    admin.close()
    return cells


def summarise(cells: list[Cell]) -> dict[str, Any]:
    rows = [c.summary() for c in cells]
    by_key = {(r["partitions"], r["changed_fraction"], r["mode"]): r for r in rows}
    ratios = []
    for (n, fraction, mode), inc in by_key.items():
        if mode != "incremental":
            continue
        full = by_key[(n, fraction, "full")]
        ratios.append(
            {
                "partitions": n,
                "changed_fraction": fraction,
                "bytes_incremental_vs_full": round(
                    inc["bytes_per_fetch"] / full["bytes_per_fetch"], 5
                ),
                "cpu_incremental_vs_full": round(
                    inc["broker_cpu_us_per_fetch"] / full["broker_cpu_us_per_fetch"], 4
                ),
            }
        )
    out: dict[str, Any] = {"cells": rows, "ratios": ratios}
    idle = {r["partitions"]: r for r in rows if r["changed_fraction"] == 0}
    idle_inc = {n: r for n, r in idle.items() if r["mode"] == "incremental"}
    if idle_inc:
        small, large = min(idle_inc), max(idle_inc)
        bytes_ratio = (
            idle_inc[large]["bytes_per_fetch"] / by_key[(large, 0, "full")]["bytes_per_fetch"]
        )
        cpu_ratio = (
            idle_inc[large]["broker_cpu_us_per_fetch"] / idle_inc[small]["broker_cpu_us_per_fetch"]
        )
        out["targets"] = {
            "idle_incremental_bytes_vs_full_at_largest": round(bytes_ratio, 5),
            "idle_incremental_bytes_le_1pct_of_full": bytes_ratio <= 0.01,
            "idle_incremental_cpu_largest_vs_smallest": round(cpu_ratio, 2),
            "idle_incremental_cpu_le_2x": cpu_ratio <= 2.0,
            "largest": large,
            "smallest": small,
        }
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["cells"]
    fractions = sorted({r["changed_fraction"] for r in rows})
    colours = dict(zip(fractions, ["tab:blue", "tab:orange", "tab:green", "tab:red"], strict=False))
    fig, (ax_bytes, ax_cpu) = plt.subplots(1, 2, figsize=(12, 4.8))
    for fraction in fractions:
        for mode, style in (("full", "-"), ("incremental", "--")):
            line = sorted(
                (r for r in rows if r["changed_fraction"] == fraction and r["mode"] == mode),
                key=lambda r: r["partitions"],
            )
            xs = [r["partitions"] for r in line]
            label = f"{mode}, {fraction:.0%} changed"
            kw = {"color": colours[fraction], "linestyle": style, "marker": "o", "label": label}
            ax_bytes.plot(xs, [r["bytes_per_fetch"] for r in line], **kw)
            ax_cpu.plot(xs, [r["broker_cpu_us_per_fetch"] for r in line], **kw)
    for ax, title, unit in (
        (ax_bytes, "Request + response bytes per fetch", "bytes"),
        (ax_cpu, "Broker CPU per fetch", "microseconds"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("partitions in the session")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    ax_cpu.legend(fontsize=8)
    machine = result["machine"]
    fig.suptitle(
        f"Headwater fetch sessions (Fetch v{FETCH_VERSION}): sessionless full vs incremental"
        f" - {machine['nproc']} x {machine['cpu_model']}, {machine['date']}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_report(result: dict[str, Any]) -> None:
    head = (
        f"{'partitions':>10} {'changed':>7} {'mode':<12} {'req B':>10} {'resp B':>10} "
        f"{'CPU us/fetch':>13} {'fetches':>7}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for r in result["cells"]:
        print(
            f"{r['partitions']:>10,} {r['changed_fraction']:>7.0%} {r['mode']:<12} "
            f"{r['request_bytes']:>10,} {r['response_bytes']:>10,} "
            f"{r['broker_cpu_us_per_fetch']:>13,.1f} {r['fetches']:>7}"
        )
    if "targets" in result:
        print("\ntargets:", ", ".join(f"{k}={v}" for k, v in result["targets"].items()))


def parse_list(text: str, kind: type[int] | type[float]) -> list[Any]:
    return [kind(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="100,1000,10000,100000", help="session sizes")
    parser.add_argument("--changed", default="0,0.01,0.1", help="fractions changed per fetch")
    parser.add_argument("--max-fetches", type=int, default=2000, help="per cell")
    parser.add_argument("--min-fetches", type=int, default=5, help="per cell, time permitting")
    parser.add_argument("--cell-seconds", type=float, default=4.0, help="soft time per cell")
    parser.add_argument("--cell-limit-seconds", type=float, default=60.0, help="hard limit")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured fetches per scale")
    parser.add_argument("--record-bytes", type=int, default=16, help="value size of appends")
    parser.add_argument(
        "--catch-up-bytes", type=int, default=512 << 10, help="max_bytes of catch-up fetches"
    )
    parser.add_argument(
        "--keep-responses",
        dest="release_responses",
        action="store_false",
        help="no ApiVersions after each fetch (reproduces EMFILE at 100k x 10%%)",
    )
    parser.add_argument("--seed", type=int, default=227)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--plot", type=Path, default=PLOT)
    args = parser.parse_args()
    args.changed = parse_list(args.changed, float)
    rng = random.Random(args.seed)

    cells: list[Cell] = []
    with (
        ScratchDir("hw-sessions-") as scratch,
        Headwater(scratch / "data") as broker,
    ):
        try:
            for n in parse_list(args.partitions, int):
                cells += measure_scale(broker, n, args, rng)
        except (ConnectionError, RuntimeError):
            print("broker log (tail):\n" + broker.log_tail())
            raise
    result: dict[str, Any] = {
        "machine": machine_info(),
        "config": {
            "fetch_version": FETCH_VERSION,
            "max_wait_ms": 0,
            "record_value_bytes": args.record_bytes,
            "cell_seconds": args.cell_seconds,
            "max_fetches": args.max_fetches,
            "seed": args.seed,
            "headwater": "default config (asyncio event loop, 1000 session slots)",
            "api_versions_after_each_fetch": args.release_responses,
            "schedule": "per cell: all full fetches, then all incremental ones; the same "
            "random sample of partitions gets one record before each fetch",
        },
        **summarise(cells),
    }
    print_report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.plot)
    print(f"\nwrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main()
