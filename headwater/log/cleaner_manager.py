"""The log cleaner's threads (Kafka's LogCleaner + LogCleanerManager).

Cleaning reads and rewrites whole segments, seconds of work: each of the
``log.cleaner.threads`` threads hands it to a worker process of its own
(see :class:`CleanerProcess`), throttled to
``log.cleaner.io.max.bytes.per.second``, with an offset map of its share of
``log.cleaner.dedupe.buffer.size``. The event loop that owns the logs only
does the short steps: choosing the dirtiest log, handing out what the
cleaner needs, and the swap (a few renames). A thread asks the loop for
those through ``call_soon_threadsafe`` and waits.

A log is chosen as Kafka does: among compacted logs not being cleaned, the
one with the highest dirty ratio at or above its ``min.cleanable.dirty.ratio``,
or any whose dirty data is older than ``max.compaction.lag.ms``. With
nothing to do a thread sleeps ``log.cleaner.backoff.ms``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import multiprocessing
import multiprocessing.process
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import TypeVar

from headwater.log.cleaner import Cleaner, CleanResult, CleanTask
from headwater.log.cleaner_swap import delete_files, fsync_directory
from headwater.log.log import Log, PendingClean

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings, Kafka's defaults."""

    enable: bool = True  # log.cleaner.enable
    threads: int = 1  # log.cleaner.threads
    io_max_bytes_per_second: float = math.inf  # log.cleaner.io.max.bytes.per.second
    dedupe_buffer_size: int = 128 << 20  # log.cleaner.dedupe.buffer.size, shared by the threads
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms

    KEYS = (
        "log.cleaner.enable",
        "log.cleaner.threads",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.backoff.ms",
    )

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], base: CleanerConfig | None = None
    ) -> CleanerConfig:
        """Raises ValueError naming the key for a bad value."""
        config = base or cls()
        changes: dict[str, object] = {}
        for key in cls.KEYS:
            if key not in props:
                continue
            text = props[key].strip()
            try:
                if key == "log.cleaner.enable":
                    if text.lower() not in ("true", "false"):
                        raise ValueError("must be true or false")
                    changes["enable"] = text.lower() == "true"
                elif key == "log.cleaner.threads":
                    changes["threads"] = _at_least(int(text), 1)
                elif key == "log.cleaner.io.max.bytes.per.second":
                    value = float(text)
                    if not value > 0:
                        raise ValueError("must be above 0")
                    changes["io_max_bytes_per_second"] = value
                elif key == "log.cleaner.dedupe.buffer.size":
                    changes["dedupe_buffer_size"] = _at_least(int(text), 1 << 20)
                else:
                    changes["backoff_ms"] = _at_least(int(text), 0)
            except ValueError as exc:
                raise ValueError(f"invalid value {props[key]!r} for {key}: {exc}") from exc
        return replace(config, **changes)  # type: ignore[arg-type]

    def as_properties(self) -> dict[str, str]:
        rate = self.io_max_bytes_per_second
        return {
            "log.cleaner.enable": str(self.enable).lower(),
            "log.cleaner.threads": str(self.threads),
            "log.cleaner.io.max.bytes.per.second": str(
                1.7976931348623157e308 if math.isinf(rate) else rate
            ),
            "log.cleaner.dedupe.buffer.size": str(self.dedupe_buffer_size),
            "log.cleaner.backoff.ms": str(self.backoff_ms),
        }


def _at_least(value: int, minimum: int) -> int:
    if value < minimum:
        raise ValueError(f"must be at least {minimum}")
    return value


class CleanerStopped(Exception):
    """The broker is stopping: a clean in progress gives up (its files are discarded at load)."""


