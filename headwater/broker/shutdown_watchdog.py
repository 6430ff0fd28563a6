"""A SIGTERM always ends the process: a watchdog over the broker's stop.

The stop is bounded step by step (controlled shutdown retries, each stop step),
but the interpreter's own exit waits for every worker thread, and a thread stuck
in a library call would hold the process forever (a stopping controller once
lingered 60 s until killed). Armed when the stop begins, the watchdog waits
for the stop's budget; if the process is still alive then, it logs what it was
waiting for (the stop phase and where each thread is) and exits at once.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Exit status of a process the watchdog ended (Kafka's Exit.halt uses 1 too).
HALT_STATUS = 1


def thread_summary() -> str:
    """Each live thread and the innermost frame it is in (one line each)."""
    frames = sys._current_frames()
    lines = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if frame is None or thread is threading.current_thread():
            continue
        top = traceback.extract_stack(frame, limit=1)[-1]
        lines.append(f"{thread.name} in {top.name} ({os.path.basename(top.filename)}:{top.lineno})")
    return "; ".join(lines)


def arm(budget_s: float, phase: Callable[[], str]) -> threading.Event:
    """Start the watchdog; set the returned event to disarm it (tests)."""
    disarmed = threading.Event()

    def watch() -> None:
        if disarmed.wait(budget_s):
            return
        log.error(
            "stop did not finish within %.0f s (waiting for: %s; threads: %s); exiting now",
            budget_s, phase(), thread_summary(),
        )  # fmt: skip
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(HALT_STATUS)

    threading.Thread(target=watch, name="shutdown-watchdog", daemon=True).start()
    return disarmed
