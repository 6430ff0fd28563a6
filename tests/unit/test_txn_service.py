"""TransactionCoordinatorService on an in-memory log: writes before answers, markers,
reload after a failover, timeouts and expiration (no sockets)."""

from __future__ import annotations

import asyncio
import itertools

from kio.schema.errors import ErrorCode

from headwater.coordinator.state_log import InMemoryStateLog
from headwater.txn.marker_sender import MarkerSender
from headwater.txn.markers import TxnMarker
from headwater.txn.metadata import TransactionMetadata, TxnState
from headwater.txn.service import TransactionCoordinatorService, TxnConfig, WaitReplicated
from headwater.txn.state_log import decode_key, decode_value, encode_key, encode_value

TP = ("orders", 0)


class FakeWriter:
    """Records markers; can be told to fail a number of times first."""

    def __init__(self, failures: int = 0) -> None:
        self.markers: list[TxnMarker] = []
        self.failures = failures
        self.listeners: list[object] = []

    async def write(self, marker: TxnMarker) -> dict[tuple[str, int], int]:
        if self.failures:
            self.failures -= 1
            return dict.fromkeys(marker.partitions, int(ErrorCode.not_leader_or_follower))
        self.markers.append(marker)
        return dict.fromkeys(marker.partitions, 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make(
    writer: FakeWriter,
    clock: Clock,
    wait_replicated: WaitReplicated | None = None,
    **config: int,
) -> tuple[TransactionCoordinatorService, InMemoryStateLog]:
    ids = itertools.count(1000)
    service = TransactionCoordinatorService(
        node_id=1,
        host="h",
        port=9,
        config=TxnConfig(num_partitions=1, **config),
        new_producer_id=lambda: next(ids),
        markers=MarkerSender(
            1,
            lambda: writer,
            partition_exists=lambda t, p: True,
            backoff_ms=1,  # type: ignore[arg-type, return-value]
        ),
        clock_ms=clock,
        wait_replicated=wait_replicated,
    )
    return service, InMemoryStateLog()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.005)


def states_in(log: InMemoryStateLog) -> list[tuple[str, TxnState | None]]:
    out: list[tuple[str, TxnState | None]] = []
    for entry in log.entries:
        assert isinstance(entry, tuple)
        key, value = entry
        out.append((decode_key(key), None if value is None else decode_value(value).state))
    return out


def test_commit_writes_prepare_then_markers_then_complete() -> None:
    async def run() -> None:
        writer, clock = FakeWriter(failures=2), Clock()
        service, log = make(writer, clock)
        assert await service.init_producer_id("tx", 60_000, None) == (
            ErrorCode.not_coordinator,
            -1,
            -1,
        )
        await service.load_partition(0, log, 5)
        error, pid, epoch = await service.init_producer_id("tx", 60_000, None)
        assert (error, pid, epoch) == (ErrorCode.none, 1000, 0)
        assert await service.add_partitions("tx", pid, epoch, {TP}) is ErrorCode.none
        assert await service.end_txn("tx", pid, epoch, True) is ErrorCode.none
        await settle()
        assert writer.markers == [TxnMarker(1000, 0, True, 5, (TP,))]
        assert [s for _, s in states_in(log)] == [
            TxnState.EMPTY,
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.COMPLETE_COMMIT,
        ]
        described = service.describe("tx")
        assert described["transaction_state"] == "CompleteCommit"
        assert service.describe("nope")["error_code"] is ErrorCode.transactional_id_not_found
        await service.stop()

    asyncio.run(run())


def test_bad_requests() -> None:
    async def run() -> None:
        service, log = make(FakeWriter(), Clock(), max_timeout_ms=1000)
        await service.load_partition(0, log, 0)
        assert (await service.init_producer_id("tx", 1001, None))[0] is (
            ErrorCode.invalid_transaction_timeout
        )
        assert (await service.init_producer_id("", 10, None))[0] is ErrorCode.invalid_request
        assert await service.end_txn("unknown", 1, 0, True) is ErrorCode.invalid_producer_id_mapping
        assert log.entries == []
        await service.stop()

    asyncio.run(run())


