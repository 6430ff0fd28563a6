"""The broker's data directory: the topic registry, the partition logs, housekeeping.

Topics live in ``topics.json`` (name, random topic id, partition count,
configs), written atomically so a crash leaves the old or the new registry,
never half of one; topic ids must survive restarts because Fetch v13+ and
Metadata v10+ clients address topics by id. Partition data lives in
``<topic>-<partition>/`` directories, each a lazily loaded :class:`Log`.

A ``.clean_shutdown`` marker written by :meth:`close` and consumed by
:meth:`open` tells whether the active segments must be recovered.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from headwater.gc_policy import COLLECTOR
from headwater.log.cleaner_swap import fsync_directory
from headwater.log.config import LogConfig
from headwater.log.dir_lock import DataDirLock
from headwater.log.disk_space import DirSpace, SpaceFloor, is_full_disk_error
from headwater.log.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from headwater.log.handles import FileHandleCache
from headwater.log.log import Log
from headwater.log.replica_move import (
    FUTURE_DIR_SUFFIX,
    DirSync,
    recover_moves,
    side_dir_name,
    swap_in,
)

logger = logging.getLogger(__name__)

REGISTRY_FILE = "topics.json"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
REGISTRY_VERSION = 1
#: Kafka's suffix for a partition directory moved aside as a stray: ``<topic>-<p>.<uuid>-stray``.
STRAY_DIR_SUFFIX = "-stray"
_STRAY_DIR = re.compile(r"\S+-\d+\.[0-9a-f]{32}" + re.escape(STRAY_DIR_SUFFIX))
#: What a partition directory holds: a directory of anything else is not one of ours.
_PARTITION_FILE = re.compile(
    r"\d{20}(\.[a-z]+)+"  # segments, indexes, snapshots, and their cleaner/swap/tmp forms
    r"|(leader-epoch-checkpoint|log-start-offset|cleaner-offset-checkpoint|partition\.metadata)"
    r"(\.tmp)?"
)
CLOSE_FLUSH_THREADS = 16  # concurrent fsyncs at a clean stop
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LogDirStatus:
    """One log directory as health and metrics see it."""

    path: str
    full: bool
    usable_bytes: int
    total_bytes: int
    #: Why the directory went offline after an I/O error (KIP-112), or None.
    offline: str | None = None


def validate_topic_name(name: str) -> None:
    """Kafka's rule: 1..249 of [a-zA-Z0-9._-], and not "." or ".."."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters, more than {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


def _collision_key(name: str) -> str:
    # Kafka's metric names turn '.' into '_', so it refuses names that differ only there.
    return name.replace(".", "_")


def _partition_names(directory: Path) -> list[tuple[str, int]]:
    """(topic, partition) of every ``<topic>-<partition>`` directory in ``directory``."""
    found: list[tuple[str, int]] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            topic, sep, index = entry.name.rpartition("-")
            if sep and index.isdigit() and str(int(index)) == index and entry.is_dir():
                found.append((topic, int(index)))
    return found


def _same_dir(path: str | os.PathLike[str]) -> str:
    """A directory as compared: absolute, symlinks resolved, no trailing separator, so
    that ``data/``, ``./data`` and a symlink to it name one directory."""
    return os.path.realpath(path)


@dataclass(slots=True)
class ReplicaMove:
    """One replica being moved to another data directory (AlterReplicaLogDirs): its
    ``<topic>-<p>.<uuid>-future`` copy and how far the copy got."""

    topic: str
    partition: int
    log: Log
    source: str
    destination: str
    future: Path
    sync: DirSync
    #: The log's generation when the last copy round started (see ``Log.generation``).
    generation: int = -1
    #: The log end offset when the last finished copy round started: copied up to here.
    copied_end: int = 0
    cancelled: bool = False


@dataclass(slots=True)
class ExtraDir:
    """A further data directory (``log.dirs=A,B,C``: B and C), holding partitions only:
    its own lock, ``meta.properties`` (written by the cluster node), clean-shutdown
    marker and free-space floor. The first directory also holds the topic registry and
    the broker's checkpoints, so it failing stops the broker as the last one does."""

    path: Path
    lock: DataDirLock
    space: DirSpace
    clean_shutdown: bool = False
    offline: str | None = None


