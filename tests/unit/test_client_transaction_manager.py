"""The transactional producer's state machine, without a broker."""

from __future__ import annotations

import pytest

from headwater.client.errors import KafkaError
from headwater.client.transaction_manager import (
    Action,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionManager,
    TransactionStateError,
    TxnState,
    classify,
)
from headwater.client.types import TopicPartition

A = TopicPartition("a", 0)
B = TopicPartition("b", 1)


def ready() -> TransactionManager:
    tm = TransactionManager("tx-1")
    tm.begin_init()
    tm.init_done(7, 3)
    return tm


def test_init_then_begin_then_commit_returns_to_ready() -> None:
    tm = ready()
    assert (tm.state, tm.producer.producer_id, tm.producer.epoch) == (TxnState.READY, 7, 3)
    tm.begin()
    tm.begin_commit()
    tm.end_done()
    assert tm.state is TxnState.READY


@pytest.mark.parametrize(
    ("call", "why"),
    [
        ("begin", "before init_transactions"),
        ("begin_commit", "before init_transactions"),
        ("begin_abort", "before init_transactions"),
        ("check_can_append", "sending outside a transaction"),
    ],
)
def test_calls_before_init_are_state_errors(call: str, why: str) -> None:
    tm = TransactionManager("tx-1")
    with pytest.raises(TransactionStateError):
        getattr(tm, call)()


def test_begin_twice_and_commit_without_begin_are_refused() -> None:
    tm = ready()
    with pytest.raises(TransactionStateError):
        tm.begin_commit()
    tm.begin()
    with pytest.raises(TransactionStateError):
        tm.begin()
    with pytest.raises(TransactionStateError):
        tm.begin_init()


def test_partition_must_be_added_before_its_batches_may_go() -> None:
    tm = ready()
    tm.begin()
    tm.maybe_add_partition(A)
    tm.maybe_add_partition(B)
    assert not tm.may_send(A)
    first = tm.take_new_partitions()
    assert first == [A, B]
    assert not tm.may_send(A), "pending is not yet added"
    tm.maybe_add_partition(A)  # appending again while the request is in flight
    assert tm.take_new_partitions() == [], "one AddPartitionsToTxn at a time"
    tm.partitions_added(first)
    assert tm.may_send(A) and tm.may_send(B)
    assert not tm.has_unadded_partitions
    assert tm.started_on_coordinator


def test_retried_add_puts_partitions_back_to_new() -> None:
    tm = ready()
    tm.begin()
    tm.maybe_add_partition(A)
    taken = tm.take_new_partitions()
    tm.partitions_not_added(taken)
    assert tm.take_new_partitions() == [A]


def test_commit_clears_the_partitions_of_the_transaction() -> None:
    tm = ready()
    tm.begin()
    tm.maybe_add_partition(A)
    tm.partitions_added(tm.take_new_partitions())
    tm.begin_commit()
    tm.end_done()
    tm.begin()
    assert not tm.may_send(A), "a new transaction adds its partitions again"
    assert not tm.started_on_coordinator


def test_offsets_alone_start_the_transaction_on_the_coordinator() -> None:
    tm = ready()
    tm.begin()
    assert not tm.started_on_coordinator
    tm.offsets_added()
    assert tm.started_on_coordinator


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (0, Action.DONE),
        (51, Action.RETRY),  # CONCURRENT_TRANSACTIONS
        (14, Action.RETRY),  # COORDINATOR_LOAD_IN_PROGRESS
        (16, Action.FIND_COORDINATOR),  # NOT_COORDINATOR
        (15, Action.FIND_COORDINATOR),  # COORDINATOR_NOT_AVAILABLE
        (90, Action.FATAL),  # PRODUCER_FENCED
        (47, Action.FATAL),  # INVALID_PRODUCER_EPOCH
        (48, Action.FATAL),  # INVALID_TXN_STATE
        (53, Action.FATAL),  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        (22, Action.ABORTABLE),  # ILLEGAL_GENERATION (TxnOffsetCommit)
        (59, Action.ABORTABLE),  # UNKNOWN_PRODUCER_ID
        (87, Action.ABORTABLE),  # anything unexpected
    ],
)
def test_error_classification_follows_kafka(code: int, action: Action) -> None:
    assert classify(code) is action


@pytest.mark.parametrize("code", [90, 47])
def test_fencing_is_fatal_and_sticks(code: int) -> None:
    tm = ready()
    tm.begin()
    assert tm.handle(code, "EndTxn") is Action.FATAL
    assert tm.state is TxnState.FATAL_ERROR
    for call in (tm.begin_abort, tm.begin_commit, tm.begin, tm.check_can_append):
        with pytest.raises(ProducerFencedError) as info:
            call()
        assert info.value.code == 90


def test_abortable_error_refuses_commit_and_allows_abort_then_a_new_transaction() -> None:
    tm = ready()
    tm.begin()
    tm.maybe_add_partition(A)
    tm.batch_failed(KafkaError(10, "too large"))
    assert tm.state is TxnState.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError) as info:
        tm.begin_commit()
    assert info.value.code == 10
    with pytest.raises(TransactionAbortableError):
        tm.check_can_append()
    tm.begin_abort()
    tm.end_done()
    tm.begin()
    assert tm.state is TxnState.IN_TRANSACTION


def test_failed_batch_with_fenced_epoch_is_fatal() -> None:
    tm = ready()
    tm.begin()
    tm.batch_failed(KafkaError(47, "produce"))
    assert tm.state is TxnState.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        tm.begin_abort()


def test_commit_failing_abortably_moves_to_abortable_error() -> None:
    tm = ready()
    tm.begin()
    tm.begin_commit()
    assert tm.handle(120, "EndTxn") is Action.ABORTABLE
    assert tm.state is TxnState.ABORTABLE_ERROR
    tm.begin_abort()
    assert tm.state is TxnState.ABORTING


def test_retriable_codes_leave_the_state_alone() -> None:
    tm = ready()
    tm.begin()
    tm.begin_commit()
    assert tm.handle(51, "EndTxn") is Action.RETRY
    assert tm.handle(16, "EndTxn") is Action.FIND_COORDINATOR
    assert tm.state is TxnState.COMMITTING


def test_failed_init_can_be_called_again() -> None:
    tm = TransactionManager("tx-1")
    tm.begin_init()
    assert tm.handle(59, "InitProducerId") is Action.ABORTABLE
    assert tm.state is TxnState.UNINITIALIZED
    tm.begin_init()
    tm.init_done(1, 0)
    assert tm.state is TxnState.READY


def test_hand_off_gives_the_transaction_away_and_needs_a_new_init() -> None:
    tm = ready()
    tm.begin()
    tm.maybe_add_partition(A)
    tm.partitions_added(tm.take_new_partitions())
    owner = tm.hand_off()
    assert (owner.producer_id, owner.epoch) == (7, 3)
    assert tm.state is TxnState.UNINITIALIZED
    with pytest.raises(TransactionStateError):
        tm.begin()
    tm.begin_init()
    tm.init_done(7, 4)
    tm.begin()
    assert not tm.may_send(A)


def test_fenced_error_survives_pickling() -> None:
    import pickle

    err = pickle.loads(pickle.dumps(ProducerFencedError(message="zombie")))
    assert isinstance(err, ProducerFencedError)
    assert (err.code, err.message) == (90, "zombie")


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        TransactionManager("")
    with pytest.raises(ValueError):
        TransactionManager("t", transaction_timeout_ms=0)
