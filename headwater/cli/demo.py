"""``headwater demo``: the page-view pipeline (``headwater.demo``) behind one command."""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from headwater.demo import EVENTS_TOPIC, DemoSettings, EmbeddedBroker, run_demo

log = logging.getLogger("headwater.demo")

DESCRIPTION = "Page views through Headwater into a Spark Structured Streaming job."


@contextlib.contextmanager
def _broker_for(args: argparse.Namespace) -> Iterator[str]:
    if args.bootstrap:
        yield args.bootstrap
        return
    if args.brokers > 1:
        yield from _local_cluster(args)
        return
    if not args.master.startswith("local"):
        log.warning(
            "the embedded broker listens on 127.0.0.1, which executors of %s cannot reach; "
            "run `headwater serve --listen HOST:PORT` where they can and pass --bootstrap",
            args.master,
        )
    broker = EmbeddedBroker(Path(args.data_dir), listen=f"127.0.0.1:{args.port}").start()
    print(f"embedded broker on {broker.listen}, data in {args.data_dir}", flush=True)
    try:
        yield broker.listen
    finally:
        broker.stop()


def _local_cluster(args: argparse.Namespace) -> Iterator[str]:
    """ZooKeeper and ``--brokers`` brokers; the demo's topics get one replica per broker."""
    from headwater.cluster.local_cluster import LocalCluster

    n = args.brokers
    cluster = LocalCluster(
        Path(args.data_dir),
        n,
        base_port=args.port,
        overrides=[f"default.replication.factor={n}", f"min.insync.replicas={min(2, n)}"],
    ).start()
    print(
        f"local cluster of {n} brokers ({cluster.bootstrap}), replication factor {n}, "
        f"data in {args.data_dir}",
        flush=True,
    )
    try:
        yield cluster.bootstrap
    finally:
        cluster.stop()


@contextlib.contextmanager
def _console_for(args: argparse.Namespace, bootstrap: str) -> Iterator[None]:
    """The web console on the demo's cluster while it runs (a busy port only warns:
    the pipeline is the demo's point)."""
    if not args.console_listen:
        yield
        return
    from headwater.console.server import ConsoleConfigError, ConsoleServer, ConsoleSettings

    try:
        server = ConsoleServer(ConsoleSettings(bootstrap=bootstrap, listen=args.console_listen))
        server.start()
    except ConsoleConfigError as exc:
        log.warning("no console: %s (pass --console-listen HOST:PORT, or '' for none)", exc)
        yield
        return
    print(f"console: {server.url}  (open it in a browser; it runs while the demo does)", flush=True)
    try:
        yield
    finally:
        server.stop()


def cmd_demo(args: argparse.Namespace) -> int:
    with _broker_for(args) as bootstrap, _console_for(args, bootstrap):
        settings = DemoSettings(
            bootstrap=bootstrap,
            master=args.master,
            output=Path(args.output),
            partitions=args.partitions,
            window_s=args.window,
            lateness_s=args.lateness,
        )
        return run_demo(settings, args.events_per_second, args.duration)


def add_demo_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``headwater demo`` to the CLI's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="page views through Headwater into a Spark streaming job",
        description=DESCRIPTION,
    )
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="use this broker, not an embedded one")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--data-dir", default="headwater-data", help="embedded broker's data")
    p.add_argument("--port", type=int, default=9092, help="embedded broker's (first) port")
    p.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="run a local cluster of N brokers on ZooKeeper, replication factor N (default 1)",
    )
    p.add_argument("--output", default="demo-output", help="parquet and checkpoints")
    p.add_argument("--duration", type=float, default=0, help="seconds to run; 0: until Ctrl-C")
    p.add_argument(
        "--events-per-second", type=int, default=2000, metavar="N",
        help="page views generated per second (default 2000)",
    )  # fmt: skip
    p.add_argument("--partitions", type=int, default=12, help=f"partitions of {EVENTS_TOPIC}")
    p.add_argument("--window", type=int, default=10, help="window length in seconds")
    p.add_argument("--lateness", type=int, default=5, help="watermark delay in seconds")
    p.add_argument(
        "--console-listen", default="127.0.0.1:8080", metavar="HOST:PORT",
        help="serve the web console there while the demo runs (default 127.0.0.1:8080; "
        "'' for none)",
    )  # fmt: skip
    p.set_defaults(func=cmd_demo)
    return p
