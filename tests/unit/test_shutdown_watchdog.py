"""The shutdown watchdog ends a process whose stop hangs, saying what it waited for."""

from __future__ import annotations

import subprocess
import sys
import time

from headwater.broker import shutdown_watchdog

_HANGING_STOP = """
import logging, threading, time
logging.basicConfig(level=logging.INFO, format="%(message)s")
from headwater.broker import shutdown_watchdog
shutdown_watchdog.arm(0.5, lambda: "leaving the cluster")
# A non-daemon thread stuck in a call: the interpreter's exit would wait forever.
threading.Thread(target=time.sleep, args=(600,), name="stuck-zk-call").start()
"""


def test_a_hanging_stop_ends_with_a_line_naming_what_it_waited_for() -> None:
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", _HANGING_STOP], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == shutdown_watchdog.HALT_STATUS
    assert time.monotonic() - started < 30
    assert "waiting for: leaving the cluster" in out.stderr
    assert "stuck-zk-call" in out.stderr


def test_disarmed_watchdog_does_nothing() -> None:
    disarm = shutdown_watchdog.arm(0.2, lambda: "x")
    disarm.set()
    time.sleep(0.4)  # the process is still alive to run the next line
    assert disarm.is_set()
