"""Issue 33 item 3: the per-request shortcuts answer exactly what the long way did.

A read of the batch appended last skips the index and the file scan; a
follower append of one run keeps its headers as they are. (A small response
copied and sent with one ``send`` is tested with the other ``SocketWriter``
cases, in ``test_socket_writer.py``.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from headwater.broker.connection import _is_awaitable
from headwater.log.isolation import Isolation
from headwater.protocol.fetch_codec import EncodedBody
from headwater.records import decode_batches
from tests.unit.test_log import NOW, batch, make_log


def test_the_awaitable_check_agrees_with_inspect() -> None:
    async def answer() -> bytes:
        return b""

    coroutine = answer()
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        assert _is_awaitable(coroutine) and _is_awaitable(future)
    finally:
        coroutine.close()
        loop.close()
    assert not _is_awaitable(b"x") and not _is_awaitable(None)
    assert not _is_awaitable(EncodedBody([b"x"], 1))


def _offsets(log: Any, offset: int, end_isolation: Isolation) -> list[int]:
    result = log.read(offset, 1 << 20, end_isolation, True)
    if result.records is None:
        return []
    return [r.offset for b in decode_batches(result.records.read()) for r in b.records]


def test_reads_at_the_tail_match_the_scan_and_follow_truncation(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    for _ in range(5):
        log.append(batch(3), NOW)  # offsets 0-14, batches at 0, 3, 6, 9, 12
    for offset in range(15):
        expected = list(range(offset - offset % 3, 15))
        assert _offsets(log, offset, Isolation.LOG_END) == expected
    # Capped below the last batch (a consumer at the high watermark): the tail
    # batch is not visible, and nothing past the cap is returned.
    log.enable_replication(12)
    assert _offsets(log, 12, Isolation.HIGH_WATERMARK) == []
    assert _offsets(log, 9, Isolation.HIGH_WATERMARK) == [9, 10, 11]
    log.truncate_to(9)
    assert log.log_end_offset == 9
    assert _offsets(log, 6, Isolation.LOG_END) == [6, 7, 8]
    log.append(batch(2), NOW)
    assert _offsets(log, 10, Isolation.LOG_END) == [9, 10]
    log.close()


def test_a_follower_append_of_one_run_and_of_several_segments_reads_back(tmp_path: Path) -> None:
    leader = make_log(tmp_path / "leader", segment_bytes=1200)
    for _ in range(6):
        leader.append(batch(2, value_size=150), NOW)
    follower = make_log(tmp_path / "follower", segment_bytes=1200)
    payload = b""
    offset = 0
    while offset < leader.log_end_offset:  # every segment of the leader, in order
        read = leader.read(offset, 1 << 20, Isolation.LOG_END, True)
        assert read.records is not None
        chunk = read.records.read()
        payload += chunk
        offset = [r.offset for b in decode_batches(chunk) for r in b.records][-1] + 1
    follower.append_as_follower(payload, NOW)
    assert follower.log_end_offset == 12
    assert _offsets(follower, 0, Isolation.LOG_END)[:2] == [0, 1]
    assert _offsets(follower, 10, Isolation.LOG_END) == [10, 11]
    leader.close()
    follower.close()