class LogDirectory:
    """Topics and the logs of their partitions under one data directory (JBOD: several;
    see :class:`ExtraDir`)."""

    def __init__(self, path: Path, config: LogConfig, extra_dirs: Iterable[Path] = ()) -> None:
        self.path = Path(path)
        self.config = config
        self.handles = FileHandleCache(config.file_handle_cache_size)
        self._log_io_error = self._on_io_error
        self.clean_shutdown = False  # known after open()
        self._topics: dict[str, TopicInfo] = {}
        self._topic_ids: dict[uuid.UUID, TopicInfo] = {}
        self._topic_configs: dict[str, LogConfig] = {}
        self._logs: dict[tuple[str, int], Log] = {}
        #: Log objects ever created here: the scrubber lists the logs only when it moved.
        self.logs_created = 0
        self._opened = False
        self.lock = DataDirLock(self.path)
        self.space = DirSpace(str(self.path), SpaceFloor(config.free_space_min_bytes))
        #: Why the first directory is offline (an I/O error that was not a full disk), or None.
        self.primary_offline: str | None = None
        self.extra = [
            ExtraDir(
                Path(p),
                DataDirLock(Path(p)),
                DirSpace(str(p), SpaceFloor(config.free_space_min_bytes)),
            )
            for p in extra_dirs
        ]
        #: Where each partition placed in an extra directory lives (others: the first).
        self._placement: dict[tuple[str, int], ExtraDir] = {}
        #: With extra directories: the partitions found in the first one at open.
        self._in_primary: set[tuple[str, int]] = set()
        #: Where AlterReplicaLogDirs asked a partition not hosted here to be created.
        self._preferred: dict[tuple[str, int], str] = {}
        #: Replica moves between directories under way (AlterReplicaLogDirs).
        self.moves: dict[tuple[str, int], ReplicaMove] = {}
        #: Extra directories that could not be opened at start (offline from the start).
        self._failed_at_open: list[ExtraDir] = []
        #: Each topic's partition count when the directory was opened: a replica of
        #: one of those partitions found in no online directory may be on a directory
        #: that failed at start, and must not be created again empty elsewhere.
        self._partitions_at_open: dict[str, int] = {}
        #: Called once, from the thread that met the error, when the directory goes
        #: offline: (directory, reason). The broker stops when no directory is left.
        self.on_offline: Callable[[str, str], None] | None = None
        #: Makes "take a directory offline and tell ``on_offline``" happen once per
        #: directory when several threads (the loop, workers, the cleaner, the scrubber)
        #: meet its failing disk at the same moment.
        self._fail_lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------

    def open(self) -> None:
        """Lock the directory, read the registry and note (and consume) the
        clean-shutdown marker. Raises DataDirLockedError when another process
        holds the directory."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()
        self._placement = {}
        self._failed_at_open = []
        for extra in self.extra:
            try:
                extra.path.mkdir(parents=True, exist_ok=True)
                extra.lock.acquire()
                extra_marker = extra.path / CLEAN_SHUTDOWN_FILE
                extra.clean_shutdown = extra_marker.exists()
                if extra.clean_shutdown:
                    extra_marker.unlink()
                    fsync_directory(extra.path)
                _partition_names(extra.path)
            except OSError as exc:
                # KIP-112 at start: a directory that cannot be opened is offline and
                # the broker starts on the others (the first one must open: it holds
                # the registry and the checkpoints).
                extra.offline = f"cannot be opened at start: {exc}"
                self._failed_at_open.append(extra)
                logger.error("data directory %s is offline: %s", extra.path, extra.offline)
        if self.extra:
            for settled in recover_moves(self.online_dirs):
                logger.info("settled a replica move a stop interrupted: %s", settled)
            self._placement = {
                (topic, partition): extra
                for extra in self.extra
                if extra.offline is None
                for topic, partition in _partition_names(extra.path)
            }
        self._in_primary = set(_partition_names(self.path)) if self.extra else set()
        self.moves = {}
        marker = self.path / CLEAN_SHUTDOWN_FILE
        self.clean_shutdown = marker.exists()
        if self.clean_shutdown:
            marker.unlink()
            fsync_directory(self.path)
        self._topics = {}
        registry = self.path / REGISTRY_FILE
        if registry.exists():
            data = json.loads(registry.read_text())
            for name, entry in data["topics"].items():
                self._topics[name] = TopicInfo(
                    name=name,
                    topic_id=uuid.UUID(entry["topic_id"]),
                    num_partitions=int(entry["num_partitions"]),
                    configs=dict(entry.get("configs", {})),
                )
        self._topic_ids = {info.topic_id: info for info in self._topics.values()}
        self._partitions_at_open = {n: info.num_partitions for n, info in self._topics.items()}
        self._topic_configs = {
            name: self.config.with_topic_overrides(info.configs)
            for name, info in self._topics.items()
        }
        self._logs = {}
        self._opened = True

    def close(self) -> None:
        """Flush and release every loaded log, then mark the shutdown as clean.

        The fsyncs run on a thread pool: thousands of freshly written logs
        took seconds each way one after the other, and fsync releases the GIL.
        A directory this process could not lock is left alone: it is another's.
        A directory whose disk fails during the close goes offline as it would
        at any other time (no clean-shutdown marker there) and the close goes on
        with the others: an error out of here made a stop end in a traceback
        with the locks held and the healthy directories left unmarked.
        """
        if not self.lock.held:
            return
        for extra in self.extra:
            if extra.lock.held and extra.offline is None:
                loaded = list(self._logs.items())
                for log in [log for key, log in loaded if self._placement.get(key) is extra]:
                    self._close_log(log, str(extra.path))
                if extra.offline is None:
                    self._mark_clean(extra.path)
            if extra.lock.held:
                extra.lock.release()
        if self.primary_offline is None:
            written = [log for log in self._logs.values() if log.has_unflushed_data]
            if len(written) > 1:
                with ThreadPoolExecutor(max_workers=CLOSE_FLUSH_THREADS) as pool:
                    list(pool.map(self._flush_log, written))
        for log in list(self._logs.values()):
            self._close_log(log, str(self.path))
        self.handles.clear()
        # A failed disk: nothing more is written, and no clean-shutdown marker,
        # so that the next start recovers (and checks) what is there.
        if self.primary_offline is None:
            self._mark_clean(self.path)
        self._opened = False
        self.lock.release()

    def _flush_log(self, log: Log) -> None:
        """One flush at close: a failing disk is told (by the log), not raised."""
        try:
            log.flush()
        except KafkaStorageError:
            pass
        except OSError as exc:
            self._on_io_error(log, exc)

    def _close_log(self, log: Log, where: str) -> None:
        """One log's close: an I/O error takes its directory offline instead of ending
        the close of every other log."""
        try:
            log.close()
        except KafkaStorageError:
            log.offline = log.offline or "closing it failed"
            log.close()  # offline: lets go of the files without touching the disk
        except OSError as exc:
            self._on_io_error_in(where, log, exc)
            log.offline = log.offline or f"{exc.strerror or exc}"
            log.close()

    def _mark_clean(self, directory: Path) -> None:
        """The clean-shutdown marker; a directory that cannot take it goes offline."""
        try:
            (directory / CLEAN_SHUTDOWN_FILE).touch()
            fsync_directory(directory)
        except OSError as exc:
            if not is_full_disk_error(exc):
                self.fail(f"{exc.strerror or exc} on {exc.filename or directory}", str(directory))

    # -- topics ---------------------------------------------------------------------------

    def topics(self) -> Mapping[str, TopicInfo]:
        return MappingProxyType(self._topics)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._topic_ids.get(topic_id)

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        """Register a topic; ``topic_id`` is given when a cluster already chose it."""
        validate_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        key = _collision_key(name)
        for existing in self._topics:
            if _collision_key(existing) == key:
                raise InvalidTopicError(f"topic {name!r} collides with existing topic {existing!r}")
        if num_partitions < 1:
            raise InvalidPartitionsError(
                f"number of partitions must be at least 1, not {num_partitions}"
            )
        configs = dict(configs or {})
        topic_config = self.config.with_topic_overrides(configs)  # raises on a bad value
        # Left behind by a delete that crashed before removing the data.
        self._remove_leftovers(name, range(num_partitions))
        info = TopicInfo(name, topic_id or uuid.uuid4(), num_partitions, configs)
        self._topics[name] = info
        self._topic_ids[info.topic_id] = info
        self._topic_configs[name] = topic_config
        self._write_registry()
        return info

    def delete_topic(self, name: str) -> None:
        """Forget the topic, then remove its partition directories."""
        info = self._require_topic(name)
        del self._topics[name]
        del self._topic_ids[info.topic_id]
        del self._topic_configs[name]
        self._write_registry()
        for partition in range(info.num_partitions):
            log = self._logs.pop((name, partition), None)
            if log is not None:
                log.delete()
            else:
                path = self._partition_path(name, partition)
                self.handles.forget_under(path)
                shutil.rmtree(path, ignore_errors=True)
            self._placement.pop((name, partition), None)

    def delete_partition(self, name: str, partition: int) -> None:
        """Remove one partition's replica here (it was reassigned away); the topic stays."""
        log = self._logs.pop((name, partition), None)
        if log is not None:
            log.delete()
        else:
            path = self._partition_path(name, partition)
            self.handles.forget_under(path)
            shutil.rmtree(path, ignore_errors=True)
        self._placement.pop((name, partition), None)

    def create_partitions(self, name: str, new_total: int) -> TopicInfo:
        info = self._require_topic(name)
        if new_total <= info.num_partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {info.num_partitions} partitions; {new_total} is not more"
            )
        self._remove_leftovers(name, range(info.num_partitions, new_total))
        updated = TopicInfo(name, info.topic_id, new_total, info.configs)
        self._topics[name] = updated
        self._topic_ids[info.topic_id] = updated
        self._write_registry()
        return updated

    def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        """Replace a topic's overrides, persist them, and apply them to its open logs now.

        Logs read ``config`` on every append, roll and retention pass, so the
        new values take effect at once, as Kafka applies topic configs live.
        """
        info = self._require_topic(name)
        topic_config = self.config.with_topic_overrides(configs)  # raises on a bad value
        updated = TopicInfo(name, info.topic_id, info.num_partitions, dict(configs))
        self._topics[name] = updated
        self._topic_ids[info.topic_id] = updated
        self._topic_configs[name] = topic_config
        self._write_registry()
        self._apply_configs(name)
        return updated

    def alter_base_config(self, config: LogConfig) -> None:
        """New broker-wide log defaults (dynamic ``log.*`` configs), applied to every topic now."""
        self.config = config
        self.space.floor = SpaceFloor(config.free_space_min_bytes)
        for extra in self.extra:
            extra.space.floor = SpaceFloor(config.free_space_min_bytes)
        for name, info in self._topics.items():
            self._topic_configs[name] = config.with_topic_overrides(info.configs)
        for (topic, _partition), log in self._logs.items():
            log.config = self._topic_configs[topic]

    def _apply_configs(self, name: str) -> None:
        topic_config = self._topic_configs[name]
        for (topic, _partition), log in self._logs.items():
            if topic == name:
                log.config = topic_config

    # -- stray replicas (what the cluster no longer wants here) ---------------------------

    def partition_dirs(self) -> list[tuple[str, int, uuid.UUID | None]]:
        """(topic, partition, topic id) of every partition directory on disk.

        The id is the registry's; None for a directory whose topic the registry
        does not know (left by a deletion that crashed half way). Such a
        directory is listed only if it holds nothing but partition files, so
        that a directory someone else put here is never taken for one.
        """
        found: list[tuple[str, int, uuid.UUID | None]] = []
        for directory in self.online_dirs:
            found.extend(self._partition_dirs_in(directory))
        return sorted(found, key=lambda t: (t[0], t[1]))

    def _partition_dirs_in(self, directory: Path) -> list[tuple[str, int, uuid.UUID | None]]:
        found: list[tuple[str, int, uuid.UUID | None]] = []
        with os.scandir(directory) as entries:
            for entry in entries:
                topic, sep, index = entry.name.rpartition("-")
                if not sep or not index.isdigit() or str(int(index)) != index:
                    continue  # not <topic>-<partition> as this broker names them
                if not entry.is_dir(follow_symlinks=False):
                    continue
                info = self._topics.get(topic)
                if info is None and not self._only_partition_files(entry.path, topic):
                    continue
                found.append((topic, int(index), info.topic_id if info else None))
        return found

    @staticmethod
    def _only_partition_files(path: str, topic: str) -> bool:
        try:
            validate_topic_name(topic)
        except InvalidTopicError:
            return False
        with os.scandir(path) as files:
            return all(f.is_file() and _PARTITION_FILE.fullmatch(f.name) for f in files)

    def move_stray(self, topic: str, partition: int) -> Path:
        """Rename the partition's directory to ``<topic>-<p>.<uuid>-stray`` (Kafka's name,
        capped at 255 characters), out of reach of every reader, and forget its log."""
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            log.close()
        source = self._partition_path(topic, partition)
        self.handles.forget_under(source)
        tail = f"-{partition}.{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}"
        target = source.parent / (topic[: 255 - len(tail)] + tail)
        os.rename(source, target)
        fsync_directory(source.parent)
        self._placement.pop((topic, partition), None)
        return target

    def forget_topics(self, names: Iterable[str]) -> None:
        """Drop topics from the registry (written once), leaving their directories
        (moved aside as strays)."""
        changed = False
        for name in names:
            info = self._topics.pop(name, None)
            if info is None:
                continue
            changed = True
            self._topic_ids.pop(info.topic_id, None)
            self._topic_configs.pop(name, None)
            for key in [k for k in self._logs if k[0] == name]:
                self._logs.pop(key).close()
        if changed:
            self._write_registry()

    def stray_dirs(self) -> list[Path]:
        """The directories moved aside as strays (by this run or one that crashed)."""
        found: list[Path] = []
        for directory in self.online_dirs:
            with os.scandir(directory) as entries:
                found.extend(
                    Path(e.path)
                    for e in entries
                    if _STRAY_DIR.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
                )
        return sorted(found)

    def delete_stray_dirs(self) -> int:
        """Delete every stray directory; how many went. Safe off the event loop: nothing
        else touches them."""
        doomed = self.stray_dirs()
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)
        return sum(1 for path in doomed if not path.exists())

    def _remove_leftovers(self, topic: str, partitions: range) -> None:
        """Remove partition directories of ``topic`` in ``partitions`` that already exist.

        One directory listing instead of one ``rmtree`` per partition: at
        100,000 partitions the per-partition probes took seconds.
        """
        prefix = topic + "-"
        doomed: list[str] = []
        for directory in self.online_dirs:
            with os.scandir(directory) as entries:
                doomed.extend(
                    entry.path
                    for entry in entries
                    if entry.name.startswith(prefix)
                    and entry.name[len(prefix) :].isdigit()
                    and int(entry.name[len(prefix) :]) in partitions
                    and entry.is_dir()
                )
        for p in partitions:
            self._placement.pop((topic, p), None)
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)

    def _require_topic(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return info

    def _write_registry(self) -> None:
        data = {
            "version": REGISTRY_VERSION,
            "topics": {
                name: {
                    "topic_id": str(info.topic_id),
                    "num_partitions": info.num_partitions,
                    "configs": dict(info.configs),
                }
                for name, info in sorted(self._topics.items())
            },
        }
        target = self.path / REGISTRY_FILE
        tmp = self.path / (REGISTRY_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        fsync_directory(self.path)

    # -- logs -----------------------------------------------------------------------------

    @property
    def dirs(self) -> list[Path]:
        """Every data directory, the first (registry, checkpoints) first."""
        return [self.path, *(extra.path for extra in self.extra)]

    @property
    def online_dirs(self) -> list[Path]:
        """The data directories that are not offline: the ones to read or scan."""
        primary = [self.path] if self.primary_offline is None else []
        return primary + [extra.path for extra in self.extra if extra.offline is None]

    def _partition_path(self, topic: str, partition: int) -> Path:
        extra = self._placement.get((topic, partition))
        return (extra.path if extra is not None else self.path) / f"{topic}-{partition}"

    def _place(self, topic: str, partition: int) -> None:
        """A partition new here goes to the online directory holding the fewest
        partitions (Kafka's rule); its directory is found again at the next start."""
        key = (topic, partition)
        if not self.extra or key in self._placement or self._partition_path(*key).is_dir():
            return
        if self._failed_at_open and partition < self._partitions_at_open.get(topic, 0):
            # Kafka refuses to create a log that is not new while a directory is
            # offline (LogManager.getOrCreateLog, isNew=false): its copy may be there.
            self._placement[key] = self._failed_at_open[0]
            logger.warning("%s-%d is in no online data directory; taking it for a replica "
                           "of the directory that failed at start", topic, partition)  # fmt: skip
            return
        preferred = self._preferred.pop(key, None)
        if preferred is not None and self.dir_offline(preferred) is None:
            extra = self._extra_named(preferred)
            if extra is not None:
                self._placement[key] = extra
                return
            if self._is_primary(preferred):
                return
        counts: dict[int, int] = {}
        for placed in self._placement.values():
            counts[id(placed)] = counts.get(id(placed), 0) + 1
        primary = len(self._in_primary | {k for k in self._logs if k not in self._placement})
        choices: list[tuple[int, int, ExtraDir | None]] = []
        if self.primary_offline is None:
            choices.append((primary, 0, None))
        for i, extra in enumerate(self.extra, start=1):
            if extra.offline is None:
                choices.append((counts.get(id(extra), 0), i, extra))
        if not choices:
            return
        chosen = min(choices, key=lambda c: (c[0], c[1]))[2]
        if chosen is not None:
            self._placement[key] = chosen

    def dir_of(self, topic: str, partition: int) -> str:
        """The data directory holding (or to hold) the partition."""
        extra = self._placement.get((topic, partition))
        return str(extra.path if extra is not None else self.path)

    def existing_log(self, topic: str, partition: int) -> Log | None:
        """The log of ``topic``-``partition`` if that partition exists, else None."""
        info = self._topics.get(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            return None
        return self.log(topic, partition)

    def log(self, topic: str, partition: int) -> Log:
        """The partition's log, created (not loaded) on first request."""
        log = self._logs.get((topic, partition))
        if log is not None:
            return log
        info = self._topics.get(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
        self._place(topic, partition)
        extra = self._placement.get((topic, partition))
        log = Log(
            self._partition_path(topic, partition),
            self._topic_configs[topic],
            self.handles,
            topic_id=info.topic_id,
            recover=not (extra.clean_shutdown if extra is not None else self.clean_shutdown),
        )
        log.on_io_error = self._log_io_error
        self._logs[(topic, partition)] = log
        self.logs_created += 1
        # After it is listed: a directory failing meanwhile (another thread) either
        # saw this log in its list or set the reason read here.
        log.offline = extra.offline if extra is not None else self.primary_offline
        COLLECTOR.long_lived_created()
        return log

    # -- moving replicas between directories (AlterReplicaLogDirs, KIP-113) ---------------

    def is_log_dir(self, path: str) -> bool:
        """Whether ``path`` names one of this broker's data directories."""
        return self._is_primary(path) or self._extra_named(path) is not None

    def hosts(self, topic: str, partition: int) -> bool:
        """Whether a replica of the partition lives here: its log is open or its
        directory exists (a partition never written to has neither)."""
        key = (topic, partition)
        return key in self._logs or any(
            (d / f"{topic}-{partition}").is_dir() for d in self.online_dirs
        )

    def prefer_dir(self, topic: str, partition: int, path: str) -> None:
        """Create the partition in ``path`` when it is first placed here (Kafka's
        ``maybeUpdatePreferredLogDir``: a move asked for before the replica exists)."""
        if (topic, partition) in self._logs and self._same(self.dir_of(topic, partition), path):
            return
        self._preferred[(topic, partition)] = path

    def _same(self, a: str, b: str) -> bool:
        return a == b or _same_dir(a) == _same_dir(b)

    def _dir_path(self, path: str) -> Path:
        extra = self._extra_named(path)
        return extra.path if extra is not None else self.path

    def begin_move(self, topic: str, partition: int, destination: str) -> ReplicaMove | None:
        """Start moving a hosted partition to ``destination`` (one of ``dirs``); None
        when it is there already. A move to another directory under way is cancelled
        (Kafka: the newest destination wins); one to the same directory is returned."""
        key = (topic, partition)
        current = self.moves.get(key)
        if current is not None:
            if self._same(current.destination, destination):
                return current
            self.cancel_move(current)
        source = self.dir_of(topic, partition)
        if self._same(source, destination):
            return None
        log = self.log(topic, partition)
        log.log_end_offset  # noqa: B018 - load now: a load's recovery cuts the tail in place
        target = self._dir_path(destination)
        future = target / side_dir_name(topic, partition, FUTURE_DIR_SUFFIX)
        move = ReplicaMove(
            topic, partition, log, source, str(target), future,
            DirSync(self._partition_path(topic, partition), future),
        )  # fmt: skip
        self.moves[key] = move
        return move

    def move_is_current(self, move: ReplicaMove) -> bool:
        """The move still stands: not cancelled, the log not deleted or replaced, and
        neither directory offline."""
        key = (move.topic, move.partition)
        return (
            not move.cancelled
            and self.moves.get(key) is move
            and self._logs.get(key) is move.log
            and move.log.offline is None
            and self.dir_offline(move.destination) is None
        )

    def cancel_move(self, move: ReplicaMove) -> None:
        """Stop a move; its copy is deleted by the task that runs it (off the loop)."""
        move.cancelled = True
        if self.moves.get((move.topic, move.partition)) is move:
            del self.moves[(move.topic, move.partition)]

    def complete_move(self, move: ReplicaMove) -> Path:
        """The swap, on the log's thread (the event loop), so no append falls between
        the last copy and the switch: close the log (flushed, producer snapshot taken),
        copy what was added since the last round, rename (see ``replica_move``), and
        point the log at its new home. Returns the old directory, renamed aside, to
        delete off the loop. The caller checked ``move.generation`` is still the log's:
        only appends happened since the last round, so the copy is a prefix."""
        key = (move.topic, move.partition)
        log = move.log
        source = self._partition_path(move.topic, move.partition)
        target = Path(move.destination) / f"{move.topic}-{move.partition}"
        log.close()
        move.sync.sync(final=True)
        aside = swap_in(source, move.future, target)
        self.handles.forget_under(source)
        extra = self._extra_named(move.destination)
        if extra is not None:
            self._placement[key] = extra
            self._in_primary.discard(key)
        else:
            self._placement.pop(key, None)
            self._in_primary.add(key)
        log.relocate(target)
        log.on_io_error = self._log_io_error
        self.moves.pop(key, None)
        return aside

    def future_replicas(self) -> list[tuple[str, int, str, Path, int]]:
        """(topic, partition, destination dir, future dir, offset lag) of every move
        under way, for DescribeLogDirs (``is_future_key``)."""
        out = []
        for move in list(self.moves.values()):
            lag = max(0, move.log.log_end_offset - move.copied_end) if move.log.is_loaded else 0
            out.append((move.topic, move.partition, move.destination, move.future, lag))
        return out

    # -- free space and failing disks -----------------------------------------------------

    def write_refusal(self, topic: str, partition: int, size: int) -> str | None:
        """Why a client write of ``size`` bytes to the partition is refused now, or None.

        Below ``log.dir.free.space.min.bytes`` free: the rest is kept for the
        checkpoints, the metadata snapshot, the cleaner, the coordinators and
        followers. Asked again on every Produce, so writes resume when space returns.
        With several directories the partition's own directory decides.
        """
        extra = self._placement.get((topic, partition))
        space = extra.space if extra is not None else self.space
        if not space.below_floor(size):
            return None
        free = space.reading().usable_bytes
        return (
            f"log directory {space.path} is full: {free} bytes free, "
            f"below log.dir.free.space.min.bytes={space.floor.min_free_bytes}"
        )

    def dir_statuses(self) -> list[LogDirStatus]:
        """Every log directory's state (read at scrape time, any thread)."""
        space = self.space
        reading = space.reading()
        rows = [
            LogDirStatus(
                space.path,
                space.is_full,
                reading.usable_bytes,
                reading.total_bytes,
                self.primary_offline,
            )
        ]
        for extra in self.extra:
            got = extra.space.reading()
            rows.append(
                LogDirStatus(
                    extra.space.path,
                    extra.space.is_full,
                    got.usable_bytes,
                    got.total_bytes,
                    extra.offline,
                )
            )
        return rows

    @property
    def offline(self) -> str | None:
        """Why the broker has no usable data directory left, or None: the first one is
        offline (it holds the registry and checkpoints), or every one is."""
        return self.primary_offline

    def offline_dirs(self) -> list[str]:
        """The directories taken offline by an I/O error (health, DescribeLogDirs)."""
        out = [str(self.path)] if self.primary_offline is not None else []
        return out + [str(e.path) for e in self.extra if e.offline is not None]

    def _extra_named(self, path: str) -> ExtraDir | None:
        """The extra directory ``path`` names (however written), or None."""
        for extra in self.extra:
            if str(extra.path) == path:
                return extra
        wanted = _same_dir(path)
        return next((e for e in self.extra if _same_dir(e.path) == wanted), None)

    def _is_primary(self, path: str) -> bool:
        return path == str(self.path) or _same_dir(path) == _same_dir(self.path)

    def dir_offline(self, path: str) -> str | None:
        """Why the data directory ``path`` is offline, or None."""
        if self._is_primary(path):
            return self.primary_offline
        extra = self._extra_named(path)
        return extra.offline if extra is not None else None

    def partitions_in(self, path: str) -> list[tuple[str, int]]:
        """The loaded partitions whose logs live in data directory ``path``."""
        if self._is_primary(path):
            return sorted(k for k in list(self._logs) if k not in self._placement)
        extra = self._extra_named(path)
        return sorted(k for k in list(self._logs) if self._placement.get(k) is extra)

    def full_dirs(self) -> list[str]:
        """The directories below their free-space floor or out of room (health, metrics)."""
        spaces = [self.space, *(extra.space for extra in self.extra)]
        return [space.path for space in spaces if space.is_full]

    def _on_io_error_in(self, where: str, log: Log, exc: OSError) -> None:
        """A log met an I/O error: ``where`` is the data directory holding it (its own
        path's parent, so no path of the error has to be matched against the directories)."""
        if is_full_disk_error(exc):
            extra = self._extra_named(where)
            (extra.space if extra is not None else self.space).note_full()
        else:
            self.fail(f"{exc.strerror or exc} on {exc.filename or log.directory}", where)

    def _on_io_error(self, log: Log, exc: OSError) -> None:
        """The directory of ``log`` is its path's parent. Every log is told through this
        one bound method (``_log_io_error``): a callable bound per log to its directory
        cost about 260 bytes each at 50,000 partitions (issue 33)."""
        self._on_io_error_in(str(log.directory.parent), log, exc)

    def fail(self, reason: str, path: str | None = None) -> None:
        """Take a data directory (the first by default) offline (KIP-112): every log in
        it answers KAFKA_STORAGE_ERROR from now on, and ``on_offline`` is told once.

        Safe from any thread, and never raises into the write that met the error. A
        path naming no directory of this broker is taken for the first one: an I/O
        error is never dropped (it was, silently, when the strings did not match)."""
        where = str(self.path) if path is None else path
        with self._fail_lock:
            extra = None if self._is_primary(where) else self._extra_named(where)
            if extra is None:
                if where != str(self.path) and not self._is_primary(where):
                    logger.error("an I/O error under %s, which is no data directory here; "
                              "taking the first one offline", where)  # fmt: skip
                where = str(self.path)
                if self.primary_offline is not None:
                    return
                self.primary_offline = reason
            else:
                where = str(extra.path)
                if extra.offline is not None:
                    return
                extra.offline = reason
            # The first directory takes every log with it (registry and checkpoints).
            # A snapshot: another thread may be adding logs; those created from now
            # on are offline from the start (see ``log``).
            for key, found in self._logs_snapshot():
                if extra is None or self._placement.get(key) is extra:
                    found.offline = reason
        listener = self.on_offline
        if listener is not None:
            try:
                listener(where, reason)
            except Exception:
                logger.exception("handling the failure of log directory %s failed", where)

    @property
    def loaded_count(self) -> int:
        """How many partition logs are open (cheap: no iteration)."""
        return len(self._logs)

    def loaded_logs(self) -> Iterator[tuple[str, int, Log]]:
        """(topic, partition, log) for every log handed out since open()."""
        for (topic, partition), log in self._logs_snapshot():
            yield topic, partition, log

    def _logs_snapshot(self) -> list[tuple[tuple[str, int], Log]]:
        """The logs as they are now, safe from a thread that is not the loop's.

        ``list(self._logs.items())`` is not: each item's tuple is a new object, so a
        garbage collection can run midway, its finalizers hand the GIL to the loop,
        and a log added there ends the listing with "dictionary changed size during
        iteration" (the scrubber hit it at 200,000 partitions). ``dict.copy`` of a
        dict takes its keys in one step before it allocates anything collectable.
        """
        return list(self._logs.copy().items())

    # -- housekeeping for the broker's timer ----------------------------------------------

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every partition that has data; returns segments deleted.

        Partitions in an offline directory are left alone (their disk failed), and a
        failure in one log does not end the pass for the others (KIP-112: the other
        directories are served as before)."""
        deleted = 0
        for name, info in list(self._topics.items()):
            for partition in range(info.num_partitions):
                if self._offline_here(name, partition):
                    continue
                if (name, partition) in self._logs or self._partition_path(
                    name, partition
                ).is_dir():
                    try:
                        deleted += self.log(name, partition).apply_retention(now_ms)
                    except KafkaStorageError:
                        continue  # the directory was told; the others go on
        return deleted

    def _offline_here(self, topic: str, partition: int) -> bool:
        """Whether the partition's directory is offline."""
        extra = self._placement.get((topic, partition))
        return (extra.offline if extra is not None else self.primary_offline) is not None

    def compacted_logs(self) -> Iterator[tuple[str, int, Log]]:
        """(topic, partition, log) of every compacted partition with data (the cleaner's
        list), without those of an offline directory."""
        for name, info in list(self._topics.items()):
            if not self._topic_configs[name].compact:
                continue
            for partition in range(info.num_partitions):
                if self._offline_here(name, partition):
                    continue
                if (name, partition) in self._logs or self._partition_path(
                    name, partition
                ).is_dir():
                    yield name, partition, self.log(name, partition)

    def flush_due(self, now_ms: int) -> int:
        """Flush the logs whose oldest unflushed data has waited ``flush.ms``."""
        flushed = 0
        for _, _, log in self.loaded_logs():
            try:
                flushed += log.maybe_flush(now_ms)
            except KafkaStorageError:
                continue  # the directory went offline; its logs are not flushed again
        return flushed

    def roll_due(self, now_ms: int) -> int:
        """Roll active segments older than ``segment.ms`` in logs in use (not those of
        an offline directory; one failing roll does not stop the others)."""
        rolled = 0
        for _, _, log in self.loaded_logs():
            if not log.is_loaded or log.offline is not None:
                continue
            try:
                rolled += log.maybe_roll(now_ms)
            except KafkaStorageError:
                continue  # the directory was told
        return rolled
