"""DescribeLogDirs: which directory holds each partition, and how many bytes it takes.

With one log directory every partition of every topic is listed there, and
partitions that never received data report 0 bytes, as in Kafka. With several
(``log.dirs=A,B,C``) each directory is one result listing the partitions it
holds; an offline one (KIP-112) answers KAFKA_STORAGE_ERROR with none. The scan
runs on a worker thread: at 100,000 partitions it reads many directories.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import RequestContext
from headwater.log.disk_usage import DirUsage, scan_partition_sizes
from headwater.log.log_directory import LogDirectory


class LogDirsApi:
    def __init__(self, logs: LogDirectory) -> None:
        self.logs = logs

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
                    ],
                    "total_bytes": usage.total_bytes,
                    "usable_bytes": usage.usable_bytes,
                }
            )
        return {"throttle_time": 0, "error_code": int(E.none), "results": results}
