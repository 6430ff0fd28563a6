"""``headwater cluster``: a local ZooKeeper and N brokers until Ctrl-C (a dev cluster).

The processes themselves are ``headwater.cluster.local_cluster.LocalCluster``
(also used by the demo and the tests); this module is the command around it.
"""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from headwater.cluster.local_cluster import ClusterStartError, LocalCluster


def run_cluster(
    data_dir: Path,
    brokers: int,
    base_port: int | None = 9092,
    overrides: Sequence[str] = (),
    out: Callable[[str], None] = print,
) -> int:
    """Run until Ctrl-C/SIGTERM (exit 0) or until a broker dies (exit 1)."""
    if data_dir.exists() and not data_dir.is_dir():
        out(f"error: data directory {data_dir} is a file; pass --data-dir a directory")
        return 2
    try:
        cluster = LocalCluster(data_dir, brokers, base_port=base_port, overrides=overrides)
    except (ValueError, ClusterStartError) as exc:
        out(f"error: {exc}")
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        try:
            cluster.start()
        except (ClusterStartError, RuntimeError) as exc:
            out(f"error: {exc}")
            return 1
        out(f"zookeeper: {cluster.zookeeper_connect}")
        out(f"bootstrap: {cluster.bootstrap}")
        while not stop.wait(0.5):
            dead = [b for b in cluster.brokers if not b.running]
            if dead:
                for broker in dead:
                    out(f"broker {broker.broker_id} exited; see {broker.log_path}")
                code = 1
                break
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def add_cluster_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``headwater cluster`` to the CLI's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="run a local ZooKeeper and N brokers until Ctrl-C",
        description="Start a ZooKeeper and N brokers on consecutive ports, print the "
        "bootstrap string, and stop them all on Ctrl-C or SIGTERM.",
    )
    p.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    p.add_argument("--data-dir", required=True, metavar="DIR", help="ZooKeeper and broker data")
    p.add_argument(
        "--base-port", type=int, default=9092, metavar="P", help="first broker's port (9092)"
    )
    p.add_argument(
        "--override", "-o", action="append", default=[], metavar="KEY=VALUE",
        help="a config key for every broker (repeatable)",
    )  # fmt: skip
    p.set_defaults(
        func=lambda args: run_cluster(
            Path(args.data_dir), args.brokers, args.base_port, args.override
        )
    )
    return p
