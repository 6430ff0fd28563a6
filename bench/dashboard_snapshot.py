"""Render the Grafana dashboard's panels from a real 3-broker cluster's /metrics into one PNG.

Why: docs/ shows what the dashboard looks like on live data, and the picture
must come from the metrics and expressions that ship, not be drawn by hand.
So this script starts ZooKeeper and three brokers (``headwater serve`` with
``--override headwater.metrics.listen``), puts a varying load on them with
confluent-kafka (producers with acks=all, one consumer group that keeps up,
one that falls behind), kills broker 3 with SIGKILL part-way and restarts
it, scrapes every broker's /metrics every few seconds, then evaluates each
panel's PromQL expressions from docs/grafana/headwater.json with
``promql_lite`` (``$__rate_interval`` = ``--rate-window``) and draws the
panels in the dashboard's grid with matplotlib.

Run: ``.venv/bin/python bench/dashboard_snapshot.py`` (about 4 minutes;
``--duration`` to change). Writes docs/images/grafana-dashboard.png and the
raw scrapes to bench/results/dashboard-scrapes.json.gz.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import signal
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from brokers import Headwater, free_port
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families
from promql_lite import Store, compile_expr

from headwater.cluster.zookeeper_server import ZooKeeperServer

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "headwater.json"
PNG = ROOT / "docs" / "images" / "grafana-dashboard.png"
SCRAPES = Path(__file__).parent / "results" / "dashboard-scrapes.json.gz"

BROKER_SETTINGS = (
    "default.replication.factor=3",
    "min.insync.replicas=2",
    "offsets.topic.replication.factor=3",
    "offsets.topic.num.partitions=6",
    "transaction.state.log.replication.factor=3",
    "zookeeper.session.timeout.ms=4000",
    "replica.lag.time.max.ms=4000",
    "group.initial.rebalance.delay.ms=0",
)


@dataclass
class Event:
    t: float
    text: str


@dataclass
class Run:
    """Scrapes (time, instance, exposition text) and what happened when."""

    started: float = field(default_factory=time.time)
    scrapes: list[tuple[float, str, str]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def mark(self, text: str) -> None:
        self.events.append(Event(time.time() - self.started, text))
        print(f"[{time.time() - self.started:6.1f} s] {text}", flush=True)


class Cluster:
    def __init__(self, root: Path) -> None:
        self.zookeeper = ZooKeeperServer(root / "zookeeper")
        self.metrics_ports = {i: free_port() for i in (1, 2, 3)}
        self.brokers: dict[int, Headwater] = {}
        self.root = root

    def start(self) -> None:
        self.zookeeper.start()
        for i, port in self.metrics_ports.items():
            self.brokers[i] = Headwater(
                self.root / f"broker-{i}",
                [
                    f"broker.id={i}",
                    f"zookeeper.connect={self.zookeeper.connect_string}",
                    f"headwater.metrics.listen=127.0.0.1:{port}",
                    *BROKER_SETTINGS,
                ],
            )
        for broker in self.brokers.values():
            broker.start(timeout=60)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def kill(self, i: int) -> None:
        proc = self.brokers[i].proc
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.brokers[i].proc = None

    def restart(self, i: int) -> None:
        self.brokers[i].start(timeout=60)

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop()
        self.zookeeper.stop()


def scrape_forever(cluster: Cluster, run: Run, interval: float, stop: threading.Event) -> None:
    while not stop.is_set():
        t = time.time() - run.started
        for i, port in cluster.metrics_ports.items():
            try:
                url = f"http://127.0.0.1:{port}/metrics"
                text = urllib.request.urlopen(url, timeout=interval).read().decode()
            except OSError:
                continue  # a broker that is down has no metrics: a gap, as in Prometheus
            run.scrapes.append((t, f"broker-{i}", text))
        stop.wait(max(0.0, interval - (time.time() - run.started - t)))


def produce_forever(bootstrap: str, run: Run, stop: threading.Event, duration: float) -> None:
    """Two topics; the orders rate swings slowly so the panels have a shape."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10, "enable.idempotence": True}
    )
    payload = os.urandom(512)
    while not stop.is_set():
        elapsed = time.time() - run.started
        swing = 0.5 + 0.5 * math.sin(2 * math.pi * elapsed / (duration / 2))
        orders = int(200 + 1800 * swing)  # records per 0.1 s tick
        for n in range(orders):
            try:
                producer.produce("orders", value=payload[: 200 + n % 300], key=str(n % 64))
            except BufferError:
                producer.poll(0.05)
        for _ in range(150):
            try:
                producer.produce("clicks", value=payload[:120], key=str(random.random()))
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        stop.wait(0.1)
    producer.flush(30)


