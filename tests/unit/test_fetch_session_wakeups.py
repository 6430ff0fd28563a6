"""Which log events wake which fetch sessions (fetch/purgatory.py): a consumer reads to
the high watermark, a follower to the log end (the typed LogEvent decides)."""

from __future__ import annotations

import uuid
from pathlib import Path

from headwater.fetch.contexts import new_fetch_context
from headwater.fetch.purgatory import SessionPartitionWatcher
from headwater.fetch.session import FetchSession
from headwater.fetch.session_cache import FetchSessionCache
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory
from headwater.protocol.fetch_types import FetchRequestData, PartitionFetch, TopicIdPartition
from headwater.records.record import RecordBatchBuilder

NOW = 1_700_000_000_000
ZERO = uuid.UUID(int=0)


def _batch() -> bytes:
    builder = RecordBatchBuilder()
    builder.append(NOW, b"k", b"v")
    return builder.build()


def _session(
    cache: FetchSessionCache, watcher: SessionPartitionWatcher, replica_id: int
) -> FetchSession:
    req = FetchRequestData(
        version=12,
        replica_id=replica_id,
        session_id=0,
        session_epoch=0,
        partitions=[PartitionFetch(ZERO, "t", 0, 0)],
    )
    ctx = new_fetch_context(cache, req, 0, watcher)
    for _ in ctx.prepare_steps(0):
        pass
    session = ctx.session
    assert session is not None
    return session


def test_appends_wake_followers_and_only_a_high_watermark_move_reaches_consumers(
    tmp_path: Path,
) -> None:
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    logs.create_topic("t", 1)
    log = logs.log("t", 0)
    log.enable_replication(0)  # a partition with replicas: the HW waits for the ISR
    cache = FetchSessionCache()
    watcher = SessionPartitionWatcher(logs.existing_log)
    consumer = _session(cache, watcher, -1)
    follower = _session(cache, watcher, 1)
    key = TopicIdPartition(logs.topics()["t"].topic_id, "t", 0)
    woken: list[str] = []
    consumer.add_listener(lambda: woken.append("consumer"))
    follower.add_listener(lambda: woken.append("follower"))
    for session in (consumer, follower):
        session._pending.clear()  # as after the creating fetch's answer

    log.append(_batch(), NOW)  # not in the ISR yet: nothing a consumer can read
    assert woken == ["follower"]
    assert follower.is_pending(key) and not consumer.is_pending(key)

    woken.clear()
    follower._pending.clear()
    assert log.update_high_watermark(log.log_end_offset)
    assert woken == ["consumer"]  # a parked follower fetch waits for bytes, as in Kafka
    assert consumer.is_pending(key)
    assert follower.is_pending(key)  # ...but its next answer carries the new HW
    logs.close()
