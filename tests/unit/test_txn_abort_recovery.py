"""A transaction the coordinator aborts on timeout while the cluster is sick (the
fault campaign's copy loop): every step of the abort is retried until the
transaction is CompleteAbort, and a new producer of the id gets
CONCURRENT_TRANSACTIONS only while markers or the CompleteAbort are really
pending (no sockets: an in-memory state log, a fake marker writer)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence

import pytest
from kio.schema.errors import ErrorCode

from headwater.coordinator.state_log import AppendFailed, InMemoryStateLog
from headwater.txn.marker_sender import MarkerSender
from headwater.txn.markers import TxnMarker
from headwater.txn.metadata import TxnState
from headwater.txn.service import TransactionCoordinatorService, TxnConfig
from headwater.txn.state_log import decode_value

TP = ("dst", 0)
OFFSETS = ("__consumer_offsets", 3)
TIMEOUT_MS = 20_000


class Writer:
    """The local marker writer; ``answer`` decides each partition's error code."""

    def __init__(self) -> None:
        self.markers: list[TxnMarker] = []
        self.answer: Callable[[tuple[str, int]], int] = lambda tp: 0
        self.listeners: list[object] = []

    async def write(self, marker: TxnMarker) -> dict[tuple[str, int], int]:
        codes = {tp: self.answer(tp) for tp in marker.partitions}
        if all(code == 0 for code in codes.values()):
            self.markers.append(marker)
        return codes


