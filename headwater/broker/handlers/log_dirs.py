"""DescribeLogDirs: which directory holds each partition, and how many bytes it takes.

Headwater has one log directory; every partition of every topic lives there.
Partitions that never received data report 0 bytes, as in Kafka. The scan
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
