"""DescribeLogDirs: which directory holds each partition, and how many bytes it takes;
AlterReplicaLogDirs (API 34, KIP-113): move a replica to another directory online.

With one log directory every partition of every topic is listed there, and
partitions that never received data report 0 bytes, as in Kafka. With several
(``log.dirs=A,B,C``) each directory is one result listing the partitions it
holds; an offline one (KIP-112) answers KAFKA_STORAGE_ERROR with none. The scan
runs on a worker thread: at 100,000 partitions it reads many directories.

A move copies the partition on worker threads in rounds while it keeps taking
writes (``headwater.log.replica_move``); when a round copied little, the last
bytes are copied and the directories swapped on the event loop in one step, so
appends to that one partition wait for that short copy and a few renames only.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.log.disk_usage import DirUsage, scan_partition_sizes
from headwater.log.log_directory import LogDirectory, ReplicaMove
from headwater.log.replica_move import MoveError, name_too_long, size_of
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType

logger = logging.getLogger(__name__)

#: A copy round that moved fewer bytes than this is followed by the swap: the
#: appends of the partition wait for about this much copying, no more.
SWAP_BELOW_BYTES = 4 << 20
#: After this many rounds the swap happens anyway (a partition written faster than
#: it can be copied would never converge); the pause is then one round's appends.
MAX_COPY_ROUNDS = 50
#: How long a round waits for a running clean of the partition to end.
CLEAN_WAIT_S = 0.05

Spawn = Callable[[Coroutine[Any, Any, None], str], None]


def _default_spawn(coro: Coroutine[Any, Any, None], name: str) -> None:
    task = asyncio.ensure_future(coro)
    task.set_name(name)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


_TASKS: set[asyncio.Future[None]] = set()


def alter_error(logs: LogDirectory, topic: str, partition: int, destination: str) -> MoveError:
    """What AlterReplicaLogDirs answers before any move starts, in Kafka's order
    (``ReplicaManager.alterReplicaLogDirs``): a name too long, a directory not
    configured, an offline one, a replica not hosted here (its preferred
    directory is then remembered). NONE: go on and move (or it is there already)."""
    if name_too_long(topic, partition):
        return MoveError.INVALID_TOPIC_EXCEPTION
    if not logs.is_log_dir(destination):
        return MoveError.LOG_DIR_NOT_FOUND
    if logs.dir_offline(destination) is not None:
        return MoveError.KAFKA_STORAGE_ERROR
    info = logs.topics().get(topic)
    known = info is not None and 0 <= partition < info.num_partitions
    hosted = known and logs.hosts(topic, partition)
    if hosted and logs.dir_offline(logs.dir_of(topic, partition)) is not None:
        return MoveError.KAFKA_STORAGE_ERROR  # Kafka: HostedPartition.Offline
    logs.prefer_dir(topic, partition, destination)
    if not known:
        return MoveError.UNKNOWN_TOPIC_OR_PARTITION
    if not hosted:
        # Kafka's NotLeaderOrFollowerException, answered as REPLICA_NOT_AVAILABLE "for
        # compatibility" (ReplicaManager.alterReplicaLogDirs).
        return MoveError.REPLICA_NOT_AVAILABLE
    return MoveError.NONE


async def run_move(logs: LogDirectory, move: ReplicaMove) -> bool:
    """Copy rounds on worker threads, then the swap on the loop; True when moved.
    Anything going wrong (the log deleted, a directory offline, an I/O error)
    drops the copy and leaves the partition where it was."""
    loop = asyncio.get_running_loop()
    try:
        for rounds in range(1, MAX_COPY_ROUNDS + 2):
            if not logs.move_is_current(move):
                break
            log = move.log
            if log.generation != move.generation:
                move.sync.forget()  # truncated or trimmed: not a prefix any more
                move.generation = log.generation
            started_at = log.log_end_offset
            copied = await loop.run_in_executor(None, move.sync.sync)
            if not logs.move_is_current(move):
                break
            if log.generation != move.generation:
                continue
            move.copied_end = started_at
            if log.cleaning:
                await asyncio.sleep(CLEAN_WAIT_S)  # its thread writes into the directory
                continue
            if copied >= SWAP_BELOW_BYTES and rounds <= MAX_COPY_ROUNDS:
                continue
            aside = logs.complete_move(move)  # no await from the check above to here
            logger.info(
                "moved %s-%d from %s to %s after %d copy rounds",
                move.topic, move.partition, move.source, move.destination, rounds,
            )  # fmt: skip
            await loop.run_in_executor(None, shutil.rmtree, aside, True)
            return True
    except Exception:
        logger.exception("moving %s-%d to %s failed", move.topic, move.partition, move.destination)
    logs.cancel_move(move)
    await loop.run_in_executor(None, shutil.rmtree, move.future, True)
    return False


class LogDirsApi:
    def __init__(self, logs: LogDirectory, spawn: Spawn | None = None) -> None:
        self.logs = logs
        self._spawn = spawn or _default_spawn

    async def alter_replica_log_dirs(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        """API 34: each partition's answer (Kafka's codes); moves start in the
        background and the answer does not wait for them (as in Kafka)."""
        allowed = ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
        results: dict[str, list[dict[str, int]]] = {}
        for d in req.dirs:
            for t in d.topics:
                for p in t.partitions:
                    code = self.alter(t.name, int(p), d.path) if allowed else _AUTH_FAILED
                    results.setdefault(t.name, []).append(
                        {"partition_index": int(p), "error_code": int(code)}
                    )
        return {
            "throttle_time": 0,
            "results": [{"topic_name": n, "partitions": ps} for n, ps in results.items()],
        }

    async def _run(self, move: ReplicaMove) -> None:
        await run_move(self.logs, move)

    def alter(self, topic: str, partition: int, destination: str) -> int:
        """One partition: validate, then start (or keep) its move."""
        code = alter_error(self.logs, topic, partition, destination)
        if code != MoveError.NONE:
            return int(code)
        try:
            move = self.logs.begin_move(topic, partition, destination)
        except OSError:
            return int(MoveError.KAFKA_STORAGE_ERROR)
        if move is not None and move.generation == -1:
            move.generation = move.log.generation
            self._spawn(self._run(move), f"move-{topic}-{partition}")
        return int(MoveError.NONE)

    async def describe_log_dirs(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        topics = {name: info.num_partitions for name, info in self.logs.topics().items()}
        wanted: dict[str, list[int]]
        if req.topics is None:
            wanted = {name: list(range(count)) for name, count in sorted(topics.items())}
        else:
            wanted = {
                t.topic: [int(p) for p in t.partitions if 0 <= int(p) < topics.get(t.topic, 0)]
                for t in req.topics
                if t.topic in topics
            }
        if self.logs.extra:
            return await self._describe_each(topics, wanted)
        if self.logs.offline is not None:
            # KIP-112: an offline directory is listed with KAFKA_STORAGE_ERROR, no partitions.
            failed = {
                "error_code": int(E.kafka_storage_error),
                "log_dir": str(self.logs.path),
                "topics": [],
                "total_bytes": -1,
                "usable_bytes": -1,
            }
            return {"throttle_time": 0, "error_code": int(E.none), "results": [failed]}
        loop = asyncio.get_running_loop()
        usage: DirUsage = await loop.run_in_executor(
            None, scan_partition_sizes, str(self.logs.path), topics
        )
        result = {
            "error_code": int(E.none),
            "log_dir": usage.path,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": p,
                            "partition_size": usage.partition_bytes.get((name, p), 0),
                            "offset_lag": 0,
                            "is_future_key": False,
                        }
                        for p in partitions
                    ],
                }
                for name, partitions in wanted.items()
                if partitions
            ],
            "total_bytes": usage.total_bytes,
            "usable_bytes": usage.usable_bytes,
        }
        return {"throttle_time": 0, "error_code": int(E.none), "results": [result]}

    async def _describe_each(
        self, topics: dict[str, int], wanted: dict[str, list[int]]
    ) -> dict[str, Any]:
        """Several data directories (JBOD): one result per directory, each listing the
        partitions placed there; an offline one with KAFKA_STORAGE_ERROR and none."""
        loop = asyncio.get_running_loop()
        results = []
        for directory in self.logs.dirs:
            path = str(directory)
            if self.logs.dir_offline(path) is not None:
                results.append(
                    {
                        "error_code": int(E.kafka_storage_error),
                        "log_dir": path,
                        "topics": [],
                        "total_bytes": -1,
                        "usable_bytes": -1,
                    }
                )
                continue
            usage: DirUsage = await loop.run_in_executor(None, scan_partition_sizes, path, topics)
            moving = [f for f in self.logs.future_replicas() if f[2] == path]
            futures = await loop.run_in_executor(None, _future_entries, moving, wanted)
            here = {
                name: [p for p in partitions if (name, p) in usage.partition_bytes]
                for name, partitions in wanted.items()
            }
            results.append(
                {
                    "error_code": int(E.none),
                    "log_dir": usage.path,
                    "topics": [
                        {
                            "name": name,
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "partition_size": usage.partition_bytes[(name, p)],
                                    "offset_lag": 0,
                                    "is_future_key": False,
                                }
                                for p in partitions
                            ],
                        }
                        for name, partitions in here.items()
                        if partitions
                    ]
                    + futures,
                    "total_bytes": usage.total_bytes,
                    "usable_bytes": usage.usable_bytes,
                }
            )
        return {"throttle_time": 0, "error_code": int(E.none), "results": results}


def _future_entries(
    moving: list[tuple[str, int, str, Path, int]], wanted: dict[str, list[int]]
) -> list[dict[str, Any]]:
    """The future replicas being copied into one directory (Kafka lists them with
    ``is_future_key``, their size and offset lag); on a worker thread: sizes."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, p, _destination, future, lag in moving:
        if p not in wanted.get(topic, ()):
            continue
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": p,
                "partition_size": size_of(future),
                "offset_lag": lag,
                "is_future_key": True,
            }
        )
    return [{"name": name, "partitions": ps} for name, ps in by_topic.items()]


_AUTH_FAILED = int(E.cluster_authorization_failed)
