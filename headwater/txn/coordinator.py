"""What each transaction request does to a transactional id's state: Kafka's
TransactionCoordinator decisions, without I/O.

Every function takes the current `TransactionMetadata` and answers either an
error code (nothing to write) or a `TxnTransit` to make durable first. The
asyncio service (`service.py`) writes the transit, waits for the ISR, applies
it, and sends markers; keeping the decisions here lets the unit tests walk
every transition without sockets or a loop.

Fencing errors are the modern PRODUCER_FENCED; `api_error` converts them to
INVALID_PRODUCER_EPOCH for request versions that predate it (as KafkaApis does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from headwater.txn.metadata import (
    NO_PRODUCER_EPOCH,
    EpochExhausted,
    EpochMismatch,
    TopicPartition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
    is_epoch_exhausted,
)

#: Request versions from which each API knows PRODUCER_FENCED (older ones get 47).
PRODUCER_FENCED_FROM = {"init_producer_id": 4, "add_partitions": 2, "add_offsets": 2, "end_txn": 2}


def api_error(error: ErrorCode, api: str, version: int) -> ErrorCode:
    """PRODUCER_FENCED as the client's request version understands it."""
    if error is ErrorCode.producer_fenced and version < PRODUCER_FENCED_FROM[api]:
        return ErrorCode.invalid_producer_epoch
    return error


@dataclass(frozen=True, slots=True)
class Fence:
    """InitProducerId found an ongoing transaction: abort it with a bumped epoch
    (written as PrepareAbort), then answer CONCURRENT_TRANSACTIONS so the new
    producer retries once the abort is complete."""

    transit: TxnTransit


Decision = ErrorCode | TxnTransit


def valid_timeout(timeout_ms: int, max_timeout_ms: int) -> bool:
    return 0 < timeout_ms <= max_timeout_ms


def init_producer_id(
    meta: TransactionMetadata,
    timeout_ms: int,
    expected: tuple[int, int] | None,
    now_ms: int,
    new_producer_id: Callable[[], int],
) -> ErrorCode | TxnTransit | Fence:
    """InitProducerId for an existing (or just created) transactional id.

    ``expected`` is the (producer id, epoch) a KIP-360 client names to keep
    its producer id; None for a fresh ``init_transactions``.
    """
    if meta.pending:
        return ErrorCode.concurrent_transactions
    if expected is not None and not _known_producer(meta, *expected):
        return ErrorCode.producer_fenced
    state = meta.state
    if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        return ErrorCode.concurrent_transactions
    if state is TxnState.ONGOING:
        return Fence(meta.prepare_end(False, now_ms, epoch=meta.fenced_epoch()))
    if state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            return meta.prepare_producer_id_rotation(
                new_producer_id(), timeout_ms, now_ms, record_last_epoch=expected is not None
            )
        try:
            return meta.prepare_increment_epoch(
                timeout_ms, None if expected is None else expected[1], now_ms
            )
        except EpochMismatch:
            return ErrorCode.producer_fenced
        except EpochExhausted:  # unreachable: exhausted epochs rotate above
            return ErrorCode.producer_fenced
    raise RuntimeError(f"{meta.transactional_id} is {state.display_name}: never served")


def _known_producer(meta: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """KIP-360: the client's (id, epoch) belongs to this transactional id: the id is
    current, the metadata was just created, or it is the previous id retried after
    a rotation whose answer was lost."""
    return (
        meta.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == meta.producer_id
        or (producer_id == meta.previous_producer_id and is_epoch_exhausted(epoch))
    )


def _same_producer(meta: TransactionMetadata, producer_id: int, epoch: int) -> ErrorCode:
    if meta.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if meta.producer_epoch != epoch:
        return ErrorCode.producer_fenced
    return ErrorCode.none


def add_partitions(
    meta: TransactionMetadata | None,
    producer_id: int,
    epoch: int,
    partitions: set[TopicPartition],
    now_ms: int,
) -> Decision:
    """AddPartitionsToTxn / AddOffsetsToTxn: the transaction (re)starts or grows."""
    if meta is None:
        return ErrorCode.invalid_producer_id_mapping
    error = _same_producer(meta, producer_id, epoch)
    if error is not ErrorCode.none:
        return error
    if meta.pending or meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        return ErrorCode.concurrent_transactions
    if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
        return ErrorCode.none
    return meta.prepare_add_partitions(partitions, now_ms)


def end_txn(
    meta: TransactionMetadata | None, producer_id: int, epoch: int, commit: bool, now_ms: int
) -> Decision:
    """EndTxn: Ongoing -> PrepareCommit/PrepareAbort; a retry of a finished one is fine."""
    if meta is None:
        return ErrorCode.invalid_producer_id_mapping
    error = _same_producer(meta, producer_id, epoch)
    if error is not ErrorCode.none:
        return error
    if meta.pending:
        return ErrorCode.concurrent_transactions
    state = meta.state
    if state is TxnState.ONGOING:
        return meta.prepare_end(commit, now_ms)
    finished = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    if state is finished:
        return ErrorCode.none  # a retry whose answer was lost
    if state is preparing:
        return ErrorCode.concurrent_transactions
    return ErrorCode.invalid_txn_state


def timed_out(meta: TransactionMetadata, now_ms: int) -> bool:
    """An ongoing transaction older than its timeout, with nothing in flight."""
    return (
        meta.state is TxnState.ONGOING
        and not meta.pending
        and meta.start_ms >= 0
        and meta.start_ms + meta.timeout_ms < now_ms
    )


def abort_timed_out(meta: TransactionMetadata, now_ms: int) -> TxnTransit:
    """The coordinator aborts an expired transaction with a bumped epoch, so a late
    EndTxn or produce from its (zombie) producer is fenced."""
    return meta.prepare_end(False, now_ms, epoch=meta.fenced_epoch())


def expired_id(meta: TransactionMetadata, now_ms: int, expiration_ms: int) -> bool:
    """transactional.id.expiration.ms passed since the id was last used, and it is idle."""
    return (
        meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        and not meta.pending
        and meta.update_ms + expiration_ms <= now_ms
    )