def test_a_failover_finishes_a_prepared_transaction() -> None:
    async def run() -> None:
        writer, clock = FakeWriter(), Clock()
        service, log = make(writer, clock)
        await service.load_partition(0, log, 1)
        _, pid, epoch = await service.init_producer_id("tx", 60_000, None)
        await service.add_partitions("tx", pid, epoch, {TP})
        # The coordinator dies right after PrepareAbort is durable: drop the
        # CompleteAbort it would write by unloading before the markers go out.
        meta = service.transaction("tx")
        assert meta is not None
        transit = meta.prepare_end(False, clock.now)
        log.append([(encode_key("tx"), encode_value(transit))])
        service.unload_partition(0)
        await service.stop()

        successor, _ = make(writer, clock)
        await successor.load_partition(0, log, 2)
        await settle()
        assert writer.markers == [TxnMarker(pid, epoch, False, 2, (TP,))]
        reloaded = successor.transaction("tx")
        assert reloaded is not None and reloaded.state is TxnState.COMPLETE_ABORT
        await successor.stop()

    asyncio.run(run())


def test_fencing_a_zombie_aborts_its_transaction_first() -> None:
    async def run() -> None:
        writer, clock = FakeWriter(), Clock()
        service, log = make(writer, clock)
        await service.load_partition(0, log, 0)
        _, pid, epoch = await service.init_producer_id("tx", 60_000, None)
        await service.add_partitions("tx", pid, epoch, {TP})
        error, _, _ = await service.init_producer_id("tx", 60_000, None)
        assert error is ErrorCode.concurrent_transactions
        await settle()
        assert writer.markers == [TxnMarker(pid, epoch + 1, False, 0, (TP,))]
        error, pid2, epoch2 = await service.init_producer_id("tx", 60_000, None)
        assert (error, pid2, epoch2) == (ErrorCode.none, pid, epoch + 2)
        assert await service.end_txn("tx", pid, epoch, True) is ErrorCode.producer_fenced
        await service.stop()

    asyncio.run(run())


def test_timed_out_transactions_are_aborted_and_ids_expire() -> None:
    async def run() -> None:
        writer, clock = FakeWriter(), Clock()
        service, log = make(writer, clock, expiration_ms=5000)
        await service.load_partition(0, log, 0)
        _, pid, epoch = await service.init_producer_id("tx", 2000, None)
        await service.add_partitions("tx", pid, epoch, {TP})
        clock.now += 2001
        service.abort_timed_out_transactions()
        await settle()
        assert writer.markers == [TxnMarker(pid, epoch + 1, False, 0, (TP,))]
        meta = service.transaction("tx")
        assert meta is not None and meta.state is TxnState.COMPLETE_ABORT
        # The zombie's late commit is fenced.
        assert await service.end_txn("tx", pid, epoch, True) is ErrorCode.producer_fenced
        service.expire_transactional_ids()
        await settle()
        assert service.transaction("tx") is not None  # not idle long enough
        clock.now += 5000
        service.expire_transactional_ids()
        await settle()
        assert service.transaction("tx") is None
        assert states_in(log)[-1] == ("tx", None)  # a tombstone
        await service.stop()

    asyncio.run(run())


def test_list_filters() -> None:
    async def run() -> None:
        service, log = make(FakeWriter(), Clock())
        await service.load_partition(0, log, 0)
        _, a, _ = await service.init_producer_id("a", 60_000, None)
        _, b, eb = await service.init_producer_id("b", 60_000, None)
        await service.add_partitions("b", b, eb, {TP})
        error, unknown, listed = service.list_transactions(("Ongoing", "Bogus"))
        assert error is ErrorCode.none and unknown == ["Bogus"]
        assert [t.transactional_id for t in listed] == ["b"]
        _, _, by_pid = service.list_transactions((), (a,))
        assert [t.transactional_id for t in by_pid] == ["a"]
        await service.stop()

    asyncio.run(run())


