"""``headwater serve``: run one broker in the foreground.

The contract other tools rely on: ``headwater serve --listen HOST:PORT
--data-dir DIR`` runs in the foreground, logs exactly one line ``listening on
HOST:PORT`` when ready, and stops cleanly on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import faulthandler
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from headwater.broker import shutdown_watchdog
from headwater.broker.config import BrokerConfig, parse_host_port, parse_properties
from headwater.broker.config_def import BROKER_CONFIG_DEF, ConfigError
from headwater.gc_policy import COLLECTOR
from headwater.security.listeners import with_listen_address

log = logging.getLogger("headwater")


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class StartupError(Exception):
    """A reason the broker cannot start, as one line (``main`` prints ``error: ...``)."""


def _add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="the PLAINTEXT listener (Kafka key: listeners; default 127.0.0.1:9092)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="data directory (Kafka key: log.dirs; default ./headwater-data)",
    )
    p.add_argument("--config", metavar="FILE", help="a server.properties file with Kafka keys")
    p.add_argument(
        "--override",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config key, e.g. -o log.segment.bytes=1048576 (repeatable; wins over --config)",
    )
    p.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics there (Kafka-style key: headwater.metrics.listen)",
    )
    p.add_argument(
        "--console-listen",
        metavar="HOST:PORT",
        help="serve the web console there, for this broker's cluster (Kafka-style key: "
        "headwater.console.listen); off a loopback address it needs --console-users",
    )
    p.add_argument(
        "--console-users",
        metavar="FILE",
        help="the console's user file (NAME:HASH lines, scrypt or argon2): require a login",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        metavar="LEVEL",
        help=f"{', '.join(LOG_LEVELS)} (default info); debug also shows tracebacks",
    )
    p.add_argument(
        "--help-config",
        action="store_true",
        help="print every config key with its type, default, valid values and meaning",
    )


def server_properties(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """The Kafka keys from ``--config``, ``-o`` and the flags, and where each came from."""
    props: dict[str, str] = {}
    origin: dict[str, str] = {}
    if args.config:
        try:
            text = Path(args.config).read_text()
        except OSError as exc:
            raise StartupError(
                f"cannot read --config {args.config}: {exc.strerror or exc}"
            ) from None
        for key, value in parse_properties(text).items():
            props[key], origin[key] = value, f"in {args.config}"
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise StartupError(f"--override needs KEY=VALUE, got {item!r}")
        props[key.strip()], origin[key.strip()] = value.strip(), "from -o"
    if args.listen:
        try:
            host, port = parse_host_port(args.listen)
        except ValueError as exc:
            raise StartupError(f"--listen {args.listen}: {exc} (expected HOST:PORT)") from None
        try:
            props["listeners"] = with_listen_address(props.get("listeners"), host, port)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        origin["listeners"] = "from --listen"
    if args.data_dir:
        props["log.dirs"], origin["log.dirs"] = args.data_dir, "from --data-dir"
    if args.metrics_listen:
        try:
            parse_host_port(args.metrics_listen, 9308)
        except ValueError as exc:
            raise StartupError(
                f"--metrics-listen {args.metrics_listen}: {exc} (expected HOST:PORT)"
            ) from None
        props["headwater.metrics.listen"] = args.metrics_listen
        origin["headwater.metrics.listen"] = "from --metrics-listen"
    if getattr(args, "console_listen", None):
        props["headwater.console.listen"] = args.console_listen
        origin["headwater.console.listen"] = "from --console-listen"
    return props, origin


def broker_config(args: argparse.Namespace, default_data_dir: str | None = None) -> BrokerConfig:
    """Validated config: a bad value or a file for a data directory is a ``StartupError``;
    an unknown key a warning naming the nearest known one."""
    props, origin = server_properties(args)
    if default_data_dir and "log.dirs" not in props and "log.dir" not in props:
        props["log.dirs"] = default_data_dir
    try:
        warnings = BROKER_CONFIG_DEF.validate(props, origin)
    except ConfigError as exc:
        raise StartupError(str(exc)) from None
    for warning in warnings:
        log.warning("%s", warning)
    try:
        config = BrokerConfig.from_properties(props)
    except ValueError as exc:
        raise StartupError(f"invalid config: {exc}") from None
    check_data_dir(config.data_dir)
    return config


def check_data_dir(path: Path) -> None:
    """The data directory exists (or can be made) and is a writable directory."""
    if path.exists() and not path.is_dir():
        raise StartupError(f"data directory {path} is a file; pass --data-dir a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create data directory {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise StartupError(f"data directory {path} is not writable by this user")


def _busy_address(config: BrokerConfig) -> str:
    """Which of the broker's addresses could not be bound: a listener or /metrics."""
    candidates = [
        (listener.host, listener.port, f"listener {listener.name}")
        for listener in config.all_listeners
    ]
    if config.metrics_port is not None:
        candidates.append(
            (config.metrics_host or "127.0.0.1", config.metrics_port, "--metrics-listen")
        )
    for host, port, what in candidates:
        if port == 0:
            continue
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                return f"{host}:{port} ({what}): {exc.strerror or exc}"
    return f"{config.host}:{config.port}"


async def _stop_quietly(broker: Any) -> None:
    """Undo a failed start without its INFO lines: the failure is the one line that counts."""
    logging.disable(logging.INFO)
    try:
        await broker.stop()
    finally:
        logging.disable(logging.NOTSET)


