"""The transaction coordinator's decisions and transitions, without I/O (Kafka's
TransactionCoordinatorTest / TransactionMetadataTest cases)."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from headwater.txn.coordinator import (
    Fence,
    abort_timed_out,
    add_partitions,
    api_error,
    end_txn,
    expired_id,
    init_producer_id,
    timed_out,
    valid_timeout,
)
from headwater.txn.metadata import (
    MAX_PRODUCER_EPOCH,
    VALID_PREVIOUS,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)

TP = ("orders", 0)


def fresh(pid: int = 100) -> TransactionMetadata:
    return TransactionMetadata("tx", producer_id=pid, timeout_ms=60_000, update_ms=0)


def apply(meta: TransactionMetadata, decision: object) -> TransactionMetadata:
    """Make a decision durable, as the service does after the log write."""
    if isinstance(decision, Fence):
        decision = decision.transit
    assert isinstance(decision, TxnTransit), decision
    meta.complete(decision)
    return meta


def new_ids() -> itertools.count[int]:
    return itertools.count(500)


def ongoing(meta: TransactionMetadata | None = None, now: int = 1000) -> TransactionMetadata:
    meta = meta or fresh()
    apply(meta, init_producer_id(meta, 60_000, None, now, lambda: 1))
    apply(meta, add_partitions(meta, meta.producer_id, meta.producer_epoch, {TP}, now))
    return meta


def test_first_init_gives_epoch_zero_and_a_retry_bumps_it() -> None:
    meta = fresh()
    transit = init_producer_id(meta, 60_000, None, 5, lambda: 1)
    assert isinstance(transit, TxnTransit)
    assert meta.pending_state is TxnState.EMPTY
    apply(meta, transit)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (100, 0, TxnState.EMPTY)
    apply(meta, init_producer_id(meta, 60_000, None, 6, lambda: 1))
    assert meta.producer_epoch == 1
    assert meta.last_producer_epoch == 0


def test_requests_during_a_write_get_concurrent_transactions() -> None:
    meta = fresh()
    init_producer_id(meta, 60_000, None, 5, lambda: 1)  # not completed: pending
    assert init_producer_id(meta, 60_000, None, 5, lambda: 1) is ErrorCode.concurrent_transactions
    meta.abort_pending()
    assert isinstance(init_producer_id(meta, 60_000, None, 5, lambda: 1), TxnTransit)


def test_add_partitions_starts_and_grows_a_transaction() -> None:
    meta = ongoing(now=1000)
    assert meta.state is TxnState.ONGOING
    assert meta.start_ms == 1000
    # Already in the transaction: nothing to write.
    assert add_partitions(meta, 100, 0, {TP}, 2000) is ErrorCode.none
    apply(meta, add_partitions(meta, 100, 0, {("orders", 1)}, 3000))
    assert meta.partitions == {TP, ("orders", 1)}
    assert meta.start_ms == 1000  # growing keeps the start time


def test_add_partitions_checks_the_producer() -> None:
    meta = ongoing()
    assert add_partitions(None, 100, 0, {TP}, 0) is ErrorCode.invalid_producer_id_mapping
    assert add_partitions(meta, 999, 0, {TP}, 0) is ErrorCode.invalid_producer_id_mapping
    assert add_partitions(meta, 100, 7, {TP}, 0) is ErrorCode.producer_fenced


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_prepares_then_completes(commit: bool) -> None:
    meta = ongoing()
    apply(meta, end_txn(meta, 100, 0, commit, 2000))
    assert meta.state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    # Markers pending: the producer may not start another transaction yet.
    assert add_partitions(meta, 100, 0, {TP}, 2001) is ErrorCode.concurrent_transactions
    assert end_txn(meta, 100, 0, commit, 2001) is ErrorCode.concurrent_transactions
    assert end_txn(meta, 100, 0, not commit, 2001) is ErrorCode.invalid_txn_state
    apply(meta, meta.prepare_complete(3000))
    assert meta.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert meta.partitions == set()
    # A retried EndTxn whose answer was lost succeeds; the opposite one does not.
    assert end_txn(meta, 100, 0, commit, 3001) is ErrorCode.none
    assert end_txn(meta, 100, 0, not commit, 3001) is ErrorCode.invalid_txn_state
    # The next transaction starts from Complete*.
    apply(meta, add_partitions(meta, 100, 0, {TP}, 4000))
    assert meta.state is TxnState.ONGOING and meta.start_ms == 4000


def test_end_txn_errors() -> None:
    meta = fresh()
    apply(meta, init_producer_id(meta, 60_000, None, 0, lambda: 1))
    assert end_txn(None, 1, 0, True, 0) is ErrorCode.invalid_producer_id_mapping
    assert end_txn(meta, 100, 0, True, 0) is ErrorCode.invalid_txn_state  # Empty
    assert end_txn(meta, 100, 5, True, 0) is ErrorCode.producer_fenced


def test_a_new_producer_fences_an_ongoing_transaction() -> None:
    meta = ongoing()
    decision = init_producer_id(meta, 60_000, None, 2000, lambda: 1)
    assert isinstance(decision, Fence)
    apply(meta, decision)
    # The ongoing transaction is aborted with a bumped epoch: the zombie is fenced.
    assert meta.state is TxnState.PREPARE_ABORT
    assert meta.producer_epoch == 1
    assert end_txn(meta, 100, 0, True, 2001) is ErrorCode.producer_fenced
    assert add_partitions(meta, 100, 0, {TP}, 2001) is ErrorCode.producer_fenced
    # While the abort's markers are out, the new producer is asked to retry.
    assert (
        init_producer_id(meta, 60_000, None, 2001, lambda: 1) is ErrorCode.concurrent_transactions
    )
    apply(meta, meta.prepare_complete(2002))
    apply(meta, init_producer_id(meta, 60_000, None, 2003, lambda: 1))
    assert (meta.producer_epoch, meta.state) == (2, TxnState.EMPTY)


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    meta = fresh()
    apply(meta, init_producer_id(meta, 60_000, None, 0, lambda: 1))
    meta.producer_epoch = MAX_PRODUCER_EPOCH
    ids = new_ids()
    apply(meta, init_producer_id(meta, 60_000, None, 1, lambda: next(ids)))
    assert (meta.producer_id, meta.producer_epoch) == (500, 0)
    assert meta.previous_producer_id == 100


def test_kip360_recovery_keeps_the_producer_id() -> None:
    meta = fresh()
    apply(meta, init_producer_id(meta, 60_000, None, 0, lambda: 1))
    apply(meta, init_producer_id(meta, 60_000, (100, 0), 1, lambda: 1))
    assert (meta.producer_id, meta.producer_epoch) == (100, 1)
    # A retry naming the previous epoch (its answer was lost) gets the same epoch.
    apply(meta, init_producer_id(meta, 60_000, (100, 0), 2, lambda: 1))
    assert meta.producer_epoch == 1
    # An epoch that is neither current nor previous is a zombie.
    assert init_producer_id(meta, 60_000, (100, 7), 3, lambda: 1) is ErrorCode.producer_fenced
    # Another producer id is fenced.
    assert init_producer_id(meta, 60_000, (42, 0), 3, lambda: 1) is ErrorCode.producer_fenced


def test_kip360_retry_after_rotation_is_accepted() -> None:
    meta = fresh()
    apply(meta, init_producer_id(meta, 60_000, None, 0, lambda: 1))
    meta.producer_epoch = MAX_PRODUCER_EPOCH
    apply(meta, init_producer_id(meta, 60_000, (100, MAX_PRODUCER_EPOCH), 1, lambda: 500))
    assert (meta.producer_id, meta.producer_epoch) == (500, 0)
    # The client never saw the answer and retries with the old id and exhausted epoch.
    decision = init_producer_id(meta, 60_000, (100, MAX_PRODUCER_EPOCH), 2, lambda: 600)
    assert isinstance(decision, TxnTransit)


def test_timeout_aborts_with_a_bumped_epoch() -> None:
    meta = ongoing(now=1000)
    assert not timed_out(meta, 1000 + 60_000)
    assert timed_out(meta, 1000 + 60_001)
    apply(meta, abort_timed_out(meta, 70_000))
    assert (meta.state, meta.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    assert not timed_out(meta, 10**9)  # no longer Ongoing
    assert end_txn(meta, 100, 0, True, 70_001) is ErrorCode.producer_fenced


def test_expiration_only_when_idle() -> None:
    meta = fresh()
    apply(meta, init_producer_id(meta, 60_000, None, 1000, lambda: 1))
    assert not expired_id(meta, 1000 + 99, 100)
    assert expired_id(meta, 1000 + 100, 100)
    apply(meta, add_partitions(meta, 100, 0, {TP}, 2000))
    assert not expired_id(meta, 10**9, 100)  # an ongoing transaction never expires
    apply(meta, end_txn(meta, 100, 0, False, 3000))
    apply(meta, meta.prepare_complete(3000))
    apply(meta, meta.prepare_dead())
    assert meta.state is TxnState.DEAD


def test_every_transition_is_checked() -> None:
    """Each prepare_* succeeds exactly from Kafka's valid previous states."""
    prepares = {
        TxnState.EMPTY: lambda m: m.prepare_increment_epoch(1, None, 0),
        TxnState.ONGOING: lambda m: m.prepare_add_partitions({TP}, 0),
        TxnState.PREPARE_COMMIT: lambda m: m.prepare_end(True, 0),
        TxnState.PREPARE_ABORT: lambda m: m.prepare_end(False, 0),
        TxnState.DEAD: lambda m: m.prepare_dead(),
    }
    for target, prepare in prepares.items():
        for source in TxnState:
            meta = fresh()
            meta.state = source
            if source in VALID_PREVIOUS[target]:
                prepare(meta)
                assert meta.pending_state is target
            else:
                with pytest.raises(IllegalTransition):
                    prepare(meta)
    for source in TxnState:
        meta = fresh()
        meta.state = source
        if source in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            done = meta.prepare_complete(0).state
            assert source in VALID_PREVIOUS[done]
        else:
            with pytest.raises(IllegalTransition):
                meta.prepare_complete(0)


def test_fencing_errors_follow_the_request_version() -> None:
    fenced = ErrorCode.producer_fenced
    assert api_error(fenced, "init_producer_id", 3) is ErrorCode.invalid_producer_epoch
    assert api_error(fenced, "init_producer_id", 4) is fenced
    for api in ("add_partitions", "add_offsets", "end_txn"):
        assert api_error(fenced, api, 1) is ErrorCode.invalid_producer_epoch
        assert api_error(fenced, api, 2) is fenced
    assert api_error(ErrorCode.concurrent_transactions, "end_txn", 0) is (
        ErrorCode.concurrent_transactions
    )


def test_timeout_bounds() -> None:
    assert valid_timeout(900_000, 900_000)
    assert not valid_timeout(900_001, 900_000)
    assert not valid_timeout(0, 900_000)