def test_list_duration_filter() -> None:
    async def run() -> None:
        clock = Clock()
        service, log = make(FakeWriter(), clock)
        await service.load_partition(0, log, 0)
        _, pid, epoch = await service.init_producer_id("old", 60_000, None)
        await service.add_partitions("old", pid, epoch, {TP})
        clock.now += 10_000
        _, pid, epoch = await service.init_producer_id("new", 60_000, None)
        await service.add_partitions("new", pid, epoch, {TP})
        clock.now += 1000
        _, _, long_running = service.list_transactions((), (), 5000)
        assert [t.transactional_id for t in long_running] == ["old"]
        _, _, everything = service.list_transactions((), (), -1)
        assert sorted(t.transactional_id for t in everything) == ["new", "old"]
        await service.stop()

    asyncio.run(run())


def test_a_refusal_is_answered_only_once_a_write_proves_the_coordinator_current() -> None:
    """INVALID_TXN_STATE, a fenced epoch or a foreign producer id end a librdkafka
    producer for good. A coordinator that lost its partition without knowing it yet (cut
    off, or resumed from a pause) must not answer them from its cached state: it writes
    the state once more, and only once that replicates is the refusal answered; when
    it cannot (the ISR follows another leader now), the client gets a retriable error."""

    async def run() -> None:
        replicated: list[int] = []

        async def wait_replicated(partition: int, offset: int) -> int:
            replicated.append(offset)
            return int(ErrorCode.not_leader_or_follower if stale else ErrorCode.none)

        service, log = make(FakeWriter(), Clock(), wait_replicated)
        stale = False
        await service.load_partition(0, log, 0)
        _, pid, epoch = await service.init_producer_id("tx", 60_000, None)
        assert await service.add_partitions("tx", pid, epoch, {TP}) is ErrorCode.none
        assert await service.end_txn("tx", pid, epoch, False) is ErrorCode.none
        await settle()  # CompleteAbort
        written = len(log.entries)
        # Current coordinator: a commit of the aborted transaction is refused, after a
        # write of the unchanged state replicated.
        assert await service.end_txn("tx", pid, epoch, True) is ErrorCode.invalid_txn_state
        assert len(log.entries) == written + 1
        assert states_in(log)[-1] == ("tx", TxnState.COMPLETE_ABORT)
        assert await service.end_txn("tx", pid, epoch + 1, True) is ErrorCode.producer_fenced
        # Deposed without knowing: the same requests get retriable errors, the state
        # is unchanged and nothing is left pending.
        stale = True
        assert await service.end_txn("tx", pid, epoch, True) is ErrorCode.not_coordinator
        assert await service.add_partitions("tx", pid, epoch + 1, {TP}) is (
            ErrorCode.not_coordinator
        )
        meta = service.transaction("tx")
        assert meta is not None and meta.state is TxnState.COMPLETE_ABORT and not meta.pending
        # Requests that need no refusal are not slowed by an extra write.
        stale = False
        before = len(replicated)
        assert await service.add_partitions("tx", pid, epoch, {TP}) is ErrorCode.none
        assert len(replicated) == before + 1  # the Ongoing record only
        await service.stop()

    asyncio.run(run())


def test_a_loaded_state_is_answered_from_only_once_the_isr_has_it() -> None:
    """A new coordinator's log may end with records its predecessor never had
    acknowledged; the next election may cut them away. Until the high watermark passes
    what was loaded, the partition answers COORDINATOR_LOAD_IN_PROGRESS (retriable)."""

    async def run() -> None:
        committed = asyncio.Event()
        waited: list[int] = []

        async def wait_replicated(partition: int, offset: int) -> int:
            waited.append(offset)
            if not committed.is_set():
                return int(ErrorCode.request_timed_out)
            return int(ErrorCode.none)

        service, log = make(FakeWriter(), Clock(), wait_replicated)
        transit = TransactionMetadata(
            "tx", producer_id=7, timeout_ms=60_000
        ).prepare_add_partitions({TP}, 1)
        log.append([(encode_key("tx"), encode_value(transit))])  # Ongoing, not yet committed
        loading = asyncio.ensure_future(service.load_partition(0, log, 3))
        for _ in range(5):
            await asyncio.sleep(0.06)
            assert await service.add_partitions("tx", 7, -1, {TP}) is (
                ErrorCode.coordinator_load_in_progress
            )
        assert waited and set(waited) == {1}  # the end of what was loaded
        committed.set()
        await loading
        assert await service.add_partitions("tx", 7, -1, {TP}) is ErrorCode.none
        await service.stop()

    asyncio.run(run())
