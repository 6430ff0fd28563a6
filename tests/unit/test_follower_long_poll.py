"""A follower's long-poll fetch parked at the leader (issue 21): woken by the leader's
append, not by ``replica.fetch.wait.max.ms``, and not by high watermark news.

Broker 1 leads ``idle-0`` (replicas 1 and 2) on the in-memory ZooKeeper; broker 2's
fetches go through the broker's own fetch handler (session, planner, purgatory), no
sockets. The follower's wait is 60 s, so an answer within the test's bounded
deadline can only come from a wake-up.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from headwater.protocol.fetch_codec import decode_fetch_response
from headwater.protocol.fetch_types import FetchRequestData, FetchResponseData, PartitionFetch
from headwater.records.batch import iter_batch_headers
from tests.unit.test_replica_manager_faults import KEY, TOPIC, Leader, batch, eventually, leading

#: replica.fetch.wait.max.ms of these fetches: far beyond any deadline below.
LONG_POLL_MS = 60_000
VERSION = 12


async def follower_fetch(
    c: Leader, fetch_offset: int | None, session_id: int, epoch: int, max_wait_ms: int
) -> FetchResponseData:
    """Broker 2's fetch (v12, by name), decoded as its replica fetcher would."""
    partitions = []
    if fetch_offset is not None:
        partitions.append(PartitionFetch(uuid.UUID(int=0), TOPIC, 0, fetch_offset))
    request = FetchRequestData(
        version=VERSION,
        replica_id=2,
        max_wait_ms=max_wait_ms,
        session_id=session_id,
        session_epoch=epoch,
        partitions=partitions,
    )
    body = await c.fetch.serve_follower(request)
    return decode_fetch_response(body.to_bytes(), 0, VERSION)


def record_offsets(response: FetchResponseData) -> list[int]:
    offsets: list[int] = []
    for p in response.partitions:
        records = p.records if isinstance(p.records, (bytes, memoryview)) else b""
        offsets += [h.base_offset for h in iter_batch_headers(memoryview(records))]
    return offsets


def test_a_parked_follower_fetch_is_answered_when_the_leader_appends(tmp_path: Path) -> None:
    """The minimum regression of issue 21: the leader's append answers a follower's
    parked fetch at once, and the follower's next fetch acknowledges an acks=all write."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            first = await follower_fetch(c, 0, 0, 0, 0)  # creates broker 2's session
            session = c.sessions.get(first.session_id)
            assert session is not None
            parked = asyncio.create_task(follower_fetch(c, None, session.id, 1, LONG_POLL_MS))
            assert await eventually(lambda: bool(session._listeners))  # parked
            assert not parked.done()

            started = time.monotonic()
            result, acked = c.replicas.append_records(TOPIC, 0, batch(2), 0, acks=-1)
            assert acked is not None  # acks=all waits for broker 2
            response = await asyncio.wait_for(parked, 10)
            assert time.monotonic() - started < 10 < LONG_POLL_MS / 1000
            assert record_offsets(response) == [0]

            # Broker 2 appended them; its next fetch says so and moves the HW.
            follow_up = asyncio.create_task(
                follower_fetch(c, result.last_offset + 1, session.id, 2, LONG_POLL_MS)
            )
            assert await asyncio.wait_for(acked, 10) == 0
            assert replica.log.high_watermark == result.last_offset + 1
            follow_up.cancel()

    asyncio.run(main())


def test_a_follower_fetch_that_moves_the_high_watermark_parks_after_one_read(
    tmp_path: Path,
) -> None:
    """The fetch that tells the leader the follower has everything moves the high
    watermark during its own read: news for its next answer, not a wake-up. It
    used to wake the fetch as it parked and read its partitions a second time."""

    async def main() -> None:
        async with leading(tmp_path) as c:
            replica = c.replicas.replicas[KEY]
            replica.log.append(batch(3), 0)
            end = replica.log.log_end_offset
            first = await follower_fetch(c, 0, 0, 0, 0)
            assert record_offsets(first) == [0]
            session = c.sessions.get(first.session_id)
            assert session is not None and replica.log.high_watermark < end
            read_before = session.partitions_read_total

            parked = asyncio.create_task(follower_fetch(c, end, session.id, 1, LONG_POLL_MS))
            assert await eventually(lambda: replica.log.high_watermark == end)
            assert await eventually(lambda: bool(session._listeners))  # parked
            await asyncio.sleep(0.05)  # a wrong wake-up would re-read now
            assert session.partitions_read_total == read_before + 1
            assert not parked.done()

            replica.log.append(batch(1), 0)  # the leader's append wakes it
            response = await asyncio.wait_for(parked, 10)
            assert record_offsets(response) == [end]
            assert response.partitions[0].high_watermark == end

    asyncio.run(main())
