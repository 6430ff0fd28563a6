"""A ZooKeeper and N brokers on this machine, for trying things out (``headwater cluster``).

Starts one ``ZooKeeperServer`` (data in ``DIR/zookeeper``) and N broker processes,
each exactly as a user would run it::

    python -m headwater.cli serve --listen 127.0.0.1:PORT --data-dir DIR/broker-I \\
        -o broker.id=I -o zookeeper.connect=CONNECT

with broker ids 1..N on consecutive ports from ``--base-port`` (default 9092),
waits for each broker's ``listening on`` line, prints the bootstrap string, and
on Ctrl-C or SIGTERM stops the brokers (SIGTERM, in parallel) and then ZooKeeper,
so the brokers can still deregister cleanly. Process output goes to
``DIR/logs/broker-I.log`` (ZooKeeper's to ``DIR/zookeeper/zookeeper.log``).

Every child runs in its own session: a Ctrl-C in the terminal reaches only this
command, which then stops the children in that order.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from headwater.cluster.zookeeper_server import ZooKeeperServer


class ClusterStartError(RuntimeError):
    """A broker exited or did not get ready in time."""


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port_range(count: int, host: str = "127.0.0.1", attempts: int = 50) -> int:
    """A base port such that ``base .. base+count-1`` are all free right now."""
    for _ in range(attempts):
        with socket.socket() as s:
            s.bind((host, 0))
            base = int(s.getsockname()[1])
        if base + count < 65536 and all(_port_free(host, base + i) for i in range(count)):
            return base
    raise ClusterStartError(f"found no {count} consecutive free ports")


class LocalBroker:
    """One broker child process of a local cluster."""

    def __init__(
        self,
        broker_id: int,
        host: str,
        port: int,
        data_dir: Path,
        log_path: Path,
        overrides: Sequence[str] = (),
        rack: str | None = None,
    ) -> None:
        self.broker_id = broker_id
        #: ``broker.rack`` (``headwater cluster --racks``), None for none.
        self.rack = rack
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.log_path = log_path
        self.overrides = list(overrides)
        self.proc: subprocess.Popen[str] | None = None
        self.recent: collections.deque[str] = collections.deque(maxlen=40)
        self._ready = threading.Event()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self, zookeeper_connect: str) -> list[str]:
        cmd = [
            sys.executable, "-m", "headwater.cli", "serve",
            "--listen", self.address,
            "--data-dir", str(self.data_dir),
            "-o", f"broker.id={self.broker_id}",
            "-o", f"zookeeper.connect={zookeeper_connect}",
        ]  # fmt: skip
        if self.rack:
            cmd += ["-o", f"broker.rack={self.rack}"]
        for override in self.overrides:
            cmd += ["-o", override]
        return cmd

    def spawn(self, zookeeper_connect: str) -> None:
        """Start the process; ``wait_ready`` waits for its ``listening on`` line."""
        self._ready.clear()
        self.recent.clear()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            self.command(zookeeper_connect),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.proc = proc
        ready_line = f"listening on {self.address}"

        def pump() -> None:
            assert proc.stdout is not None
            with self.log_path.open("a") as log_file:
                for line in proc.stdout:
                    log_file.write(line)
                    log_file.flush()
                    self.recent.append(line.rstrip("\n"))
                    if line.strip() == ready_line:
                        self._ready.set()

        threading.Thread(target=pump, name=f"broker-{self.broker_id}-output", daemon=True).start()

    def wait_ready(self, deadline: float) -> None:
        while not self._ready.wait(0.05):
            proc = self.proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise ClusterStartError(
                    f"broker {self.broker_id} exited (code {code}) before listening on "
                    f"{self.address}:\n" + "\n".join(self.recent)
                )
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"broker {self.broker_id} not listening on {self.address} in time:\n"
                    + "\n".join(self.recent)
                )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """Send a signal (SIGKILL: crash; SIGSTOP/SIGCONT: a stalled broker)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        """kill -9."""
        self.signal(signal.SIGKILL)
        self.wait(10)


class LocalCluster:
    """ZooKeeper plus N brokers (ids 1..N) under one directory; see the module docstring."""

    def __init__(
        self,
        data_dir: Path,
        brokers: int,
        *,
        base_port: int | None = 9092,
        host: str = "127.0.0.1",
        overrides: Sequence[str] = (),
        zookeeper_port: int | None = None,
        zookeeper_tick_ms: int = 500,
        racks: Sequence[str | None] = (),
    ) -> None:
        """``racks``: broker.rack of brokers 1, 2, ... in turn, cycling when shorter
        than the brokers (``a,b,c`` over 6 brokers: two per rack); empty: no racks."""
        if brokers < 1:
            raise ValueError(f"--brokers must be at least 1, got {brokers}")
        self.data_dir = Path(data_dir)
        self.host = host
        self.zookeeper = ZooKeeperServer(
            self.data_dir / "zookeeper", zookeeper_port, host=host, tick_time_ms=zookeeper_tick_ms
        )
        base = base_port if base_port is not None else free_port_range(brokers, host)
        self.brokers = [
            LocalBroker(
                i,
                host,
                base + i - 1,
                self.data_dir / f"broker-{i}",
                self.data_dir / "logs" / f"broker-{i}.log",
                overrides,
                racks[(i - 1) % len(racks)] if racks else None,
            )
            for i in range(1, brokers + 1)
        ]

    @property
    def zookeeper_connect(self) -> str:
        return self.zookeeper.connect_string

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def start(self, timeout: float = 60.0) -> LocalCluster:
        """ZooKeeper first, then every broker at once; returns when all listen."""
        for broker in self.brokers:
            if not _port_free(self.host, broker.port):
                raise ClusterStartError(
                    f"port {broker.port} for broker {broker.broker_id} is taken"
                )
        self.zookeeper.start()
        try:
            for broker in self.brokers:
                broker.spawn(self.zookeeper_connect)
            deadline = time.monotonic() + timeout
            for broker in self.brokers:
                broker.wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every broker, wait for them, then stop ZooKeeper."""
        for broker in self.brokers:
            broker.signal(signal.SIGTERM)
            # A paused broker cannot act on SIGTERM.
            broker.signal(signal.SIGCONT)
        for broker in self.brokers:
            broker.wait(timeout)
        self.zookeeper.stop()

    def broker(self, broker_id: int) -> LocalBroker:
        for broker in self.brokers:
            if broker.broker_id == broker_id:
                return broker
        ids = ", ".join(str(b.broker_id) for b in self.brokers)
        raise ClusterStartError(f"no broker {broker_id} in this cluster (brokers: {ids})")

    def stop_broker(self, broker_id: int, timeout: float = 30.0) -> None:
        """SIGTERM one broker (a clean, controlled stop) and wait for it."""
        broker = self.broker(broker_id)
        broker.signal(signal.SIGTERM)
        broker.signal(signal.SIGCONT)
        broker.wait(timeout)

    def restart_broker(self, broker_id: int, timeout: float = 60.0) -> LocalBroker:
        """Stop the broker if it runs, start it again on the same port and data; wait for it."""
        broker = self.broker(broker_id)
        if broker.running:
            self.stop_broker(broker_id)
        broker.spawn(self.zookeeper_connect)
        broker.wait_ready(time.monotonic() + timeout)
        return broker

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