def console_settings(args: argparse.Namespace, config: BrokerConfig) -> Any:
    """The web console beside this broker (``headwater.console.listen``), or None.

    It reaches the cluster as any client does, through this broker's PLAINTEXT
    listener, and shows this broker's own /metrics when it serves them.
    """
    props, _ = server_properties(args)
    listen = props.get("headwater.console.listen")
    if not listen:
        return None
    from headwater.console.server import ConsoleSettings

    plaintext = [lst for lst in config.all_listeners if lst.protocol.name == "PLAINTEXT"]
    if not plaintext:
        raise StartupError(
            "headwater.console.listen needs a PLAINTEXT listener to reach the cluster through; "
            "for a secured one run `headwater console --command-config FILE` instead"
        )
    host, port = plaintext[0].advertised
    metrics = (
        {config.node_id: f"{config.metrics_host or '127.0.0.1'}:{config.metrics_port}"}
        if config.metrics_port is not None
        else None
    )
    settings = ConsoleSettings(
        bootstrap=f"{host}:{port}",
        listen=listen,
        users_file=Path(args.console_users) if getattr(args, "console_users", None) else None,
        metrics=metrics,
    )
    # Refuse a console bound off loopback without logins before the broker starts.
    from headwater.console.auth import UserFileError, load_user_file
    from headwater.console.server import ConsoleConfigError, check_binding

    try:
        users = load_user_file(settings.users_file) if settings.users_file else None
        check_binding(parse_host_port(listen, 8080)[0], users, listen)
    except (ConsoleConfigError, UserFileError) as exc:
        raise StartupError(str(exc).replace("--users FILE", "--console-users FILE", 1)) from None
    return settings


def _start_console(settings: Any) -> Any:
    """Start the console's server (its own thread), or say in one line why it cannot."""
    if settings is None:
        return None
    from headwater.console.auth import UserFileError
    from headwater.console.server import ConsoleConfigError, ConsoleServer

    try:
        server = ConsoleServer(settings).start()
    except (ConsoleConfigError, UserFileError) as exc:
        raise StartupError(str(exc)) from None
    log.info("console on %s", server.url)
    return server


async def run_broker(config: BrokerConfig, console: Any = None) -> None:
    """Run until SIGTERM/SIGINT, then stop cleanly (flush, clean-shutdown marker).

    ``console``: ``ConsoleSettings`` of a web console to serve beside the broker."""
    from headwater.broker.broker import Broker
    from headwater.cluster.node import ClusterStartError
    from headwater.log.dir_lock import DataDirLockedError

    broker = Broker(config)
    try:
        await broker.start()
    except OSError as exc:
        await _stop_quietly(broker)
        if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise StartupError(f"cannot listen on {_busy_address(config)}") from None
        raise StartupError(f"{exc.strerror or exc} ({exc.filename or config.data_dir})") from None
    except (ClusterStartError, DataDirLockedError) as exc:
        await _stop_quietly(broker)
        raise StartupError(str(exc)) from None
    # Start-up objects (topic registry, handler tables, imported modules) live for
    # the whole run: move them out of the collector's way so that decoding a large
    # Fetch request does not pay for rescanning them (measured: most of its cost).
    COLLECTOR.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # After the signal handlers: a SIGTERM while the console starts is a clean stop too.
    try:
        console_server = await asyncio.to_thread(_start_console, console)
    except StartupError:
        await _stop_quietly(broker)
        raise
    try:
        await stop.wait()
    finally:
        shutdown_watchdog.arm(broker.stop_budget_s(), lambda: broker.stop_phase)
        if console_server is not None:
            await asyncio.to_thread(console_server.stop)
        await broker.stop()


#: The GIL switch interval of a broker in a cluster (Python's default: 5 ms). kazoo's
#: connection thread gives up the GIL for every select, recv and send, one ZooKeeper
#: request per loop, and waits up to a whole interval to get it back while the event
#: loop computes: about 50 requests a second. At 20,000 partitions a controller
#: request queued behind the view's watch reads waited past the store's 10 s timeout
#: (issue 33). A thread that wants the GIL now waits 1 ms at most; when none does,
#: the interval costs nothing.
CLUSTER_SWITCH_INTERVAL_S = 0.001


def _run(config: BrokerConfig, console: Any = None) -> int:
    if config.zookeeper_connect:
        sys.setswitchinterval(CLUSTER_SWITCH_INTERVAL_S)
    if config.event_loop == "uvloop":
        import uvloop

        uvloop.run(run_broker(config, console))
    else:
        asyncio.run(run_broker(config, console))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """One line on stderr and exit 1 for anything that stops a start (a traceback with
    --log-level debug)."""
    if args.help_config:
        print(BROKER_CONFIG_DEF.table(), end="")
        return 0
    debug = args.log_level.lower() == "debug"
    # A crash in C code (an extension, the interpreter's exit with threads still
    # running) then leaves every thread's Python stack on stderr, as a JVM's
    # hs_err file does, instead of a bare "exit -11".
    faulthandler.enable()
    try:
        config = broker_config(args, default_data_dir="headwater-data")
        return _run(config, console_settings(args, config))
    except StartupError as exc:
        if debug:
            log.exception("start-up failed")
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the operator gets one line; debug, the traceback
        if debug:
            log.exception("broker failed")
        print(
            f"error: {type(exc).__name__}: {exc} (--log-level debug shows where)", file=sys.stderr
        )
        return 1


def add_serve_command(subparsers: Any) -> None:
    """Add ``serve`` to an argparse subparsers object."""
    serve = subparsers.add_parser("serve", help="run a broker in the foreground")
    _add_serve_args(serve)
    serve.set_defaults(func=cmd_serve)
