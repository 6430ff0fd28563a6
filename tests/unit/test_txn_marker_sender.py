"""MarkerSender: local and remote leaders, retries until written, deleted partitions,
and fencing (no sockets: a fake writer and a fake inter-broker connection)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from headwater.txn.marker_sender import MarkerSender
from headwater.txn.markers import TxnMarker

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


class Writer:
    def __init__(self, answers: list[dict[tuple[str, int], int]]) -> None:
        self.answers = answers
        self.calls: list[tuple[tuple[str, int], ...]] = []
        self.listeners: list[object] = []

    async def write(self, marker: TxnMarker) -> dict[tuple[str, int], int]:
        self.calls.append(marker.partitions)
        answer = self.answers.pop(0) if self.answers else {}
        return {tp: answer.get(tp, 0) for tp in marker.partitions}


class Conn:
    """A peer broker answering WriteTxnMarkers."""

    def __init__(self, errors: dict[tuple[str, int], int]) -> None:
        self.errors = errors
        self.requests: list[dict[str, Any]] = []
        self.closed = False

    async def request(self, api_key: int, data: dict[str, Any]) -> Any:
        self.requests.append(data)
        (marker,) = data["markers"]
        topics = [
            SimpleNamespace(
                name=t["name"],
                partitions=[
                    SimpleNamespace(
                        partition_index=p, error_code=self.errors.get((t["name"], p), 0)
                    )
                    for p in t["partition_indexes"]
                ],
            )
            for t in marker["topics"]
        ]
        return SimpleNamespace(markers=[SimpleNamespace(topics=topics)])

    def close(self, reason: str = "") -> None:
        self.closed = True


class Connector:
    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.opened: list[tuple[int, str]] = []

    async def open(self, broker_id: int, purpose: str) -> Conn:
        self.opened.append((broker_id, purpose))
        return self.conn


def marker(*partitions: tuple[str, int]) -> TxnMarker:
    return TxnMarker(5, 1, True, 3, partitions)


def test_local_markers_are_retried_until_written() -> None:
    writer = Writer([{A0: int(ErrorCode.not_leader_or_follower)}, {A0: 7}, {}])
    sender = MarkerSender(0, lambda: writer, partition_exists=lambda t, p: True, backoff_ms=1)  # type: ignore[arg-type, return-value]
    assert asyncio.run(sender.send(marker(A0, A1))) is True
    # Only the failed partition is sent again.
    assert writer.calls == [(A0, A1), (A0,), (A0,)]


def test_fenced_marker_stops_sending() -> None:
    writer = Writer([{A0: int(ErrorCode.invalid_producer_epoch)}])
    sender = MarkerSender(0, lambda: writer, partition_exists=lambda t, p: True, backoff_ms=1)  # type: ignore[arg-type, return-value]
    assert asyncio.run(sender.send(marker(A0))) is False


def test_deleted_partitions_are_given_up() -> None:
    writer = Writer([{B0: int(ErrorCode.unknown_topic_or_partition)}] * 3)
    exists = {A0, B0}
    sender = MarkerSender(
        0, lambda: writer, partition_exists=lambda t, p: (t, p) in exists, backoff_ms=1
    )  # type: ignore[arg-type, return-value]

    async def run() -> bool:
        task = asyncio.ensure_future(sender.send(marker(A0, B0)))
        await asyncio.sleep(0.02)
        exists.discard(B0)  # the topic is deleted meanwhile
        return await task

    assert asyncio.run(run()) is True


def test_other_leaders_get_write_txn_markers() -> None:
    writer = Writer([])
    conn = Conn({})
    connector = Connector(conn)
    leaders = {A0: 0, A1: 2, B0: None}

    def leader_of(topic: str, partition: int) -> int | None:
        return leaders[(topic, partition)]

    sender = MarkerSender(
        0,
        lambda: writer,  # type: ignore[arg-type, return-value]
        leader_of=leader_of,
        partition_exists=lambda t, p: True,
        connector=connector,  # type: ignore[arg-type]
        backoff_ms=1,
    )

    async def run() -> bool:
        task = asyncio.ensure_future(sender.send(marker(A0, A1, B0)))
        await asyncio.sleep(0.02)
        leaders[B0] = 2  # b-0 had no leader at first
        return await task

    assert asyncio.run(run()) is True
    assert writer.calls == [(A0,)]
    assert connector.opened == [(2, "txn-markers")]  # one connection, reused
    sent = [
        (t["name"], p)
        for request in conn.requests
        for t in request["markers"][0]["topics"]
        for p in t["partition_indexes"]
    ]
    assert sorted(sent) == [A1, B0]
    first = conn.requests[0]["markers"][0]
    assert (first["producer_id"], first["producer_epoch"], first["transaction_result"]) == (
        5,
        1,
        True,
    )
    assert first["coordinator_epoch"] == 3


def test_a_resigned_coordinator_stops_sending() -> None:
    writer = Writer([{A0: int(ErrorCode.not_leader_or_follower)}] * 1000)
    sender = MarkerSender(0, lambda: writer, partition_exists=lambda t, p: True, backoff_ms=1)  # type: ignore[arg-type, return-value]
    owner = [True]

    async def run() -> bool:
        task = asyncio.ensure_future(sender.send(marker(A0), lambda: owner[0]))
        await asyncio.sleep(0.02)
        owner[0] = False  # the __transaction_state partition moved away
        return await asyncio.wait_for(task, 5)

    assert asyncio.run(run()) is False
    assert 1 <= len(writer.calls) < 1000
