"""What the partition campaign says about a duplicated idempotent record (issue 31).

A duplicate found by the campaign's consumer is only a symptom; to tell a broker
bug from documented client behaviour the report needs the stored batches' producer
id, epoch and sequence, the client's own account of epoch bumps, the faults in
progress and the brokers' lines about the partition. This module holds the pure
parts (no sockets): reading the copies back from segment files, classifying them,
and timestamping the lines the clients and brokers print.

Classification: two copies of one value under *different* producer ids/epochs, where
librdkafka logged acquiring the newer one in place of the older one, are what
librdkafka's "drain and bump" does to a batch it could not know was persisted (it
renumbers every unacknowledged message from sequence 0 in the new epoch, and a
broker, Kafka's included, must accept sequence 0 of a new epoch). Anything else
(copies in the same epoch, no logged bump, different producer ids) is a real
duplicate that the broker should have refused.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from headwater.records.batch import MAX_SEQUENCE
from headwater.records.record import decode_batches

#: librdkafka's ``rd_kafka_pid2str``: ``PID{Id:1000,Epoch:0}``.
_PID = re.compile(r"PID\{Id:(-?\d+),Epoch:(-?\d+)\}")
#: librdkafka's GETPID debug line: ``Acquired PID{...} (previous PID{...})``.
_ACQUIRED = re.compile(r"Acquired (PID\{[^}]*\})(?: \(previous (PID\{[^}]*\})\))?")
#: An idempotent producer bumps its own epoch, without a request, once drained
#: (``rd_kafka_idemp_drain_done``): ``All partitions drained, bumped epoch to PID{...}``.
_BUMPED = re.compile(r"bumped epoch to (PID\{[^}]*\})")


@dataclass(frozen=True, slots=True)
class StoredCopy:
    """One stored copy of a value: where it is and what its batch header says."""

    value: int
    offset: int
    producer_id: int
    producer_epoch: int
    sequence: int  # this record's sequence (base sequence + offset delta)
    base_sequence: int
    batch_offsets: tuple[int, int]
    partition_leader_epoch: int
    timestamp_ms: int

    def describe(self) -> str:
        return (
            f"offset {self.offset} (pid {self.producer_id} epoch {self.producer_epoch} "
            f"seq {self.sequence}; batch {self.batch_offsets[0]}-{self.batch_offsets[1]} "
            f"base seq {self.base_sequence}, leader epoch {self.partition_leader_epoch}, "
            f"created {wall(self.timestamp_ms / 1000)})"
        )


def wall(seconds: float) -> str:
    """Wall-clock time with milliseconds, as the campaign's lines print it."""
    return time.strftime("%H:%M:%S", time.localtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}"


def stored_copies(partition_dir: Path, values: Iterable[int]) -> dict[int, list[StoredCopy]]:
    """Every stored copy of ``values`` in one replica's partition directory, in offset
    order. Control batches and values that are not integers are skipped."""
    wanted = set(values)
    found: dict[int, list[StoredCopy]] = {v: [] for v in wanted}
    for segment in sorted(partition_dir.glob("*.log")):
        for batch in decode_batches(segment.read_bytes(), check_crc=False):
            header = batch.header
            if header.is_control:
                continue
            for record in batch.records:
                try:
                    value = int(record.value or b"")
                except ValueError:
                    continue
                if value not in wanted:
                    continue
                delta = record.offset - header.base_offset
                sequence = (
                    (header.base_sequence + delta) % (MAX_SEQUENCE + 1)
                    if header.base_sequence >= 0
                    else -1
                )
                found[value].append(
                    StoredCopy(
                        value,
                        record.offset,
                        header.producer_id,
                        header.producer_epoch,
                        sequence,
                        header.base_sequence,
                        (header.base_offset, header.last_offset),
                        header.partition_leader_epoch,
                        record.timestamp,
                    )
                )
    return found


