"""Run one real ZooKeeper 3.8 server (Debian's ``zookeeper`` package) as a child process.

Used by the integration tests and by ``headwater cluster``. Headwater does not
implement consensus itself: ZooKeeper is the coordination engine, exactly as in
Kafka's ZooKeeper mode. One standalone server, foreground, data in a directory
of ours, no root and no systemd needed.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

DEBIAN_ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
"""Debian's jar; its manifest Class-Path pulls in the other jars it needs."""


class ZooKeeperNotInstalledError(RuntimeError):
    """java or the ZooKeeper jar is missing on this machine."""


class ZooKeeperStartError(RuntimeError):
    """The server process exited or did not start serving in time."""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``...) and read the answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


class ZooKeeperServer:
    """A standalone ZooKeeper server on ``127.0.0.1:port`` with its data in ``data_dir``.

    ``tick_time_ms`` bounds the session timeouts the server grants (2..20 ticks by
    default); 500 ms lets tests use 1-second sessions so failovers are quick.
    ``max_session_timeout_ms`` is raised so a client asking for Kafka's default
    (18 s) gets it.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        tick_time_ms: int = 500,
        max_session_timeout_ms: int = 60_000,
        jar: Path = DEBIAN_ZOOKEEPER_JAR,
        heap: str = "256m",
        wrapper: Sequence[str] = (),
    ) -> None:
        """``wrapper``: a command prefix the server runs under (the network-partition
        tests' ``ip netns exec <namespace>``, whose address ``host`` is not local here)."""
        self.data_dir = Path(data_dir)
        self.host = host
        self._fixed_port = port
        self.port = port if port is not None else 0
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.jar = jar
        self.heap = heap
        self.wrapper = list(wrapper)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        """``host:port`` for kazoo / ``zookeeper.connect`` (append ``/chroot`` as needed)."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _command(self, config: Path) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperNotInstalledError(
                "java not found: install a JRE and ZooKeeper (bash scripts/system-deps.sh)"
            )
        if not self.jar.is_file():
            raise ZooKeeperNotInstalledError(
                f"{self.jar} not found: install ZooKeeper with `apt-get install zookeeper` "
                "(or bash scripts/system-deps.sh)"
            )
        return [
            *self.wrapper,
            java,
            f"-Xmx{self.heap}",
            # One small server on a shared 2-core machine: the serial collector and
            # the C1 compiler start faster and burn less CPU than the defaults.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            str(self.jar),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(config),
        ]

    def _write_config(self) -> Path:
        snapshots = self.data_dir / "data"
        snapshots.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={snapshots}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            f"maxSessionTimeout={self.max_session_timeout_ms}\n"
            # The Jetty admin server would take port 8080; the 4-letter words are
            # how we (and kazoo's server_version) ask the server whether it is up.
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=*\n"
        )
        return config

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        """Start the server and wait until it serves requests.

        ``ruok`` answers ``imok`` as soon as the port is open, a moment before the
        server serves sessions; ``srvr`` reporting a ``Mode:`` is the later signal.

        With no fixed port, a free port is chosen; if another process grabs it
        before the server binds, a new one is tried (a few times).
        """
        if self.running:
            return self
        attempts = 1 if self._fixed_port is not None else 3
        last_error: ZooKeeperStartError | None = None
        for _ in range(attempts):
            if self._fixed_port is None:
                self.port = _free_port(self.host)
            try:
                self._start_once(timeout)
                return self
            except ZooKeeperStartError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    def _start_once(self, timeout: float) -> None:
        # Readiness is asked over the port, so a port someone else serves would
        # look ready: refuse it up front.
        if not self.wrapper:  # under a wrapper, the address is another namespace's
            self._refuse_a_served_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        command = self._command(config)
        with self.log_path.open("ab") as log_file:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                # Its own process group, so a Ctrl-C meant for `headwater cluster`
                # reaches us first and we stop the server in order.
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with code {code} on {self.connect_string}:\n"
                    + self._log_tail()
                )
            try:
                if "Mode:" in four_letter_word(self.host, self.port, "srvr", 0.5):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise ZooKeeperStartError(
                    f"ZooKeeper did not answer on {self.connect_string} within {timeout}s:\n"
                    + self._log_tail()
                )
            time.sleep(0.1)

    def _refuse_a_served_port(self) -> None:
        with socket.socket() as probe:
            # As the server does: a port whose old connections linger in TIME_WAIT
            # is free; one with a listener is not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((self.host, self.port))
            except OSError as exc:
                raise ZooKeeperStartError(
                    f"cannot start ZooKeeper on {self.connect_string}: {exc.strerror}"
                ) from None

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM and wait (SIGKILL after ``timeout``)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None

    def kill(self) -> None:
        """SIGKILL: the server's crash path."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self._proc = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
