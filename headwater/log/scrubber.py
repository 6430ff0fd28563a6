"""The scrubber: the CRC-32C of every batch in closed segments, checked at a bounded rate.

Kafka checks a batch's CRC when a producer writes it and when recovery reads an
unflushed tail, never afterwards; a byte that rots in a closed segment is then
served as it is (issue 31: librdkafka's default ``check.crcs=false`` delivered it
silently, ``check.crcs=true`` was stuck on it for good). The scrubber reads the
closed segments of every loaded log on its own thread, off the event loop as the
cleaner is, at most ``headwater.log.scrub.bytes.per.second`` (0: off), and marks
each batch whose CRC fails on its log (:meth:`Log.mark_corrupt`). From then on no
read returns those bytes: a fetch at them answers CORRUPT_MESSAGE, one that would
run into them stops before. What to do about it (a log line, a metric, a follower
re-fetching, a leader handing its leadership away) is the caller's, through
``on_corrupt``; this module knows only logs.

One pass covers every closed segment of every loaded log, then the scrubber rests
``pass_pause_s`` and starts again. Between passes it looks every second for logs
loaded since; given the directory's ``generation`` (a count of logs created), that
look lists the logs only when one was created, and otherwise revisits only those
not loaded yet, so a broker of 10,000 idle partitions does not walk them all every
second (issue 33 item 2: that walk was a fifth of its idle CPU).

The active segment is left out: it is still written, and recovery after an
unclean stop already checks it. An EIO while reading is a failing disk: the
log's ``on_io_error`` is told (the directory goes offline), as for any other
read. Other errors (a segment deleted by retention or swapped by the cleaner
under the scrubber) skip that segment for this pass.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Iterable

from headwater.log.log import CorruptBatch, Log
from headwater.log.segment import Segment
from headwater.records.errors import CorruptRecordError

log = logging.getLogger(__name__)

#: ``headwater.log.scrub.bytes.per.second``: 4 MiB/s reads a 1 TiB disk in about three
#: days, a small share of a disk's bandwidth; 0 turns the scrubber off.
DEFAULT_BYTES_PER_SECOND = 4 << 20
#: Rest between two passes over everything.
DEFAULT_PASS_PAUSE_S = 60.0
#: How often, between passes, newly loaded logs are looked for.
NEW_LOG_CHECK_S = 1.0
#: Bytes read at a time (and the granularity of the rate limit).
WINDOW = 256 << 10

#: (topic, partition, log, the corrupt batch), called on the scrubber's thread.
CorruptListener = Callable[[str, int, Log, CorruptBatch], None]


class LogScrubber:
    """One thread checking closed segments' CRCs; see the module docstring."""

    def __init__(
        self,
        logs: Callable[[], Iterable[tuple[str, int, Log]]],
        bytes_per_second: int = DEFAULT_BYTES_PER_SECOND,
        *,
        on_corrupt: CorruptListener | None = None,
        pass_pause_s: float = DEFAULT_PASS_PAUSE_S,
        generation: Callable[[], int] | None = None,
    ) -> None:
        """``generation``: a number that changes whenever ``logs`` may list a new log;
        without it every look for new logs lists them all."""
        self._logs = logs
        self._generation = generation
        #: ``generation`` when ``logs`` was last listed (None: never).
        self._listed_at: int | None = None
        #: Logs listed but not loaded yet (id -> entry): all a look for new logs
        #: revisits while no log was created.
        self._unloaded: dict[int, tuple[str, int, Log]] = {}
        self.bytes_per_second = bytes_per_second
        self.on_corrupt = on_corrupt
        self.pass_pause_s = pass_pause_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        #: ids of the logs some pass has checked (a log object lives as long as its
        #: directory holds it; an id reused after a deletion only delays one check).
        self._seen: set[int] = set()
        #: Totals for metrics and tests.
        self.bytes_checked = 0
        self.passes = 0
        #: Logs looked at, checked or not (for tests: a look for new logs is O(new)).
        self.logs_visited = 0
        self.corrupt_found = 0

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="hw-log-scrubber", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def reconfigure(self, bytes_per_second: int) -> None:
        """A new rate, taken at once (0 pauses the scrubber, more wakes it)."""
        self.bytes_per_second = bytes_per_second
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.bytes_per_second <= 0:
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                self.scrub_pass()
            except Exception:  # the scrubber must never die of one bad log
                log.exception("log scrubber pass failed; retrying after a pause")
            # Between passes, logs loaded since (a partition led or followed after a
            # restart) are checked within a second rather than a pause later.
            resume = time.monotonic() + self.pass_pause_s
            while not self._stop.is_set() and self.bytes_per_second > 0:
                left = resume - time.monotonic()
                if left <= 0 or self._wake.wait(min(left, NEW_LOG_CHECK_S)):
                    break
                try:
                    self.scrub_pass(only_new=True)
                except Exception:
                    log.exception("log scrubber pass failed; retrying after a pause")
            self._wake.clear()

    # -- the work -------------------------------------------------------------------------

    def scrub_pass(self, *, only_new: bool = False) -> int:
        """Check every closed segment of every loaded log once (``only_new``: of the
        logs no pass has seen yet); the bytes checked."""
        checked = 0
        started = time.monotonic()
        for topic, partition, target in self._new_logs() if only_new else self._listed():
            self.logs_visited += 1
            if self._stop.is_set():
                break
            if not target.is_loaded:
                self._unloaded[id(target)] = (topic, partition, target)
                continue
            self._unloaded.pop(id(target), None)
            if target.offline is not None:
                continue
            if only_new and id(target) in self._seen:
                continue
            self._seen.add(id(target))
            segments = target.loaded_segments()
            for i, segment in enumerate(segments[:-1]):  # the active one is still written
                if self._stop.is_set():
                    break
                end = segments[i + 1].base_offset
                checked += self._scrub_segment(
                    topic, partition, target, segment, end, started, checked
                )
        if not only_new:
            self.passes += 1
        return checked

    def _listed(self) -> list[tuple[str, int, Log]]:
        """Every log, noting the generation first (a log created meanwhile is new next time)."""
        self._listed_at = None if self._generation is None else self._generation()
        return list(self._logs())

    def _new_logs(self) -> list[tuple[str, int, Log]]:
        """What a look for new logs visits: every log when one may have been created
        since the last listing (or without ``generation``), else the unloaded ones."""
        if self._generation is None or self._generation() != self._listed_at:
            return self._listed()
        return list(self._unloaded.values())

    def _scrub_segment(
        self,
        topic: str,
        partition: int,
        target: Log,
        segment: Segment,
        end_offset: int,
        started: float,
        done: int,
    ) -> int:
        """Check one closed segment (its offsets end before ``end_offset``)."""
        checked = 0
        last_good = segment.base_offset - 1
        try:
            for header, ok in segment.scrub(WINDOW):
                checked += header.size
                self.bytes_checked += header.size
                if not ok:
                    self._found(
                        topic,
                        partition,
                        target,
                        CorruptBatch(
                            segment,
                            header.position,
                            header.size,
                            header.base_offset,
                            header.last_offset,
                            "CRC-32C mismatch",
                        ),
                    )
                else:
                    last_good = header.last_offset
                self._throttle(started, done + checked)
                if self._stop.is_set():
                    break
        except CorruptRecordError as exc:
            # Nothing past here parses: the rest of the segment is one bad range.
            position = checked
            self._found(
                topic,
                partition,
                target,
                CorruptBatch(
                    segment,
                    position,
                    max(0, segment.size - position),
                    last_good + 1,
                    max(last_good + 1, end_offset - 1),
                    str(exc),
                ),
            )
        except OSError as exc:
            if exc.errno == errno.EIO and target.on_io_error is not None:
                target.on_io_error(target, exc)
            else:
                log.debug("scrubber skipped %s: %s", segment.log_path, exc)
        except ValueError as exc:  # a file closed under us (retention, the cleaner's swap)
            log.debug("scrubber skipped %s: %s", segment.log_path, exc)
        return checked

    def _found(self, topic: str, partition: int, target: Log, bad: CorruptBatch) -> None:
        if not target.mark_corrupt(bad):
            return
        self.corrupt_found += 1
        log.error(
            "scrubber: %s-%d offsets %d-%d (%s position %d, %d bytes) are corrupt: %s; "
            "readers get CORRUPT_MESSAGE",
            topic,
            partition,
            bad.base_offset,
            bad.last_offset,
            bad.segment.log_path,
            bad.position,
            bad.size,
            bad.reason,
        )
        if self.on_corrupt is not None:
            try:
                self.on_corrupt(topic, partition, target, bad)
            except Exception:
                log.exception("handling the corrupt batch of %s-%d failed", topic, partition)

    def _throttle(self, started: float, checked: int) -> None:
        """Sleep so that ``checked`` bytes since ``started`` stay within the rate."""
        rate = self.bytes_per_second
        if rate <= 0:
            return
        ahead = started + checked / rate - time.monotonic()
        if ahead > 0:
            self._stop.wait(ahead)
