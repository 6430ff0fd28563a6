"""One transactional id's state and its legal transitions: Kafka's TransactionMetadata.

Sans-I/O. A change is made in two steps, as in Kafka, because it must be
durable in ``__transaction_state`` before anyone acts on it: ``prepare_*``
computes the next state as an immutable `TxnTransit` and marks the metadata
as having a transition in flight (``pending_state``); the service appends the
transit to the log, waits for the ISR, then calls `complete` (or
`abort_pending` when the write failed). Requests arriving while a transition
is in flight get CONCURRENT_TRANSACTIONS, so the in-memory state never runs
ahead of the log.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: An epoch this high cannot be bumped again (Kafka: Short.MaxValue - 1); the
#: coordinator then hands out a new producer id instead.
MAX_PRODUCER_EPOCH = 32766

TopicPartition = tuple[str, int]


class TxnState(enum.IntEnum):
    """The states, with the ids Kafka writes as TransactionStatus in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions/ListTransactions report (Kafka's ``state.name``)."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for state, text in _NAMES.items():
            if text.lower() == name.lower():
                return state
        return None


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

#: state -> the states it may be entered from (Kafka's validPreviousStates).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset(
        {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

#: States a transaction can be expired from (nothing is in flight).
EXPIRABLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


class IllegalTransition(RuntimeError):
    """A bug: a transition the state machine does not allow was attempted."""


class EpochExhausted(Exception):
    """The epoch cannot be bumped further; a new producer id is needed."""


class EpochMismatch(Exception):
    """An InitProducerId named an epoch that is neither current nor the previous one."""


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """A state to be written to the log; applied to the metadata once durable."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    update_ms: int


@dataclass(slots=True)
class TransactionMetadata:
    """What the coordinator knows of one transactional id."""

    transactional_id: str
    producer_id: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    #: The state being written to the log, if any (Kafka's pendingState).
    pending_state: TxnState | None = None
    #: An epoch fence whose write failed: the next fence reuses the bumped epoch.
    failed_epoch_fence: bool = False

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # ---------------------------------------------------------------- prepare

    def _transit(self, state: TxnState, **changes: object) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: {state.display_name} while "
                f"{self.pending_state.display_name} is being written"
            )
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: {self.state.display_name} -> {state.display_name}"
            )
        transit = replace(self._as_transit(state), **changes)  # type: ignore[arg-type]
        self.pending_state = state
        return transit

    def _as_transit(self, state: TxnState) -> TxnTransit:
        """What is known now, as a record of ``state``."""
        return TxnTransit(
            producer_id=self.producer_id,
            previous_producer_id=self.previous_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            state=state,
            partitions=frozenset(self.partitions),
            start_ms=self.start_ms,
            update_ms=self.update_ms,
        )

    def prepare_increment_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit:
        """InitProducerId on the same producer id: a new epoch fences the old one.

        A retry that names the previous epoch (its response was lost) gets the
        current epoch again instead of a second bump.
        """
        if self.epoch_exhausted:
            raise EpochExhausted(self.transactional_id)
        if (
            expected_epoch is None
            or expected_epoch == NO_PRODUCER_EPOCH
            or expected_epoch == self.producer_epoch
        ):
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        elif (
            self.last_producer_epoch != NO_PRODUCER_EPOCH
            and expected_epoch == self.last_producer_epoch
        ):
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            raise EpochMismatch(self.transactional_id)
        return self._transit(
            TxnState.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            update_ms=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """The epoch is exhausted: continue with a new producer id at epoch 0."""
        return self._transit(
            TxnState.EMPTY,
            producer_id=new_producer_id,
            previous_producer_id=self.producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            update_ms=now_ms,
        )

    def fenced_epoch(self) -> int:
        """The epoch an epoch fence aborts with: one more than the current, so the
        old producer is fenced (Kafka's PrepareEpochFence, which is never written
        as such: the PrepareAbort carrying this epoch is). An exhausted epoch
        cannot be bumped and a failed fence already bumped it: both reuse it."""
        if self.epoch_exhausted or self.failed_epoch_fence:
            return self.producer_epoch
        return self.producer_epoch + 1

    def prepare_add_partitions(self, partitions: set[TopicPartition], now_ms: int) -> TxnTransit:
        started = self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        return self._transit(
            TxnState.ONGOING,
            partitions=frozenset(self.partitions | partitions),
            start_ms=now_ms if started else self.start_ms,
            update_ms=now_ms,
        )

    def prepare_end(self, commit: bool, now_ms: int, epoch: int | None = None) -> TxnTransit:
        """PrepareCommit/PrepareAbort: the decision, durable before any marker is sent."""
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        changes: dict[str, object] = {"update_ms": now_ms}
        if epoch is not None:
            changes["producer_epoch"] = epoch
            changes["last_producer_epoch"] = NO_PRODUCER_EPOCH
        return self._transit(state, **changes)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """CompleteCommit/CompleteAbort once every partition has its marker."""
        if self.state is TxnState.PREPARE_COMMIT:
            state = TxnState.COMPLETE_COMMIT
        elif self.state is TxnState.PREPARE_ABORT:
            state = TxnState.COMPLETE_ABORT
        else:
            raise IllegalTransition(f"{self.transactional_id}: complete from {self.state.name}")
        return self._transit(state, partitions=frozenset(), update_ms=now_ms)

    def prepare_confirm(self) -> TxnTransit:
        """The current state once more, changing nothing: written only so that its
        replication proves this coordinator still leads its partition before a
        refusal is answered (see ``TransactionCoordinatorService._confirmed``).
        Replayed, it sets what the previous record set."""
        if self.pending_state is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: confirming while "
                f"{self.pending_state.display_name} is being written"
            )
        self.pending_state = self.state
        return self._as_transit(self.state)

    def prepare_dead(self) -> TxnTransit:
        """transactional.id.expiration.ms passed: a tombstone removes the id."""
        return self._transit(TxnState.DEAD, partitions=frozenset())

    # ---------------------------------------------------------------- complete

    def complete(self, transit: TxnTransit) -> None:
        """The transit is durable: it becomes the state."""
        if self.pending_state is not transit.state:
            raise IllegalTransition(
                f"{self.transactional_id}: completing {transit.state.display_name} but "
                f"{self.pending_state} is pending"
            )
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.start_ms = transit.start_ms
        self.update_ms = transit.update_ms
        self.pending_state = None
        if transit.state is not TxnState.PREPARE_EPOCH_FENCE:
            self.failed_epoch_fence = False

    def abort_pending(self) -> None:
        """The write failed: nothing changes (the client retries)."""
        self.pending_state = None

    @classmethod
    def from_transit(cls, transactional_id: str, transit: TxnTransit) -> TransactionMetadata:
        """Metadata as loaded from the log."""
        return cls(
            transactional_id=transactional_id,
            producer_id=transit.producer_id,
            timeout_ms=transit.timeout_ms,
            state=transit.state,
            producer_epoch=transit.producer_epoch,
            last_producer_epoch=transit.last_producer_epoch,
            previous_producer_id=transit.previous_producer_id,
            partitions=set(transit.partitions),
            start_ms=transit.start_ms,
            update_ms=transit.update_ms,
        )
