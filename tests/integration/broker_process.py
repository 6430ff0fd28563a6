"""Start a real Headwater broker process on 127.0.0.1 for integration tests.

The broker runs as ``python -m headwater.cli serve`` exactly as a user runs
it, so the tests also hold the CLI contract: one ``listening on HOST:PORT``
line when ready, clean stop on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from headwater.broker.broker import stop_budget_s
from headwater.broker.config import BrokerConfig

# The broker's shutdown watchdog exits it after its stop budget (85 s with the
# default controlled-shutdown settings); a few seconds more for the exit itself.
STOP_TIMEOUT_S = stop_budget_s(BrokerConfig()) + 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        overrides: Sequence[str] = (),
        args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        wrapper: Sequence[str] = (),
    ) -> None:
        """``host``: the address it listens on; ``wrapper``: a command prefix it runs
        under (the partition tests' ``ip netns exec <namespace>``)."""
        self.data_dir = data_dir
        self.host = host
        self.wrapper = list(wrapper)
        self.port = port or free_port()
        self.overrides = list(overrides)
        #: More ``serve`` options (``--metrics-listen``, ...).
        self.args = list(args)
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> BrokerProcess:
        cmd = [
            *self.wrapper,
            *(sys.executable, "-m", "headwater.cli", "serve", "--data-dir", str(self.data_dir)),
        ]
        if not any(o.startswith("listeners=") for o in self.overrides):
            # With a listeners override, it must include PLAINTEXT on self.port.
            cmd += ["--listen", self.bootstrap]
        for o in self.overrides:
            cmd += ["--override", o]
        cmd += self.args
        self.lines = []
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        ready = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if line.strip() == f"listening on {self.bootstrap}":
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start:\n" + "\n".join(self.lines))
        return self

    def stop(self, timeout: float | None = None) -> int:
        """SIGTERM and wait: the clean-shutdown path.

        By default waits as long as the broker's own shutdown watchdog allows a
        stop (a controlled shutdown that retries, then the drain), so a slow but
        legitimate stop on a loaded machine does not fail the test; a broker
        still running after the wait is killed (no orphan) and the wait fails.
        """
        if self.proc is None:
            return 0
        proc, self.proc = self.proc, None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(STOP_TIMEOUT_S if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise

    def kill(self) -> None:
        """SIGKILL: the crash path (kill -9)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()