class FlakyLog(InMemoryStateLog):
    """``__transaction_state`` whose appends of some states fail (ISR below
    min.insync.replicas while ZooKeeper is down) until told otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: set[TxnState] = set()
        self.refused: list[TxnState] = []

    def append(self, entries: Sequence[tuple[bytes, bytes | None]]) -> int:
        for _key, value in entries:
            state = decode_value(value).state if value is not None else None
            if state in self.refuse:
                self.refused.append(state)
                raise AppendFailed(ErrorCode.not_enough_replicas)
        return super().append(entries)


class Replication:
    """wait_replicated: REQUEST_TIMED_OUT while ``down`` (the ISR cannot shrink)."""

    def __init__(self) -> None:
        self.down = False
        self.timeouts = 0

    async def __call__(self, partition: int, offset: int) -> int:
        if self.down:
            self.timeouts += 1
            return int(ErrorCode.request_timed_out)
        return 0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Harness:
    def __init__(self) -> None:
        self.writer = Writer()
        self.clock = Clock()
        self.log = FlakyLog()
        self.replication = Replication()
        self.leader: int | None = 1
        ids = itertools.count(1000)
        self.service = TransactionCoordinatorService(
            node_id=1,
            host="h",
            port=9,
            config=TxnConfig(num_partitions=1),
            new_producer_id=lambda: next(ids),
            markers=MarkerSender(
                1,
                lambda: self.writer,  # type: ignore[arg-type, return-value]
                leader_of=lambda t, p: self.leader,
                partition_exists=lambda t, p: True,
                backoff_ms=1,
                max_backoff_ms=5,
            ),
            wait_replicated=self.replication,
            clock_ms=self.clock,
        )

    async def ongoing(self) -> tuple[int, int]:
        """A producer with a transaction over ``dst-0`` and an offsets partition."""
        await self.service.load_partition(0, self.log, 3)
        error, pid, epoch = await self.service.init_producer_id("copy", TIMEOUT_MS, None)
        assert error is ErrorCode.none
        assert await self.service.add_partitions("copy", pid, epoch, {TP, OFFSETS}) is (
            ErrorCode.none
        )
        return pid, epoch

    def state(self) -> TxnState:
        meta = self.service.transaction("copy")
        assert meta is not None
        return meta.state

    async def time_out(self) -> None:
        self.clock.now += TIMEOUT_MS + 1
        self.service.abort_timed_out_transactions()
        await settle()

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        for _ in range(2000):  # bounded: 10 s at most
            if condition():
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"never: {what}")


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0.005)


def run(test: Callable[[Harness], object]) -> None:
    async def main() -> None:
        h = Harness()
        try:
            await test(h)  # type: ignore[misc]
        finally:
            await h.service.stop()

    asyncio.run(main())


def test_a_timeout_abort_whose_complete_abort_cannot_be_written_retries_it() -> None:
    async def test(h: Harness) -> None:
        pid, epoch = await h.ongoing()
        h.log.refuse = {TxnState.COMPLETE_ABORT}
        await h.time_out()
        await h.until(lambda: len(h.log.refused) >= 3, "CompleteAbort attempted again")
        assert h.state() is TxnState.PREPARE_ABORT
        assert h.writer.markers == [TxnMarker(pid, epoch + 1, False, 3, (OFFSETS, TP))]
        # Markers are written but the abort is not durable: the new producer waits.
        assert (await h.service.init_producer_id("copy", TIMEOUT_MS, None))[0] is (
            ErrorCode.concurrent_transactions
        )
        h.log.refuse = set()  # ZooKeeper is back
        await h.until(lambda: h.state() is TxnState.COMPLETE_ABORT, "CompleteAbort")
        assert await h.service.init_producer_id("copy", TIMEOUT_MS, None) == (
            ErrorCode.none,
            pid,
            epoch + 2,
        )
        assert len(h.writer.markers) == 1  # the markers were not sent again

    run(test)


def test_a_complete_abort_that_times_out_on_the_isr_is_retried() -> None:
    async def test(h: Harness) -> None:
        pid, epoch = await h.ongoing()
        h.leader = None  # hold the abort at PrepareAbort
        await h.time_out()
        assert h.state() is TxnState.PREPARE_ABORT
        h.replication.down = True  # the CompleteAbort is appended but never acknowledged
        h.leader = 1
        await h.until(lambda: h.replication.timeouts >= 3, "CompleteAbort retried")
        assert h.state() is TxnState.PREPARE_ABORT
        assert (await h.service.init_producer_id("copy", TIMEOUT_MS, None))[0] is (
            ErrorCode.concurrent_transactions
        )
        h.replication.down = False
        await h.until(lambda: h.state() is TxnState.COMPLETE_ABORT, "CompleteAbort")
        assert await h.service.init_producer_id("copy", TIMEOUT_MS, None) == (
            ErrorCode.none,
            pid,
            epoch + 2,
        )

    run(test)


def test_a_timeout_abort_whose_prepare_abort_fails_is_retried_by_the_next_round() -> None:
    async def test(h: Harness) -> None:
        pid, epoch = await h.ongoing()
        h.replication.down = True
        await h.time_out()
        assert h.state() is TxnState.ONGOING and h.writer.markers == []
        await h.time_out()  # still down: nothing changes, nothing is sent
        assert h.state() is TxnState.ONGOING and h.writer.markers == []
        h.replication.down = False
        await h.time_out()
        await h.until(lambda: h.state() is TxnState.COMPLETE_ABORT, "CompleteAbort")
        # One bump in all, however many rounds failed: the zombie is fenced, the
        # markers carry the fencing epoch.
        assert h.writer.markers == [TxnMarker(pid, epoch + 1, False, 3, (OFFSETS, TP))]
        assert await h.service.end_txn("copy", pid, epoch, True) is ErrorCode.producer_fenced
        assert await h.service.init_producer_id("copy", TIMEOUT_MS, None) == (
            ErrorCode.none,
            pid,
            epoch + 2,
        )

    run(test)


def test_markers_wait_for_a_leader_and_retry_transient_errors() -> None:
    async def test(h: Harness) -> None:
        pid, epoch = await h.ongoing()
        h.leader = None  # the partitions' leader is unknown (its broker lost its session)
        await h.time_out()
        await settle()
        assert h.state() is TxnState.PREPARE_ABORT and h.writer.markers == []
        for _ in range(3):
            error, _, _ = await h.service.init_producer_id("copy", TIMEOUT_MS, None)
            assert error is ErrorCode.concurrent_transactions
        # A leader again, but the ISR is short and then the write times out.
        answers = iter(
            [int(ErrorCode.not_enough_replicas), int(ErrorCode.request_timed_out)] * 2
            + [int(ErrorCode.not_leader_or_follower)] * 2
        )
        h.writer.answer = lambda tp: next(answers, 0)
        h.leader = 1
        await h.until(lambda: h.state() is TxnState.COMPLETE_ABORT, "CompleteAbort")
        assert h.writer.markers == [TxnMarker(pid, epoch + 1, False, 3, (OFFSETS, TP))]
        assert await h.service.init_producer_id("copy", TIMEOUT_MS, None) == (
            ErrorCode.none,
            pid,
            epoch + 2,
        )

    run(test)


def test_init_producer_id_waits_only_while_a_commit_is_really_pending() -> None:
    async def test(h: Harness) -> None:
        pid, epoch = await h.ongoing()
        h.leader = None
        assert await h.service.end_txn("copy", pid, epoch, True) is ErrorCode.none
        await settle()
        assert h.state() is TxnState.PREPARE_COMMIT
        error, _, _ = await h.service.init_producer_id("copy", TIMEOUT_MS, None)
        assert error is ErrorCode.concurrent_transactions
        h.leader = 1
        await h.until(lambda: h.state() is TxnState.COMPLETE_COMMIT, "CompleteCommit")
        assert h.writer.markers == [TxnMarker(pid, epoch, True, 3, (OFFSETS, TP))]
        assert await h.service.init_producer_id("copy", TIMEOUT_MS, None) == (
            ErrorCode.none,
            pid,
            epoch + 1,
        )

    run(test)


def test_a_reload_finishes_an_abort_its_predecessor_left_half_done() -> None:
    """The coordinator loses its partition mid-abort (session lost in the outage) and
    gets it back: the reload sends the markers and writes CompleteAbort."""

    async def test(h: Harness) -> None:
        pid, epoch = await h.ongoing()
        h.leader = None
        await h.time_out()
        assert h.state() is TxnState.PREPARE_ABORT
        h.service.unload_partition(0)
        assert (await h.service.init_producer_id("copy", TIMEOUT_MS, None))[0] is (
            ErrorCode.not_coordinator
        )
        h.leader = 1
        await h.service.load_partition(0, h.log, 4)
        await h.until(lambda: h.state() is TxnState.COMPLETE_ABORT, "CompleteAbort")
        assert h.writer.markers == [TxnMarker(pid, epoch + 1, False, 4, (OFFSETS, TP))]
        assert (await h.service.init_producer_id("copy", TIMEOUT_MS, None))[0] is ErrorCode.none

    run(test)


def test_a_marker_long_unwritten_is_reported_with_each_partitions_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """CI keeps only logs: a stuck abort must say which partition holds it and why."""
    answers = {TP: int(ErrorCode.not_enough_replicas)}
    writer = Writer()
    writer.answer = lambda tp: answers.get(tp, 0)
    leaders: dict[tuple[str, int], int | None] = {TP: 1, OFFSETS: None}
    sender = MarkerSender(
        1,
        lambda: writer,  # type: ignore[arg-type, return-value]
        leader_of=lambda t, p: leaders[(t, p)],
        partition_exists=lambda t, p: True,
        backoff_ms=1,
        max_backoff_ms=5,
        report_after_s=0.05,
    )

    async def main() -> bool:
        sending = asyncio.ensure_future(sender.send(TxnMarker(7, 2, False, 3, (TP, OFFSETS))))
        for _ in range(400):
            if "still unwritten" in caplog.text:
                break
            await asyncio.sleep(0.005)
        answers.clear()
        leaders[OFFSETS] = 1
        return await asyncio.wait_for(sending, 10)

    with caplog.at_level(logging.WARNING, logger="headwater.txn.marker_sender"):
        assert asyncio.run(main()) is True
    assert "ABORT marker of producer 7 (epoch 2) still unwritten after" in caplog.text
    assert "__consumer_offsets-3: no leader" in caplog.text
    assert "dst-0: NOT_ENOUGH_REPLICAS" in caplog.text
