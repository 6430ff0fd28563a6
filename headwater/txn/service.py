"""The transaction coordinator on the broker's event loop: Kafka's
TransactionStateManager and the I/O half of its TransactionCoordinator.

The coordinator of a transactional id is the leader of its
``__transaction_state`` partition (``abs(hashCode(id)) % partitions``, as for
groups). Leadership loads and unloads partitions exactly like the group
service does for ``__consumer_offsets``: a load replays the partition into
memory (ids there get COORDINATOR_LOAD_IN_PROGRESS meanwhile) and then
finishes every transaction the log shows half-way (PrepareCommit or
PrepareAbort) by sending its markers again; an unload forgets them (NOT_COORDINATOR).

Each state change follows `coordinator.py`'s decision, is appended to the
partition and (in a cluster) replicated to the ISR before it is applied or
answered, so a failover never forgets what a client was told. Markers are sent
after EndTxn is answered; CompleteCommit/CompleteAbort is written once every
partition has its marker. Two timers run: one aborts transactions past their
timeout, one removes ids idle for ``transactional.id.expiration.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from headwater.coordinator.placement import partition_for
from headwater.coordinator.replication import coordinator_error
from headwater.coordinator.state_log import AppendFailed
from headwater.txn.coordinator import (
    Fence,
    abort_timed_out,
    add_partitions,
    end_txn,
    expired_id,
    init_producer_id,
    timed_out,
    valid_timeout,
)
from headwater.txn.marker_sender import MarkerSender
from headwater.txn.markers import TxnMarker
from headwater.txn.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)
from headwater.txn.state_log import decode_key, decode_value, encode_key, encode_value

log = logging.getLogger(__name__)

#: (partition, next offset after a write) -> 0 once on every ISR member, else an error.
WaitReplicated = Callable[[int, int], Awaitable[int]]
#: partition -> (node id, host, port) of its leader, or None.
CoordinatorOf = Callable[[int], "tuple[int, str, int] | None"]


class StateLog(Protocol):
    """A ``__transaction_state`` partition (the broker adapts its Log)."""

    def append(self, entries: Sequence[tuple[bytes, bytes | None]]) -> int: ...

    def replay(self) -> Iterator[object]: ...

    @property
    def log_end_offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TxnConfig:
    num_partitions: int = 50
    max_timeout_ms: int = 900_000
    abort_interval_ms: int = 10_000
    expiration_ms: int = 7 * 24 * 3600 * 1000
    removal_interval_ms: int = 3600 * 1000


@dataclass(slots=True)
class _Partition:
    coordinator_epoch: int
    log: StateLog
    loading: bool = True
    txns: dict[str, TransactionMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: str


#: Answers from state that a client cannot retry its way out of.
REFUSALS = frozenset(
    {
        ErrorCode.invalid_txn_state,
        ErrorCode.producer_fenced,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.invalid_producer_id_mapping,
    }
)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinatorService:
    """Serves the coordinator side of every transaction API for the partitions led here."""

    def __init__(
        self,
        *,
        node_id: int,
        host: str,
        port: int,
        config: TxnConfig,
        new_producer_id: Callable[[], int],
        markers: MarkerSender,
        coordinator_of: CoordinatorOf | None = None,
        wait_replicated: WaitReplicated | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.node_id = node_id
        self._host = host
        self._port = port
        self.config = config
        self._new_producer_id = new_producer_id
        self.markers = markers
        self._coordinator_of = coordinator_of
        self._wait_replicated = wait_replicated
        self._clock_ms = clock_ms
        self._partitions: dict[int, _Partition] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if not self._timers:
            self._timers = [
                asyncio.create_task(
                    self._every(
                        self.config.abort_interval_ms,
                        self.abort_timed_out_transactions,
                        "aborting timed-out transactions",
                    ),
                    name="txn-abort-timer",
                ),
                asyncio.create_task(
                    self._every(
                        self.config.removal_interval_ms,
                        self.expire_transactional_ids,
                        "expiring transactional ids",
                    ),
                    name="txn-expire-timer",
                ),
            ]

    async def stop(self) -> None:
        for task in [*self._timers, *self._tasks]:
            task.cancel()
        for task in [*self._timers, *self._tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._timers = []
        await self.markers.close()

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ leadership

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def coordinator_for(self, transactional_id: str) -> tuple[int, str, int] | None:
        """FindCoordinator: the leader of the id's partition (None: not available)."""
        partition = self.partition_for(transactional_id)
        if self._coordinator_of is None:
            return self.node_id, self._host, self._port
        return self._coordinator_of(partition)

    async def load_partition(self, partition: int, state_log: StateLog, epoch: int) -> None:
        """Became the partition's leader at ``epoch``: replay it, then finish what it left
        half-done (Kafka's loadTransactionsForTxnTopicPartition)."""
        current = self._partitions.get(partition)
        if current is not None and current.coordinator_epoch >= epoch:
            return
        loaded = _Partition(epoch, state_log)
        self._partitions[partition] = loaded
        count = 0
        for item in state_log.replay():
            if not isinstance(item, tuple):
                continue
            raw_key, raw_value = item
            transactional_id = decode_key(raw_key)
            if raw_value is None:
                loaded.txns.pop(transactional_id, None)
            else:
                transit = decode_value(raw_value)
                loaded.txns[transactional_id] = TransactionMetadata.from_transit(
                    transactional_id, transit
                )
            count += 1
            if count % 500 == 0:
                await asyncio.sleep(0)
                if self._partitions.get(partition) is not loaded:
                    return  # unloaded meanwhile
        if self._partitions.get(partition) is not loaded:
            return
        if not await self._committed(partition, loaded, state_log.log_end_offset):
            return  # unloaded meanwhile
        loaded.loading = False
        log.log(
            logging.INFO if loaded.txns else logging.DEBUG,
            "loaded %d transactional ids of %s-%d at coordinator epoch %d",
            len(loaded.txns),
            "__transaction_state",
            partition,
            epoch,
        )
        for meta in loaded.txns.values():
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._spawn(
                    self._complete_transaction(partition, loaded, meta),
                    f"txn-markers-{meta.transactional_id}",
                )

    async def _committed(self, partition: int, loaded: _Partition, end: int) -> bool:
        """Until the ISR has every record replayed: True, or False once unloaded.

        A new leader's log may end with records its predecessor wrote but never
        had acknowledged. Answered from (an AddPartitionsToTxn of partitions already
        in the transaction, a retried EndTxn, a refusal), such a record may be cut
        away by the next election, and the client then meets a coordinator that
        never saw its transaction (the campaign's fatal INVALID_TXN_STATE after a
        kill and a pause in a row). So the partition stays COORDINATOR_LOAD_IN_PROGRESS
        until the high watermark passes the end of what was loaded."""
        if self._wait_replicated is None:
            return True
        delay = 0.05
        while self._partitions.get(partition) is loaded:
            try:
                code = await self._wait_replicated(partition, end)
            except Exception:
                log.exception("waiting for __transaction_state-%d replication failed", partition)
                code = int(ErrorCode.request_timed_out)
            if code == 0:
                return True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        return False

    def unload_partition(self, partition: int) -> None:
        """No longer the leader: forget its ids (their requests get NOT_COORDINATOR)."""
        self._partitions.pop(partition, None)

    def _route(self, transactional_id: str) -> tuple[int, _Partition] | ErrorCode:
        partition = self.partition_for(transactional_id)
        loaded = self._partitions.get(partition)
        if loaded is None:
            return ErrorCode.not_coordinator
        if loaded.loading:
            return ErrorCode.coordinator_load_in_progress
        return partition, loaded

    def _still_owner(self, partition: int, loaded: _Partition) -> bool:
        return self._partitions.get(partition) is loaded

    # ------------------------------------------------------------ writing

    async def _write(
        self, partition: int, loaded: _Partition, meta: TransactionMetadata, transit: TxnTransit
    ) -> ErrorCode:
        """Append ``transit``, wait for the ISR, apply it: the error a client gets."""
        try:
            end = loaded.log.append([(encode_key(meta.transactional_id), encode_value(transit))])
        except AppendFailed as failed:
            meta.abort_pending()
            return coordinator_error(failed.error)
        except Exception:
            meta.abort_pending()
            log.exception("appending to __transaction_state-%d failed", partition)
            return ErrorCode.unknown_server_error
        if self._wait_replicated is not None:
            try:
                code = await self._wait_replicated(partition, end)
            except Exception:
                log.exception("waiting for __transaction_state-%d replication failed", partition)
                code = int(ErrorCode.request_timed_out)
            if code != 0:
                meta.abort_pending()
                try:
                    return coordinator_error(ErrorCode(code))
                except ValueError:
                    return ErrorCode.unknown_server_error
        if (
            not self._still_owner(partition, loaded)
            or loaded.txns.get(meta.transactional_id) is not meta
        ):
            meta.abort_pending()
            return ErrorCode.not_coordinator
        meta.complete(transit)
        if transit.state is TxnState.DEAD:
            del loaded.txns[meta.transactional_id]
        return ErrorCode.none

    async def _confirmed(
        self, partition: int, loaded: _Partition, meta: TransactionMetadata | None, error: ErrorCode
    ) -> ErrorCode:
        """A refusal from the cached state (fatal to a client: INVALID_TXN_STATE, a
        fenced epoch, a foreign producer id) is answered only once a write made here
        has replicated, which proves this broker still coordinates the id and that
        its state is current. A coordinator cut off from ZooKeeper and its peers, or
        resumed from a pause, may still believe it leads while the new coordinator
        has moved the transaction on (stop 34's fatal INVALID_TXN_STATE); its write
        cannot replicate, and the client gets a retriable error instead. Refusals
        are rare, so the extra write costs nothing in practice."""
        if error not in REFUSALS or meta is None or meta.pending:
            return error
        written = await self._write(partition, loaded, meta, meta.prepare_confirm())
        return error if written is ErrorCode.none else written

    # ------------------------------------------------------------ APIs

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[ErrorCode, int, int]:
        """InitProducerId with a transactional id: (error, producer id, epoch)."""
        failed = ErrorCode.none
        if not transactional_id:
            failed = ErrorCode.invalid_request
        elif not valid_timeout(timeout_ms, self.config.max_timeout_ms):
            failed = ErrorCode.invalid_transaction_timeout
        routed = self._route(transactional_id) if failed is ErrorCode.none else failed
        if isinstance(routed, ErrorCode):
            return routed, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        partition, loaded = routed
        meta = loaded.txns.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(
                transactional_id,
                producer_id=self._new_producer_id(),
                timeout_ms=timeout_ms,
                update_ms=self._clock_ms(),
            )
            loaded.txns[transactional_id] = meta
        decision = init_producer_id(
            meta, timeout_ms, expected, self._clock_ms(), self._new_producer_id
        )
        if isinstance(decision, ErrorCode):
            return (
                await self._confirmed(partition, loaded, meta, decision),
                NO_PRODUCER_ID,
                NO_PRODUCER_EPOCH,
            )
        if isinstance(decision, Fence):
            error = await self._write(partition, loaded, meta, decision.transit)
            if error is ErrorCode.none:
                log.info(
                    "fencing producer %d of %r: aborting its ongoing transaction",
                    meta.producer_id,
                    transactional_id,
                )
                self._spawn(
                    self._complete_transaction(partition, loaded, meta),
                    f"txn-markers-{transactional_id}",
                )
                error = ErrorCode.concurrent_transactions
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        error = await self._write(partition, loaded, meta, decision)
        if error is not ErrorCode.none:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        return ErrorCode.none, meta.producer_id, meta.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: set[TopicPartition],
    ) -> ErrorCode:
        """AddPartitionsToTxn (the partitions already passed the existence/ACL checks)."""
        if not transactional_id:
            return ErrorCode.invalid_request
        routed = self._route(transactional_id)
        if isinstance(routed, ErrorCode):
            return routed
        partition, loaded = routed
        meta = loaded.txns.get(transactional_id)
        decision = add_partitions(meta, producer_id, epoch, partitions, self._clock_ms())
        if isinstance(decision, ErrorCode):
            return await self._confirmed(partition, loaded, meta, decision)
        assert meta is not None
        return await self._write(partition, loaded, meta, decision)

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> ErrorCode:
        """EndTxn: PrepareX durable -> answer -> markers (background) -> CompleteX."""
        if not transactional_id:
            return ErrorCode.invalid_request
        routed = self._route(transactional_id)
        if isinstance(routed, ErrorCode):
            return routed
        partition, loaded = routed
        meta = loaded.txns.get(transactional_id)
        decision = end_txn(meta, producer_id, epoch, commit, self._clock_ms())
        if isinstance(decision, ErrorCode):
            return await self._confirmed(partition, loaded, meta, decision)
        assert meta is not None
        error = await self._write(partition, loaded, meta, decision)
        if error is ErrorCode.none:
            self._spawn(
                self._complete_transaction(partition, loaded, meta),
                f"txn-markers-{transactional_id}",
            )
        return error

    async def _complete_transaction(
        self, partition: int, loaded: _Partition, meta: TransactionMetadata
    ) -> None:
        """Send the markers of a PrepareCommit/PrepareAbort, then write CompleteX."""
        commit = meta.state is TxnState.PREPARE_COMMIT
        marker = TxnMarker(
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            commit=commit,
            coordinator_epoch=loaded.coordinator_epoch,
            partitions=tuple(sorted(meta.partitions)),
        )
        written = await self.markers.send(marker, lambda: self._still_owner(partition, loaded))
        if not written:
            if self._still_owner(partition, loaded):
                # As Kafka: a fenced marker means a newer coordinator or producer
                # epoch owns the transaction; this one waits to be unloaded.
                log.warning(
                    "markers of %r (producer %d, epoch %d) were fenced; it stays %s here",
                    meta.transactional_id,
                    marker.producer_id,
                    marker.producer_epoch,
                    meta.state.display_name,
                )
            return
        backoff = 0.05
        while self._still_owner(partition, loaded) and meta.state in (
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
        ):
            if meta.pending:
                await asyncio.sleep(backoff)
                continue
            transit = meta.prepare_complete(self._clock_ms())
            error = await self._write(partition, loaded, meta, transit)
            if error is ErrorCode.none or error is ErrorCode.not_coordinator:
                return
            log.warning(
                "writing %s for %r failed (%s); retrying",
                transit.state.display_name,
                meta.transactional_id,
                error.name,
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    # ------------------------------------------------------------ tooling

    def describe(self, transactional_id: str) -> dict[str, object]:
        """One DescribeTransactions answer."""
        answer: dict[str, object] = {"transactional_id": transactional_id, "topics": []}
        if not transactional_id:
            return {**answer, "error_code": ErrorCode.invalid_request}
        routed = self._route(transactional_id)
        if isinstance(routed, ErrorCode):
            return {**answer, "error_code": routed}
        meta = routed[1].txns.get(transactional_id)
        if meta is None or meta.state is TxnState.DEAD:
            return {**answer, "error_code": ErrorCode.transactional_id_not_found}
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(p)
        return {
            **answer,
            "error_code": ErrorCode.none,
            "transaction_state": meta.state.display_name,
            "transaction_timeout_ms": meta.timeout_ms,
            "transaction_start_time_ms": meta.start_ms,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }

    def list_transactions(
        self,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        duration_filter_ms: int = -1,
    ) -> tuple[ErrorCode, list[str], list[TxnListing]]:
        """ListTransactions: (error, unknown state filters, listings)."""
        wanted: set[TxnState] = set()
        unknown: list[str] = []
        for name in states:
            state = TxnState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted.add(state)
        if states and not wanted:
            return ErrorCode.none, unknown, []
        error = ErrorCode.none
        if any(p.loading for p in self._partitions.values()):
            error = ErrorCode.coordinator_load_in_progress
        now = self._clock_ms()
        pids = set(producer_ids)
        listings = [
            TxnListing(meta.transactional_id, meta.producer_id, meta.state.display_name)
            for p in self._partitions.values()
            if not p.loading
            for meta in p.txns.values()
            if meta.state is not TxnState.DEAD
            and (not wanted or meta.state in wanted)
            and (not pids or meta.producer_id in pids)
            # KIP-994: only transactions running longer than the filter (Kafka
            # compares with the start time whatever the state).
            and (duration_filter_ms < 0 or now - meta.start_ms > duration_filter_ms)
        ]
        return error, unknown, listings

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        """The live metadata, for inspection (tests); do not mutate."""
        routed = self._route(transactional_id)
        return None if isinstance(routed, ErrorCode) else routed[1].txns.get(transactional_id)

    # ------------------------------------------------------------ timers

    @staticmethod
    async def _every(interval_ms: int, task: Callable[[], None], what: str) -> None:
        """Run ``task`` every ``interval_ms``; a failure is logged and retried next round."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                task()
            except Exception:
                log.exception("%s failed; will retry", what)

    def _loaded_transactions(self) -> Iterator[tuple[int, _Partition, TransactionMetadata]]:
        """Every transaction of every fully loaded partition (a snapshot: safe to spawn from)."""
        for partition, loaded in list(self._partitions.items()):
            if not loaded.loading:
                for meta in list(loaded.txns.values()):
                    yield partition, loaded, meta

    def abort_timed_out_transactions(self) -> None:
        """Abort (with a bumped epoch) every ongoing transaction past its timeout."""
        now = self._clock_ms()
        for partition, loaded, meta in self._loaded_transactions():
            if timed_out(meta, now):
                log.info(
                    "aborting transaction of %r (producer %d): timed out after %d ms",
                    meta.transactional_id,
                    meta.producer_id,
                    meta.timeout_ms,
                )
                transit = abort_timed_out(meta, now)
                self._spawn(
                    self._abort(partition, loaded, meta, transit),
                    f"txn-timeout-{meta.transactional_id}",
                )

    async def _abort(
        self, partition: int, loaded: _Partition, meta: TransactionMetadata, transit: TxnTransit
    ) -> None:
        error = await self._write(partition, loaded, meta, transit)
        if error is ErrorCode.none:
            await self._complete_transaction(partition, loaded, meta)
        else:
            log.info(
                "aborting timed-out %r failed (%s); next round retries",
                meta.transactional_id,
                error.name,
            )

    def expire_transactional_ids(self) -> None:
        """Tombstone ids unused for transactional.id.expiration.ms."""
        now = self._clock_ms()
        for partition, loaded, meta in self._loaded_transactions():
            if expired_id(meta, now, self.config.expiration_ms):
                log.info("transactional id %r expired", meta.transactional_id)
                self._spawn(
                    self._write_and_log(partition, loaded, meta, meta.prepare_dead()),
                    f"txn-expire-{meta.transactional_id}",
                )

    async def _write_and_log(
        self, partition: int, loaded: _Partition, meta: TransactionMetadata, transit: TxnTransit
    ) -> None:
        error = await self._write(partition, loaded, meta, transit)
        if error is not ErrorCode.none:
            log.info(
                "writing %s for %r failed: %s",
                transit.state.display_name,
                meta.transactional_id,
                error.name,
            )
