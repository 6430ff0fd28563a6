"""The transactional producer's state, as Kafka's ``TransactionManager`` keeps it (KIP-98).

Sans-I/O: no sockets, no clock, no asyncio. The producer asks it what is
allowed (may I append to this partition? may this batch go on the wire?),
tells it what the coordinator answered, and it says what to do next. The
rules it holds:

* the legal transitions between ``TxnState``s (``_TRANSITIONS``, Java's
  ``State.isTransitionValid``); a call in the wrong state is a
  ``TransactionStateError`` (the application's mistake, not the broker's);
* a partition must be added to the transaction (AddPartitionsToTxn) before
  any of its batches is sent: appends record the partition as *new*, the
  producer moves new partitions to *pending* when it sends the request, and
  to *added* when the coordinator accepts them; only *added* partitions
  may be drained (``may_send``);
* how each coordinator error is handled (``classify``): retry as is
  (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, other retriable
  codes), find the coordinator again (NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE), fatal (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH
  -> ``ProducerFencedError``; authorization, INVALID_TXN_STATE), or
  abortable: the transaction cannot commit, the application must call
  ``abort_transaction`` and may then go on with a new one.

The object is not thread-safe by itself; the blocking ``Producer`` appends
from the caller's thread, so the producer guards it with its lock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from headwater.client.errors import RETRIABLE_CODES, KafkaError
from headwater.client.types import TopicPartition

# Error codes the transaction protocol distinguishes (Kafka's Errors.java).
COORDINATOR_LOAD_IN_PROGRESS: Final = 14
COORDINATOR_NOT_AVAILABLE: Final = 15
NOT_COORDINATOR: Final = 16
REQUEST_TIMED_OUT: Final = 7
ILLEGAL_GENERATION: Final = 22
UNKNOWN_MEMBER_ID: Final = 25
GROUP_AUTHORIZATION_FAILED: Final = 30
CLUSTER_AUTHORIZATION_FAILED: Final = 31
INVALID_PRODUCER_EPOCH: Final = 47
INVALID_TXN_STATE: Final = 48
INVALID_PRODUCER_ID_MAPPING: Final = 49
CONCURRENT_TRANSACTIONS: Final = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = 53
OPERATION_NOT_ATTEMPTED: Final = 55
UNKNOWN_PRODUCER_ID: Final = 59
FENCED_INSTANCE_ID: Final = 82
PRODUCER_FENCED: Final = 90
UNSTABLE_OFFSET_COMMIT: Final = 88
TRANSACTION_ABORTABLE: Final = 120


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


S = TxnState
# target -> the states it may be entered from (FATAL_ERROR: from anywhere).
_TRANSITIONS: Final[dict[TxnState, frozenset[TxnState]]] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING, S.ABORTING}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING: frozenset({S.IN_TRANSACTION}),
    S.ABORTING: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING, S.ABORTABLE_ERROR}),
}


class TransactionStateError(RuntimeError):
    """A transactional call in a state that does not allow it (Java: IllegalStateException)."""


class ProducerFencedError(KafkaError):
    """A newer producer with the same ``transactional.id`` exists: this one must close.

    Raised for PRODUCER_FENCED (90) and for INVALID_PRODUCER_EPOCH (47), which
    older brokers send for the same situation.
    """

    def __init__(self, code: int = PRODUCER_FENCED, message: str | None = None) -> None:
        # Always 90, whichever of the two codes the broker sent (KafkaError's pickling
        # passes (code, message) back in).
        super().__init__(PRODUCER_FENCED, message or "a newer producer fenced this one")


class TransactionAbortableError(KafkaError):
    """The current transaction failed and cannot commit; ``abort_transaction`` and retry."""


class Action(enum.Enum):
    """What to do with a coordinator's answer."""

    DONE = "done"
    RETRY = "retry"  # same coordinator, after retry.backoff.ms
    FIND_COORDINATOR = "find_coordinator"  # look the coordinator up again, then retry
    ABORTABLE = "abortable"
    FATAL = "fatal"