def consume_forever(
    bootstrap: str, group: str, topic: str, stop: threading.Event, pause: float
) -> None:
    """A group member; ``pause`` seconds after each message batch makes it fall behind."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 1000,
        }
    )
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            batch = consumer.consume(500, 0.5)
            if pause and batch:
                stop.wait(pause)
    finally:
        consumer.close()


def run_cluster(args: argparse.Namespace) -> Run:
    run = Run()
    root = Path(tempfile.mkdtemp(prefix="hw-dashboard-"))
    cluster = Cluster(root)
    cluster.start()
    run.mark("3 brokers up")
    stop_scrape, stop_load = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        futures = admin.create_topics([NewTopic("orders", 6, 3), NewTopic("clicks", 3, 3)])
        for f in futures.values():
            f.result(60)
        scraper = threading.Thread(
            target=scrape_forever, args=(cluster, run, args.interval, stop_scrape), daemon=True
        )
        scraper.start()
        threads = [
            threading.Thread(
                target=produce_forever, args=(cluster.bootstrap, run, stop_load, args.duration)
            ),
            threading.Thread(
                target=consume_forever,
                args=(cluster.bootstrap, "billing", "orders", stop_load, 0.0),
            ),
            threading.Thread(
                target=consume_forever,
                args=(cluster.bootstrap, "analytics", "clicks", stop_load, 1.0),
            ),
        ]
        for th in threads:
            th.start()
        run.mark("load started")
        deadline = run.started + args.duration
        time.sleep(max(0.0, run.started + args.duration * 0.4 - time.time()))
        cluster.kill(3)
        run.mark("broker 3 killed (SIGKILL)")
        time.sleep(max(0.0, run.started + args.duration * 0.65 - time.time()))
        cluster.restart(3)
        run.mark("broker 3 restarted")
        time.sleep(max(0.0, deadline - time.time()))
    finally:
        stop_load.set()
        for th in threads:
            th.join(60)
        stop_scrape.set()
        cluster.stop()
    run.mark("stopped")
    return run


# -- evaluation and drawing -------------------------------------------------------------


def load_store(run: Run) -> tuple[Store, list[float]]:
    store = Store()
    rounds: dict[float, list[tuple[str, str]]] = {}
    for t, instance, text in run.scrapes:
        rounds.setdefault(t, []).append((instance, text))
    seen: set[str] = set()
    for t in sorted(rounds):
        answered = set()
        for instance, text in rounds[t]:
            answered.add(instance)
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    store.add(t, s.name, {**s.labels, "instance": instance}, float(s.value))
        for instance in seen - answered:
            store.mark_stale(t, "instance", instance)  # it was down: its series end
        seen |= answered
    return store, sorted(rounds)


def legend(template: str, labels: frozenset[tuple[str, str]]) -> str:
    d = dict(labels)
    out = template
    for key, value in d.items():
        out = out.replace("{{" + key + "}}", value)
    return out


#: How to show a Grafana unit: (divide by, suffix).
UNITS: dict[str, tuple[float, str]] = {
    "Bps": (1e6, "MB/s"),
    "bytes": (2**20, "MiB"),
    "ms": (1.0, "ms"),
    "s": (1e-3, "ms"),
    "percentunit": (0.01, "%"),
    "reqps": (1.0, "req/s"),
    "short": (1.0, ""),
}


def render(run: Run, rate_window: str, out: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    store, times = load_store(run)
    window_s = float(rate_window[:-1]) * {"s": 1, "m": 60}[rate_window[-1]]
    steps = [t for t in times if t >= times[0] + window_s]
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) // 8
    plt.style.use("dark_background")
    fig, axes = plt.subplots(rows, 3, figsize=(21, 4.2 * rows), squeeze=False)
    fig.patch.set_facecolor("#111217")
    for panel in panels:
        pos = panel["gridPos"]
        ax = axes[pos["y"] // 8][pos["x"] // 8]
        ax.set_facecolor("#181b1f")
        unit = panel["fieldConfig"]["defaults"].get("unit", "short")
        scale, suffix = UNITS.get(unit, (1.0, unit))
        stacked = "stacking" in panel["fieldConfig"]["defaults"].get("custom", {})
        lines: dict[str, dict[float, float]] = {}
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", rate_window)
            node = compile_expr(expr, store)
            for t in steps:
                value = node(t)
                vector = value if isinstance(value, dict) else {frozenset(): value}
                for labels, v in vector.items():
                    if math.isfinite(v):
                        lines.setdefault(legend(target["legendFormat"], labels), {})[t] = v
        if stacked and lines:
            names = list(lines)
            xs = [t / 60 for t in steps]
            ys = [[lines[n].get(t, 0.0) / scale for t in steps] for n in names]
            ax.stackplot(xs, ys, labels=names, alpha=0.6)
        else:
            xs = [t / 60 for t in steps]
            for name in sorted(lines):
                # A step without a value is a gap in the line (a broker that was down).
                ys = [lines[name].get(t, math.nan) / scale for t in steps]
                ax.plot(xs, ys, label=name, lw=1.4)
        for event in run.events:
            if "broker 3" in event.text:
                ax.axvline(event.t / 60, color="#ff7383", ls="--", lw=0.9, alpha=0.8)
        ax.set_title(panel["title"], loc="left", fontsize=12, color="#d8d9da")
        ax.set_ylabel(suffix, fontsize=9)
        ax.set_xlabel("minutes", fontsize=9)
        ax.grid(alpha=0.15)
        ax.set_ylim(bottom=0)
        if steps:
            ax.set_xlim(steps[0] / 60, steps[-1] / 60)
        ax.tick_params(labelsize=9)
        if lines:
            ax.legend(fontsize=8, loc="upper left", framealpha=0.4, ncol=2)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    for row in axes:
        for ax in row:
            if not ax.has_data() and not ax.get_title():
                ax.set_visible(False)
    events = "; ".join(f"{e.t / 60:.1f} min {e.text}" for e in run.events if "broker 3" in e.text)
    fig.suptitle(
        f"{dashboard['title']} (docs/grafana/headwater.json) on a 3-broker cluster under load; "
        f"red lines: {events}",
        fontsize=14,
        color="#d8d9da",
        x=0.01,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.975))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=72, facecolor=fig.get_facecolor())
    print(f"wrote {out}")


def save(run: Run, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "events": [{"t": e.t, "text": e.text} for e in run.events],
        "scrapes": run.scrapes,
    }
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    print(f"wrote {path}")


def load(path: Path) -> Run:
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    run = Run(started=0.0)
    run.events = [Event(e["t"], e["text"]) for e in data["events"]]
    run.scrapes = [(float(t), str(name), str(text)) for t, name, text in data["scrapes"]]
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=240.0, help="seconds of load")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between scrapes")
    parser.add_argument("--rate-window", default="30s", help="what $__rate_interval becomes")
    parser.add_argument("--out", type=Path, default=PNG)
    parser.add_argument("--scrapes", type=Path, default=SCRAPES)
    parser.add_argument(
        "--from-scrapes", action="store_true", help="redraw from --scrapes, run nothing"
    )
    args = parser.parse_args()
    if args.from_scrapes:
        run = load(args.scrapes)
    else:
        run = run_cluster(args)
        save(run, args.scrapes)
    render(run, args.rate_window, args.out)


if __name__ == "__main__":
    main()
