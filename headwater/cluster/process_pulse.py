"""Whether the whole process ran while its event loop was blocked (issue 33).

The stall guard (``headwater.cluster.stale_leader``) steps a broker down from
everything it leads after the event loop went quiet for two thirds of the
ZooKeeper session: a SIGSTOP or a swapped-out process may have lost the session
meanwhile, and the requests queued during the pause are read before the
ZooKeeper client can say so. A loop that is merely *busy* (applying 50,000 new
partition states, say) is a different case: kazoo's own threads keep pinging,
the session holds, and stepping down from every partition just created only
starts the election churn over again.

What tells the two apart is a thread of our own that beats every
``interval_ms``. A paused process stops every thread, so its beats show a gap as
long as the pause; a busy loop releases the GIL every switch interval, so the
beats go on. The ZooKeeper client's own view is added: a SUSPENDED or LOST
heard on the store's session thread during the stall counts as a possible loss
too, even though the loop has not yet run the listener that would say so.

The decision stays in ``StaleLeaderGuard``; this is only the I/O that feeds it
(the thread's clock and the store's session events).
"""

from __future__ import annotations

import threading
import time

from headwater.cluster.store import SessionEvent


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ProcessPulse:
    """A daemon thread's heartbeat, read as "the longest the process stood still"."""

    def __init__(self, interval_ms: int = 100) -> None:
        self.interval_ms = interval_ms
        self._lock = threading.Lock()
        self._last_beat_ms = _now_ms()
        self._largest_gap_ms = 0
        self._session_troubled = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopped.clear()  # a stopped pulse may start again
        with self._lock:
            self._last_beat_ms = _now_ms()
            self._largest_gap_ms = 0
        self._thread = threading.Thread(target=self._run, name="process-pulse", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None

    def _run(self) -> None:
        interval_s = self.interval_ms / 1000
        while not self._stopped.wait(interval_s):
            self.beat(_now_ms())

    def beat(self, now_ms: int) -> None:
        """One beat of the thread (a test calls it to stand in for the thread)."""
        with self._lock:
            self._largest_gap_ms = max(self._largest_gap_ms, now_ms - self._last_beat_ms)
            self._last_beat_ms = now_ms

    def session_event(self, event: SessionEvent) -> None:
        """A store session listener, called on the store's session thread."""
        if event in (SessionEvent.SUSPENDED, SessionEvent.LOST):
            with self._lock:
                self._session_troubled = True

    def take(self, now_ms: int) -> tuple[int, bool]:
        """(the longest gap between beats since the last take, up to ``now_ms``;
        whether ZooKeeper was suspended or lost meanwhile), and start a new window."""
        with self._lock:
            gap = max(self._largest_gap_ms, now_ms - self._last_beat_ms)
            troubled = self._session_troubled
            self._largest_gap_ms = 0
            self._session_troubled = False
            # The window restarts here: a beat before now is not a gap after it.
            self._last_beat_ms = max(self._last_beat_ms, now_ms)
        return gap, troubled