class CleanerProcess:
    """A process that runs :class:`Cleaner` for one cleaner thread.

    A process, not the thread itself: the per-batch Python of a clean would
    hold the GIL for milliseconds at a time and delay every request on the
    event loop (measured: 200 ms worst ping with an in-thread cleaner). The
    clean is a pure function of files, so the task and the result cross a
    pipe; the offset map lives in the worker. Started on first use (a
    broker with nothing to compact never starts it); it exits when the
    broker's end of the pipe closes, a ``kill -9`` of the broker included.
    """

    def __init__(self, buffer_bytes: int, stop: threading.Event) -> None:
        self._buffer_bytes = buffer_bytes
        self._stop = stop
        self._process: multiprocessing.process.BaseProcess | None = None
        self._pipe: Connection | None = None

    def _start(self) -> Connection:
        if self._pipe is not None and self._process is not None and self._process.is_alive():
            return self._pipe
        self.close()
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(
            target=_worker_main, args=(child, self._buffer_bytes), name="log-cleaner", daemon=True
        )
        process.start()
        child.close()
        self._process, self._pipe = process, parent
        return parent

    def clean(self, task: CleanTask, rate: float) -> CleanResult:
        pipe = self._start()
        pipe.send((task, rate))
        while not pipe.poll(0.2):
            if self._stop.is_set():
                self.close()
                raise CleanerStopped
            if self._process is None or not self._process.is_alive():
                self.close()
                raise RuntimeError("the log cleaner process died")
        try:
            ok, value = pipe.recv()
        except EOFError as exc:
            self.close()
            raise RuntimeError("the log cleaner process died") from exc
        if not ok:
            raise RuntimeError(f"log cleaner process: {value}")
        assert isinstance(value, CleanResult)
        return value

    def close(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        if self._process is not None:
            if self._process.is_alive():
                self._process.terminate()
            self._process.join(5)
            self._process = None


def _constant(value: float) -> Callable[[], float]:
    return lambda: value


def _worker_main(pipe: Connection, buffer_bytes: int) -> None:
    """The cleaner process: clean what the broker sends until the pipe closes.

    At the lowest CPU priority, as a batch job: on a busy machine the broker's
    requests come first, and the scheduler never lets the cleaner preempt them.
    """
    from headwater.log.offset_map import kernels

    with contextlib.suppress(OSError):
        os.nice(19)
    with contextlib.suppress(OSError, AttributeError):  # Linux only
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))

    kernels()
    cleaner: Cleaner | None = None
    never = threading.Event()
    while True:
        try:
            task, rate = pipe.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if cleaner is None:
            cleaner = Cleaner(buffer_bytes)
        cleaner.throttle = Throttler(_constant(float(rate)), never)
        try:
            pipe.send((True, cleaner.clean(task)))
        except Exception as exc:
            pipe.send((False, f"{type(exc).__name__}: {exc}"))


class Throttler:
    """Kafka's Throttler: sleeps so that bytes per second stay under the rate."""

    def __init__(self, rate: Callable[[], float], stop: threading.Event) -> None:
        self._rate = rate
        self._stop = stop
        self._start = time.monotonic()
        self._bytes = 0.0

    def __call__(self, size: int) -> None:
        if self._stop.is_set():
            raise CleanerStopped
        rate = self._rate()
        if math.isinf(rate):
            return
        self._bytes += size
        elapsed = time.monotonic() - self._start
        if elapsed > 1.0:  # a fresh window every second
            self._start, self._bytes = time.monotonic(), float(size)
            elapsed = 0.0
        wait = self._bytes / rate - elapsed
        if wait > 0:
            self._stop.wait(wait)


@dataclass(slots=True)
class CleanerStats:
    """What the metrics and operators see (Kafka's LogCleaner gauges)."""

    max_clean_time_secs: float = 0.0  # of the last round of every thread
    recopy_percent: float = 0.0  # bytes written / bytes read, last clean
    max_dirty_percent: float = 0.0  # dirtiest log seen at the last choice
    bytes_read: int = 0
    bytes_written: int = 0
    cleaned_logs: int = 0
    skipped_segments: int = 0


LogsSource = Callable[[], Iterable[tuple[str, int, Log]]]