_FENCED: Final = frozenset({INVALID_PRODUCER_EPOCH, PRODUCER_FENCED})
_FATAL: Final = frozenset(
    {TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, CLUSTER_AUTHORIZATION_FAILED}
)
_ABORTABLE: Final = frozenset(
    {
        TRANSACTION_ABORTABLE,
        UNKNOWN_PRODUCER_ID,
        INVALID_PRODUCER_ID_MAPPING,
        GROUP_AUTHORIZATION_FAILED,
        FENCED_INSTANCE_ID,
        UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION,
        OPERATION_NOT_ATTEMPTED,
    }
)
_REFIND: Final = frozenset({NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE})


def classify(code: int) -> Action:
    """Kafka's handling of a transaction-API error code (the handlers in TransactionManager)."""
    if code == 0:
        return Action.DONE
    if code in _REFIND:
        return Action.FIND_COORDINATOR
    if code in _FENCED or code in _FATAL:
        return Action.FATAL
    if code in _ABORTABLE:
        return Action.ABORTABLE
    if code in (CONCURRENT_TRANSACTIONS, UNSTABLE_OFFSET_COMMIT) or code in RETRIABLE_CODES:
        return Action.RETRY
    return Action.ABORTABLE


def error_for(code: int, what: str) -> KafkaError:
    """The exception the application sees for ``code`` while doing ``what``."""
    if code in _FENCED:
        return ProducerFencedError(message=f"{what}: {KafkaError(code).name}")
    if classify(code) is Action.ABORTABLE:
        return TransactionAbortableError(code, what)
    return KafkaError(code, what)


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int = -1
    epoch: int = -1


