"""``headwater serve``: run one broker in the foreground.

The contract other tools rely on: ``headwater serve --listen HOST:PORT
--data-dir DIR`` runs in the foreground, logs exactly one line ``listening on
HOST:PORT`` when ready, and stops cleanly on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path
from typing import Any

from headwater.broker import shutdown_watchdog
from headwater.broker.config import BrokerConfig, parse_host_port, parse_properties
from headwater.gc_policy import COLLECTOR
from headwater.security.listeners import with_listen_address


def _add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", metavar="HOST:PORT", help="listener (Kafka key: listeners)")
    p.add_argument("--data-dir", metavar="DIR", help="data directory (Kafka key: log.dirs)")
    p.add_argument("--config", metavar="FILE", help="a server.properties file with Kafka keys")
    p.add_argument(
        "--override",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config key, e.g. -o log.segment.bytes=1048576 (repeatable)",
    )
    p.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve Prometheus /metrics")
    p.add_argument("--log-level", default="INFO")


def broker_config(args: argparse.Namespace, default_data_dir: str | None = None) -> BrokerConfig:
    props: dict[str, str] = {}
    if args.config:
        props.update(parse_properties(Path(args.config).read_text()))
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--override needs KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    if args.listen:
        host, port = parse_host_port(args.listen)
        try:
            props["listeners"] = with_listen_address(props.get("listeners"), host, port)
        except ValueError as exc:
            raise SystemExit(f"error: {exc}") from None
    if args.data_dir:
        props["log.dirs"] = args.data_dir
    elif default_data_dir and "log.dirs" not in props and "log.dir" not in props:
        props["log.dirs"] = default_data_dir
    if args.metrics_listen:
        props["headwater.metrics.listen"] = args.metrics_listen
    return BrokerConfig.from_properties(props)


async def run_broker(config: BrokerConfig) -> None:
    """Run until SIGTERM/SIGINT, then stop cleanly (flush, clean-shutdown marker)."""
    from headwater.broker.broker import Broker
    from headwater.cluster.node import ClusterStartError
    from headwater.log.dir_lock import DataDirLockedError

    broker = Broker(config)
    try:
        await broker.start()
    except OSError as exc:
        await broker.stop()
        where = f"{config.host}:{config.port}"
        raise SystemExit(f"error: cannot listen on {where}: {exc.strerror}") from None
    except (ClusterStartError, DataDirLockedError) as exc:
        await broker.stop()
        raise SystemExit(f"error: {exc}") from None
    # Start-up objects (topic registry, handler tables, imported modules) live for
    # the whole run: move them out of the collector's way so that decoding a large
    # Fetch request does not pay for rescanning them (measured: most of its cost).
    COLLECTOR.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        shutdown_watchdog.arm(broker.stop_budget_s(), lambda: broker.stop_phase)
        await broker.stop()


def _run(config: BrokerConfig) -> int:
    if config.event_loop == "uvloop":
        import uvloop

        uvloop.run(run_broker(config))
    else:
        asyncio.run(run_broker(config))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    return _run(broker_config(args, default_data_dir="headwater-data"))


def add_serve_command(subparsers: Any) -> None:
    """Add ``serve`` to an argparse subparsers object."""
    serve = subparsers.add_parser("serve", help="run a broker in the foreground")
    _add_serve_args(serve)
    serve.set_defaults(func=cmd_serve)
