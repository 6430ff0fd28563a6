"""A leader's fetch path and a follower's state, wired together without a socket.

``LocalLeader`` answers a follower's FetchRequest exactly as the broker's
fetch handler does, minus the I/O: the KIP-227 session cache and context,
the planner (divergence rule included) over real ``Log`` objects, and the
handler's rule for what a follower fetch tells the leader. ``LocalLeader``
also implements ``LeaderEndpoint``, so the replica fetcher's loop can run
against it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from headwater.cluster.follower_decisions import apply_decision
from headwater.cluster.follower_fetch_state import (
    FOLLOWER_FETCH_VERSION,
    FetcherConfig,
    FetchOutcome,
    FollowerFetchState,
    Idle,
)
from headwater.cluster.partition import PartitionReplica, ReplicaAssignment
from headwater.fetch.contexts import new_fetch_context
from headwater.fetch.planner import read_partitions
from headwater.fetch.purgatory import SessionPartitionWatcher
from headwater.fetch.session_cache import FetchSessionCache
from headwater.log.config import LogConfig
from headwater.log.handles import FileHandleCache
from headwater.log.isolation import Isolation
from headwater.log.log import Log
from headwater.protocol.fetch_types import FetchRequestData, FetchResponseData
from headwater.protocol.file_slice import FileSlice
from headwater.records.record import RecordBatchBuilder, decode_batches
from headwater.steps import drain

LEADER, FOLLOWER = 0, 1


def batch(tag: str, n: int = 1) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(1000 + i, None, f"{tag}-{i}".encode())
    return builder.build()


def write_at_epoch(plog: Log, epoch: int, tag: str, batches: int, per_batch: int = 1) -> None:
    plog.partition_leader_epoch = epoch
    for b in range(batches):
        plog.append(batch(f"{tag}{b}", per_batch), 1)


def values(plog: Log) -> list[bytes]:
    out: list[bytes] = []
    slice_ = plog.read(plog.log_start_offset, 1 << 20, Isolation.LOG_END, True).records
    if slice_ is None:
        return out
    for decoded in decode_batches(slice_.read()):
        out.extend(r.value or b"" for r in decoded.records)
    return out


def new_log(tmp_path: Path, name: str, handles: FileHandleCache | None = None) -> Log:
    plog = Log(tmp_path / name, LogConfig(), handles or FileHandleCache(32))
    plog.enable_replication(0)
    return plog


def follower_replica(
    plog: Log, leader_epoch: int, topic: str = "t", partition: int = 0
) -> PartitionReplica:
    replica = PartitionReplica(topic, partition, plog, local_id=FOLLOWER)
    replica.apply_state(
        ReplicaAssignment((LEADER, FOLLOWER), LEADER, leader_epoch, (LEADER, FOLLOWER), 0),
        now_ms=0,
    )
    return replica


class LocalLeader:
    """The leader's side of follower fetches, as the fetch handler runs it."""

    def __init__(self, logs: dict[tuple[str, int], Log]) -> None:
        self.logs = logs
        self.sessions = FetchSessionCache()
        self.watcher = SessionPartitionWatcher(self.lookup)
        #: The follower's fetch offsets the leader took as progress (ISR, high watermark).
        self.follower_offsets: dict[tuple[str, int], int] = {}
        self.requests: list[FetchRequestData] = []
        self.closed: list[str] = []

    def lookup(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def answer(self, req: FetchRequestData, now_ms: int = 0) -> FetchResponseData:
        self.requests.append(req)
        ctx = new_fetch_context(self.sessions, req, now_ms, self.watcher)
        if ctx.error_code:
            return FetchResponseData(error_code=ctx.error_code, session_id=0)
        drain(ctx.prepare_steps(now_ms))
        to_read = ctx.partitions_to_read()
        result = read_partitions(
            to_read, self.lookup, max_bytes=req.max_bytes, isolation=Isolation.LOG_END
        )
        # The handler's rule: a partition that erred or diverged says nothing
        # about what the follower holds.
        for p, data in zip(to_read, result.partitions, strict=True):
            if not data.error_code and data.diverging_epoch < 0:
                self.follower_offsets[(p.topic, p.partition)] = p.fetch_offset
        response = ctx.update_and_generate_response(result.partitions, now_ms)
        for data in response.partitions:
            if isinstance(data.records, FileSlice):
                data.records = data.records.read()
        return response

    # -- LeaderEndpoint ----------------------------------------------------------------

    async def fetch_version(self) -> int:
        return FOLLOWER_FETCH_VERSION

    async def fetch(self, request: FetchRequestData) -> FetchResponseData:
        await asyncio.sleep(0.001)  # a round trip gives the event loop back, as a socket does
        return self.answer(request)

    def close(self, reason: str) -> None:
        self.closed.append(reason)


def new_state(
    *replicas: PartitionReplica, config: FetcherConfig | None = None
) -> FollowerFetchState:
    state = FollowerFetchState(FOLLOWER, LEADER, config or FetcherConfig())
    for replica in replicas:
        state.add(replica)
    return state


def round_trip(state: FollowerFetchState, leader: LocalLeader, now: float = 0.0) -> FetchOutcome:
    """One fetch: the state's request, the leader's answer, the decisions applied."""
    request = state.next_request(now)
    assert not isinstance(request, Idle), "nothing to fetch"
    outcome = state.on_response(leader.answer(request), now)
    for decision in outcome.decisions:
        apply_decision(decision, 0)
    return outcome