class LogCleanerManager:
    """Runs the cleaner threads for the logs ``logs()`` lists (on ``loop``)."""

    def __init__(
        self, config: CleanerConfig, logs: LogsSource, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.config = config
        self.stats = CleanerStats()
        self._logs = logs
        self._loop = loop
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._in_progress: set[int] = set()  # id() of logs being cleaned

    def start(self) -> None:
        if not self.config.enable:
            log.info("log cleaner disabled (log.cleaner.enable=false)")
            return
        self._stop.clear()
        for i in range(self.config.threads):
            thread = threading.Thread(
                target=self._run, args=(i,), name=f"kafka-log-cleaner-thread-{i}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def reconfigure(self, config: CleanerConfig) -> None:
        """Dynamic ``log.cleaner.*`` changes: the rate at once, threads and buffer on restart."""
        old = self.config
        self.config = replace(config, enable=old.enable)
        if (config.threads, config.dedupe_buffer_size) != (old.threads, old.dedupe_buffer_size):
            # stop() waits for threads that may be waiting for this loop: not here
            threading.Thread(target=self._restart, name="log-cleaner-restart", daemon=True).start()
        self._wake.set()

    def _restart(self) -> None:
        self.stop()
        self.start()

    def wake(self) -> None:
        """Look for work now (a test, or a config change), not after the backoff."""
        self._wake.set()

    def stop(self) -> None:
        """Ask the threads to stop and wait for them (a clean in flight is discarded).

        Blocking: never call it on the loop the threads talk to (they would wait
        for it); the broker runs it in an executor.
        """
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads = []

    # -- on a cleaner thread ------------------------------------------------------------

    def _on_loop(self, fn: Callable[[], T], spent: list[float] | None = None) -> T:
        """Run ``fn`` on the loop and wait; its time on the loop is appended to ``spent``."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            started = time.perf_counter()
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the waiting thread
                future.set_exception(exc)
            finally:
                if spent is not None:
                    spent.append(time.perf_counter() - started)

        self._loop.call_soon_threadsafe(call)
        while True:
            try:
                return future.result(timeout=0.5)
            except concurrent.futures.TimeoutError:
                if self._stop.is_set():
                    raise CleanerStopped from None

    def _run(self, index: int) -> None:
        config = self.config
        buffer = max(config.dedupe_buffer_size // config.threads, 1 << 20)
        worker = CleanerProcess(buffer, self._stop)
        try:
            while not self._stop.is_set():
                try:
                    worked = self._clean_one(worker)
                except (CleanerStopped, RuntimeError):  # RuntimeError: the loop is closed
                    return
                except Exception:
                    log.exception("log cleaner thread %d failed; backing off", index)
                    worked = False
                if not worked:
                    self._wake.wait(self.config.backoff_ms / 1000)
                    self._wake.clear()
        finally:
            worker.close()

    def _clean_one(self, worker: CleanerProcess) -> bool:
        spent: list[float] = []  # the clean's steps on the event loop (each must stay short)
        chosen = self._on_loop(self._grab, spent)
        if chosen is None:
            return False
        name, target, pending = chosen
        started = time.monotonic()
        result: CleanResult | None = None
        try:
            result = worker.clean(pending.task, self.config.io_max_bytes_per_second)
        finally:
            # Whatever happened, the log must leave the cleaning state.
            final = result or CleanResult([], pending.task.first_dirty_offset)
            doomed: list[str] = []
            swapped = self._on_loop(lambda: self._finish(target, pending, final, doomed), spent)
        if swapped and final.groups:
            fsync_directory(pending.task.directory)
            delete_files(doomed)
        self._record(name, final, time.monotonic() - started, swapped, max(spent))
        return True

    def _record(
        self, name: str, result: CleanResult, elapsed: float, swapped: bool, on_loop: float
    ) -> None:
        stats = self.stats
        stats.max_clean_time_secs = elapsed
        stats.bytes_read += result.bytes_read
        stats.bytes_written += result.bytes_written
        stats.skipped_segments += len(result.skipped)
        if result.bytes_read:
            stats.recopy_percent = 100.0 * result.bytes_written / result.bytes_read
        if not swapped:
            log.info("log cleaner: %s changed while cleaning; the clean was discarded", name)
            return
        stats.cleaned_logs += 1
        mb = result.bytes_read / 1e6
        log.info(
            "log cleaner cleaned %s: %d bytes in %d segments -> %d bytes in %d segments "
            "(%.1f%% of the size), %.1f MB in %.2f s (%.1f MB/s), cleaned to offset %d "
            "(longest step on the event loop %.1f ms)",
            name,
            result.size_before,
            sum(len(g.replaces) for g in result.groups),
            result.size_after,
            len(result.groups),
            100.0 * result.size_after / max(result.size_before, 1),
            mb,
            elapsed,
            mb / max(elapsed, 1e-9),
            result.end_offset,
            on_loop * 1000,
        )

    # -- on the loop --------------------------------------------------------------------

    def _grab(self) -> tuple[str, Log, PendingClean] | None:
        """The dirtiest cleanable log, marked in progress, with its clean task."""
        now_ms = int(time.time() * 1000)
        best: tuple[float, str, Log] | None = None
        max_dirty = 0.0
        for topic, partition, candidate in self._logs():
            if id(candidate) in self._in_progress:
                continue
            try:
                state = candidate.cleanable_state(now_ms)
            except Exception as exc:  # an unreadable log must not stop the others
                log.warning("log cleaner cannot look at %s-%d: %s", topic, partition, exc)
                continue
            if state is None or state.dirty_bytes == 0:
                continue
            ratio = state.dirty_ratio
            max_dirty = max(max_dirty, ratio)
            due = ratio >= candidate.config.min_cleanable_dirty_ratio or state.overdue
            if due and (best is None or ratio > best[0]):
                best = (ratio, f"{topic}-{partition}", candidate)
        self.stats.max_dirty_percent = 100.0 * max_dirty
        if best is None:
            return None
        _, name, chosen = best
        if chosen.config.delete:
            # compact,delete: expired segments go first (Kafka's cleaner deletes
            # before it cleans), or merging would keep them alive with newer data
            chosen.apply_retention(now_ms)
        state = chosen.cleanable_state(now_ms)
        if state is None:
            return None
        self._in_progress.add(id(chosen))
        return name, chosen, chosen.begin_clean(now_ms, state)

    def _finish(
        self, target: Log, pending: PendingClean, result: CleanResult, doomed: list[str]
    ) -> bool:
        self._in_progress.discard(id(target))
        return target.finish_clean(pending, result, doomed)