def logged_epoch_bumps(lines: Iterable[str]) -> list[tuple[int, int, int, int]]:
    """(previous id, previous epoch, new id, new epoch) of every epoch bump librdkafka
    logged: the idempotent producer's own (``bumped epoch to``, after a drain), or a
    PID acquired in place of an earlier one (InitProducerId: a transactional
    producer's bump, or a reset)."""
    bumps = []
    for line in lines:
        bumped = _BUMPED.search(line)
        new_pid = _PID.match(bumped.group(1)) if bumped is not None else None
        if new_pid is not None:
            pid, epoch = int(new_pid.group(1)), int(new_pid.group(2))
            bumps.append((pid, epoch - 1, pid, epoch))
            continue
        match = _ACQUIRED.search(line)
        if match is None or match.group(2) is None:
            continue
        new, old = _PID.match(match.group(1)), _PID.match(match.group(2))
        if new is None or old is None:
            continue
        bumps.append((int(old.group(1)), int(old.group(2)), int(new.group(1)), int(new.group(2))))
    return bumps


def is_epoch_bump_duplicate(
    copies: Sequence[StoredCopy], bumps: Sequence[tuple[int, int, int, int]]
) -> bool:
    """True when each later copy belongs to a newer producer id/epoch than the copy
    before it, and the client logged moving from that copy's id/epoch (or a later
    epoch of it) to the later copy's id at that epoch or an earlier one: librdkafka
    re-sending a possibly persisted batch after a bump. Copies written under one
    id and epoch are never explained this way."""
    if len(copies) < 2:
        return False
    for older, newer in itertools.pairwise(copies):
        if older.producer_id < 0 or newer.producer_id < 0:
            return False
        if older.producer_id == newer.producer_id and newer.producer_epoch <= older.producer_epoch:
            return False
        if not any(
            old_pid == older.producer_id
            and old_epoch >= older.producer_epoch
            and new_pid == newer.producer_id
            and new_epoch <= newer.producer_epoch
            and (old_pid != new_pid or new_epoch > old_epoch)
            for old_pid, old_epoch, new_pid, new_epoch in bumps
        ):
            return False
    return True


class TimedLines:
    """Lines with the wall-clock time they were seen, bounded (oldest dropped)."""

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self.entries: list[tuple[float, str, str]] = []  # (wall seconds, source, line)
        self._lock = threading.Lock()

    def add(self, source: str, line: str, at: float | None = None) -> None:
        with self._lock:
            self.entries.append((time.time() if at is None else at, source, line))
            if len(self.entries) > self.limit:
                del self.entries[: len(self.entries) - self.limit]

    def between(self, start: float, end: float, keep: Any = None, limit: int = 60) -> list[str]:
        """The lines seen in [start, end] that ``keep(line)`` accepts (all when None),
        formatted ``HH:MM:SS.mmm source: line``; at most ``limit``, the first ones."""
        with self._lock:
            chosen = [
                f"{wall(at)} {source}: {line}"
                for at, source, line in self.entries
                if start <= at <= end and (keep is None or keep(line))
            ]
        if len(chosen) > limit:
            chosen = [*chosen[:limit], f"... {len(chosen) - limit} more"]
        return chosen

    def lines(self) -> list[str]:
        with self._lock:
            return [line for _, _, line in self.entries]


class ClientLogHandler(logging.Handler):
    """Keeps a librdkafka client's log lines (confluent-kafka's ``logger`` setting)."""

    def __init__(self, into: TimedLines, source: str) -> None:
        super().__init__(logging.DEBUG)
        self.into = into
        self.source = source

    def emit(self, record: logging.LogRecord) -> None:
        self.into.add(self.source, record.getMessage(), record.created)


class HasLines(Protocol):
    lines: list[str]


class LineClock:
    """Timestamps the lines broker processes print (they print none themselves): a
    thread copies each broker's new lines every ``interval_s``; a restarted broker
    (a new ``lines`` list) is followed from its first line."""

    def __init__(self, brokers: Sequence[HasLines], into: TimedLines, interval_s: float = 0.2):
        self.brokers = brokers
        self.into = into
        self.interval_s = interval_s
        self._seen: dict[int, tuple[int, int]] = {}  # broker -> (id of its list, lines read)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-line-clock", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sweep()

    def sweep(self) -> None:
        for i, broker in enumerate(self.brokers):
            lines = broker.lines
            ident, read = self._seen.get(i, (id(lines), 0))
            if ident != id(lines):
                read = 0
            new = lines[read:]
            for line in new:
                self.into.add(f"broker {i}", line)
            self._seen[i] = (id(lines), read + len(new))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sweep()
