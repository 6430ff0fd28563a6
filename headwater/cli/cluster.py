"""``headwater cluster``: a local ZooKeeper and N brokers until Ctrl-C (a dev cluster).

The processes themselves are ``headwater.cluster.local_cluster.LocalCluster``
(also used by the demo and the tests); this module is the command around it.

A dev cluster is for trying failures: when a broker dies the others keep
running and the command says which one died and how to bring it back. While
it runs, ``headwater cluster --data-dir D status | stop-broker N |
restart-broker N`` (from another terminal) acts on it: the running command
writes ``D/cluster.json`` (its pid, ZooKeeper, each broker's address, pid and
log) and takes requests as files in ``D/control/``, because it owns the
broker processes. Ctrl-C or SIGTERM stops everything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from tqdm import tqdm

from headwater.cli.common import table
from headwater.cluster.local_cluster import ClusterStartError, LocalCluster

STATE_FILE = "cluster.json"
CONTROL_DIR = "control"
ACTIONS = ("status", "stop-broker", "restart-broker")


def _say(line: str) -> None:
    print(line, flush=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _connectable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)


class _Supervisor:
    """The running command's side: state file, dead-broker reports, control requests."""

    def __init__(self, cluster: LocalCluster, data_dir: Path, out: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.data_dir = data_dir
        self.out = out
        self.control = data_dir / CONTROL_DIR
        self.reported: set[int] = set()  # dead brokers already reported
        self.stopped: set[int] = set()  # stopped on request: not a surprise

    def write_state(self) -> None:
        brokers = [
            {
                "id": b.broker_id,
                "address": b.address,
                "pid": b.proc.pid if b.proc is not None else None,
                "running": b.running,
                "rack": b.rack,
                "log": str(b.log_path),
            }
            for b in self.cluster.brokers
        ]
        state = {
            "pid": os.getpid(),
            "zookeeper": self.cluster.zookeeper_connect,
            "bootstrap": self.cluster.bootstrap,
            "brokers": brokers,
        }
        _write_json(self.data_dir / STATE_FILE, state)

    def check(self) -> None:
        """Report brokers that died since the last look; serve pending requests."""
        changed = False
        for b in self.cluster.brokers:
            if b.running or b.broker_id in self.reported or b.broker_id in self.stopped:
                continue
            code = b.proc.returncode if b.proc is not None else None
            self.out(
                f"broker {b.broker_id} exited (code {code}); the others keep running; see "
                f"{b.log_path}; restart it with: headwater cluster --data-dir {self.data_dir} "
                f"restart-broker {b.broker_id}"
            )
            self.reported.add(b.broker_id)
            changed = True
        for request in sorted(self.control.glob("*.request.json")):
            self._serve(request)
            changed = True
        if changed:
            self.write_state()

    def _serve(self, request: Path) -> None:
        try:
            body = json.loads(request.read_text())
        except (OSError, ValueError):
            return  # half-written: read it next time
        request.unlink(missing_ok=True)
        action, broker_id = body.get("action"), int(body.get("broker", -1))
        ok, message = True, ""
        try:
            if action == "stop-broker":
                broker = self.cluster.broker(broker_id)
                if not broker.running:
                    ok, message = False, f"broker {broker_id} is not running"
                else:
                    self.stopped.add(broker_id)
                    self.cluster.stop_broker(broker_id)
                    message = f"stopped broker {broker_id}"
            elif action == "restart-broker":
                self.stopped.add(broker_id)
                broker = self.cluster.restart_broker(broker_id)
                message = f"broker {broker_id} listening on {broker.address}"
                self.stopped.discard(broker_id)
                self.reported.discard(broker_id)
            else:
                ok, message = False, f"unknown action {action!r}"
        except ClusterStartError as exc:
            ok, message = False, str(exc).splitlines()[0]
        self.out(message if ok else f"{action} {broker_id}: {message}")
        response = request.with_name(request.name.replace(".request.", ".response."))
        _write_json(response, {"ok": ok, "message": message})


def run_cluster(
    data_dir: Path,
    brokers: int,
    base_port: int | None = 9092,
    overrides: Sequence[str] = (),
    out: Callable[[str], None] = _say,
    racks: Sequence[str | None] = (),
) -> int:
    """Run until Ctrl-C/SIGTERM (exit 0); a broker that dies is reported, not fatal."""
    if data_dir.exists() and not data_dir.is_dir():
        out(f"error: data directory {data_dir} is a file; pass --data-dir a directory")
        return 2
    running = _running_state(data_dir)
    if running is not None:
        out(f"error: a cluster already runs in {data_dir} (pid {running['pid']})")
        return 2
    try:
        cluster = LocalCluster(
            data_dir, brokers, base_port=base_port, overrides=overrides, racks=racks
        )
    except (ValueError, ClusterStartError) as exc:
        out(f"error: {exc}")
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    supervisor = _Supervisor(cluster, data_dir, out)
    try:
        try:
            cluster.start()
        except (ClusterStartError, RuntimeError) as exc:
            out(f"error: {exc}")
            return 1
        supervisor.control.mkdir(parents=True, exist_ok=True)
        supervisor.write_state()
        out(f"zookeeper: {cluster.zookeeper_connect}")
        out(f"bootstrap: {cluster.bootstrap}")
        if racks:
            out("racks: " + ",".join(f"{b.broker_id}={b.rack}" for b in cluster.brokers))
        while not stop.wait(0.5):
            supervisor.check()
    finally:
        cluster.stop()
        with contextlib.suppress(OSError):
            (data_dir / STATE_FILE).unlink()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


# -- acting on a running cluster -------------------------------------------------------


def _running_state(data_dir: Path) -> dict[str, Any] | None:
    """The state a live ``headwater cluster`` wrote in ``data_dir``, else None."""
    try:
        state: dict[str, Any] = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if _alive(int(state.get("pid", -1))) else None


def cluster_status(data_dir: Path) -> list[str]:
    state = _running_state(data_dir)
    if state is None:
        raise ClusterStartError(f"no cluster runs in {data_dir}")
    lines = [f"zookeeper: {state['zookeeper']}", f"bootstrap: {state['bootstrap']}"]
    rows = []
    for b in state["brokers"]:
        pid = b["pid"]
        up = pid is not None and b["running"] and _alive(pid) and _connectable(b["address"])
        state_word = "up" if up else "down"
        rack = b.get("rack") or "-"
        rows.append((str(b["id"]), b["address"], str(pid or "-"), state_word, rack, b["log"]))
    return lines + table(("BROKER", "ADDRESS", "PID", "STATE", "RACK", "LOG"), rows)


def request_action(data_dir: Path, action: str, broker_id: int, timeout: float = 120.0) -> str:
    """Ask the running command to act; its answer, or ClusterStartError."""
    if _running_state(data_dir) is None:
        raise ClusterStartError(
            f"no cluster runs in {data_dir} (start one: headwater cluster --data-dir {data_dir})"
        )
    name = uuid.uuid4().hex
    request = data_dir / CONTROL_DIR / f"{name}.request.json"
    response = data_dir / CONTROL_DIR / f"{name}.response.json"
    _write_json(request, {"action": action, "broker": broker_id})
    deadline = time.monotonic() + timeout
    # A restart waits seconds for the broker: a ticking status line on a terminal
    # (stderr; nothing when piped, so the answer line stays the only output).
    status = tqdm(
        desc=f"{action} {broker_id}",
        bar_format="{desc}... {elapsed}",
        disable=None,
        file=sys.stderr,
    )
    try:
        while time.monotonic() < deadline:
            if response.exists():
                answer = json.loads(response.read_text())
                response.unlink(missing_ok=True)
                if not answer["ok"]:
                    raise ClusterStartError(answer["message"])
                return str(answer["message"])
            if _running_state(data_dir) is None:
                raise ClusterStartError(f"the cluster in {data_dir} stopped")
            time.sleep(0.1)
            status.refresh()
    finally:
        status.close()
    request.unlink(missing_ok=True)
    raise ClusterStartError(f"no answer from the cluster in {data_dir} in {timeout:.0f} s")


def cmd_cluster(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    action = getattr(args, "action", None)
    if action is None:
        racks = [r.strip() for r in args.racks.split(",")] if args.racks else []
        if any(not r for r in racks):
            print(
                f"error: --racks takes rack names like a,b,c, not {args.racks!r}", file=sys.stderr
            )
            return 2
        return run_cluster(data_dir, args.brokers, args.base_port, args.override, racks=racks)
    try:
        if action == "status":
            lines = cluster_status(data_dir)
        else:
            lines = [request_action(data_dir, action, args.broker_id)]
    except ClusterStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


def add_cluster_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``headwater cluster`` to the CLI's subparsers."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="run a local ZooKeeper and N brokers until Ctrl-C (a dev cluster)",
        description="Start a ZooKeeper and N brokers on consecutive ports, print the "
        "bootstrap string, and stop them all on Ctrl-C or SIGTERM. A broker that dies is "
        "reported and the others keep running; from another terminal, "
        "`headwater cluster --data-dir DIR status|stop-broker N|restart-broker N` acts on "
        "the running cluster.",
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
    p.add_argument(
        "--racks", metavar="A,B,C",
        help="broker.rack of brokers 1, 2, ... in turn, cycling (a,b,c over 6 brokers: 2 each)",
    )  # fmt: skip
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=False)
    actions.add_parser("status", help="each broker of the running cluster: address, pid, up/down")
    stop = actions.add_parser("stop-broker", help="stop broker N of the running cluster (SIGTERM)")
    restart = actions.add_parser(
        "restart-broker", help="(re)start broker N of the running cluster and wait for it"
    )
    for q in (stop, restart):
        q.add_argument("broker_id", type=int, metavar="N", help="the broker id (1..--brokers)")
    p.set_defaults(func=cmd_cluster)
    return p