class TransactionManager:
    """State of one ``transactional.id``: where the transaction stands, which partitions it has."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int = 60_000) -> None:
        if not transactional_id:
            raise ValueError("transactional.id must not be empty")
        if transaction_timeout_ms <= 0:
            raise ValueError("transaction.timeout.ms must be positive")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = TxnState.UNINITIALIZED
        self.producer = ProducerIdAndEpoch()
        self.last_error: KafkaError | None = None
        self._new: set[TopicPartition] = set()  # appended to, not yet asked for
        self._pending: set[TopicPartition] = set()  # AddPartitionsToTxn in flight
        self._added: set[TopicPartition] = set()  # part of the transaction on the coordinator
        self._offsets_added = False  # AddOffsetsToTxn succeeded (the txn has started)

    # -- transitions -------------------------------------------------------------

    def _transition(self, target: TxnState, error: KafkaError | None = None) -> None:
        if self.state is TxnState.FATAL_ERROR and target is not TxnState.FATAL_ERROR:
            raise self._fatal()
        allowed = _TRANSITIONS.get(target)
        if allowed is not None and self.state not in allowed:
            raise TransactionStateError(
                f"transactional.id {self.transactional_id!r}: cannot go from "
                f"{self.state.value} to {target.value}"
            )
        if error is not None:
            self.last_error = error
        self.state = target

    def _fatal(self) -> KafkaError:
        assert self.last_error is not None
        return self.last_error

    def _require(self, *states: TxnState, doing: str) -> None:
        if self.state is TxnState.FATAL_ERROR:
            raise self._fatal()
        if self.state is TxnState.ABORTABLE_ERROR and TxnState.ABORTABLE_ERROR not in states:
            assert self.last_error is not None
            raise TransactionAbortableError(
                self.last_error.code,
                f"cannot {doing}: the transaction failed ({self.last_error}); abort it",
            )
        if self.state not in states:
            raise TransactionStateError(
                f"cannot {doing} in state {self.state.value} "
                f"(transactional.id {self.transactional_id!r})"
            )

    def begin_init(self) -> None:
        """``init_transactions``: InitProducerId is about to be sent."""
        self._require(TxnState.UNINITIALIZED, doing="init_transactions")
        self._transition(TxnState.INITIALIZING)

    def init_done(self, producer_id: int, epoch: int) -> None:
        self._transition(TxnState.READY)
        self.producer = ProducerIdAndEpoch(producer_id, epoch)
        self._clear()

    def begin(self) -> None:
        """``begin_transaction``: purely local, as in Kafka (nothing is sent yet)."""
        self._require(TxnState.READY, doing="begin_transaction")
        self._transition(TxnState.IN_TRANSACTION)

    def begin_commit(self) -> None:
        self._require(TxnState.IN_TRANSACTION, doing="commit_transaction")
        self._transition(TxnState.COMMITTING)

    def begin_abort(self) -> None:
        self._require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, doing="abort_transaction")
        self._transition(TxnState.ABORTING)

    def end_done(self) -> None:
        """EndTxn succeeded (or was not needed): ready for the next transaction."""
        self._transition(TxnState.READY)
        self._clear()

    def hand_off(self) -> ProducerIdAndEpoch:
        """The open transaction leaves this producer's hands (another process will end it).

        Used by the exactly-once Spark sink: a task fills the transaction and
        the driver ends it with EndTxn on its behalf. The producer may not
        touch it any more, so it goes back to UNINITIALIZED; a new
        ``init_transactions`` (which fences this epoch) starts over.
        """
        self._require(TxnState.IN_TRANSACTION, doing="hand off the transaction")
        owner = self.producer
        self.state = TxnState.UNINITIALIZED  # hand-off is not one of Java's transitions
        self.producer = ProducerIdAndEpoch()
        self._clear()
        return owner

    def abortable_error(self, error: KafkaError) -> None:
        """The transaction cannot commit any more (a failed batch, a refused partition)."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING, TxnState.ABORTABLE_ERROR):
            self._transition(TxnState.ABORTABLE_ERROR, error)
        elif self.state is TxnState.INITIALIZING:
            # No transaction yet: init_transactions fails and may be called again.
            self._transition(TxnState.UNINITIALIZED, error)
        # While aborting, the error changes nothing: the transaction goes anyway.

    def batch_failed(self, error: KafkaError) -> None:
        """A batch of the transaction failed for good: fenced is fatal, the rest abortable."""
        if error.code in _FENCED:
            self.fatal_error(error_for(error.code, str(error)))
        elif self.state is not TxnState.FATAL_ERROR:
            self.abortable_error(error_for(error.code, str(error)))

    def fatal_error(self, error: KafkaError) -> None:
        self._transition(TxnState.FATAL_ERROR, error)

    def handle(self, code: int, what: str) -> Action:
        """Apply a coordinator's error code to the state; returns what the caller must do."""
        action = classify(code)
        if action is Action.FATAL:
            self.fatal_error(error_for(code, what))
        elif action is Action.ABORTABLE:
            self.abortable_error(error_for(code, what))
        return action

    def _clear(self) -> None:
        self._new.clear()
        self._pending.clear()
        self._added.clear()
        self._offsets_added = False

    # -- partitions ------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        return self.state is TxnState.IN_TRANSACTION

    @property
    def has_error(self) -> bool:
        return self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR)

    def check_can_append(self) -> None:
        """``send`` is allowed only inside a transaction (Kafka: 'Cannot call send...')."""
        self._require(TxnState.IN_TRANSACTION, doing="send outside a transaction")

    def maybe_add_partition(self, tp: TopicPartition) -> bool:
        """A record for ``tp`` was appended: it joins the transaction before it is sent.

        True when ``tp`` is new to the transaction (AddPartitionsToTxn is due).
        """
        if tp in self._added or tp in self._pending or tp in self._new:
            return False
        self._new.add(tp)
        return True

    def take_new_partitions(self) -> list[TopicPartition]:
        """Partitions to send in one AddPartitionsToTxn now (they become pending)."""
        if not self._new or self._pending:
            return []  # one request at a time; the rest go in the next one
        batch = sorted(self._new)
        self._pending.update(batch)
        self._new.clear()
        return batch

    def partitions_added(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._pending.discard(tp)
            self._added.add(tp)

    def partitions_not_added(self, tps: Iterable[TopicPartition]) -> None:
        """The request must be retried: the partitions go back to new."""
        for tp in tps:
            if tp in self._pending:
                self._pending.discard(tp)
                self._new.add(tp)

    def may_send(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may go on the wire now."""
        return tp in self._added

    @property
    def has_unadded_partitions(self) -> bool:
        return bool(self._new or self._pending)

    @property
    def started_on_coordinator(self) -> bool:
        """Whether the coordinator knows of this transaction (else EndTxn is not needed)."""
        return bool(self._added) or self._offsets_added

    def offsets_added(self) -> None:
        """AddOffsetsToTxn succeeded: the group's offsets partition is in the transaction."""
        self._offsets_added = True

    def check_can_send_offsets(self) -> None:
        self._require(TxnState.IN_TRANSACTION, doing="send_offsets_to_transaction")

    @property
    def added_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._added)
