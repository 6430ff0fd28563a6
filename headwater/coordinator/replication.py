"""Waiting for the coordinator's writes to be replicated, and what a failed wait means.

A coordinator may only answer a commit or a new assignment once the record is
on every in-sync replica of its ``__consumer_offsets`` partition: otherwise a
coordinator failover could forget an acknowledged commit. The coordinator is
sans-I/O, so it asks a `Replicated` hook for a `Pending[ErrorCode]` per write
(the asyncio service completes it when the broker's ``wait_replicated``
resolves; a single broker completes it at once) and answers from its callback.

The error a client sees is the coordinator's, not the log's: Kafka's mapping
(``CoordinatorOperationExceptionHelper`` and ``GroupMetadataManager``) tells a
client to find the new coordinator (NOT_COORDINATOR) or to retry
(COORDINATOR_NOT_AVAILABLE) instead of surfacing produce errors it cannot act on.
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending

# The next offset after a write -> its replication outcome (ErrorCode.none = replicated).
Replicated = Callable[[int], Pending[ErrorCode]]

_RETRIABLE_HERE = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    }
)
_MOVED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error})
_TOO_LARGE = frozenset(
    {ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size}
)


def replicated_at_once(offset: int) -> Pending[ErrorCode]:
    """A single broker's writes are durable when the append returns."""
    return Pending.completed(ErrorCode.none)


def coordinator_error(error: ErrorCode, *, commit: bool = False) -> ErrorCode:
    """The error a group API answers for a failed write of its record.

    Oversized records are the client's fault for a commit (its metadata) and
    the broker's otherwise, as in Kafka.
    """
    if error in _RETRIABLE_HERE:
        return ErrorCode.coordinator_not_available
    if error in _MOVED:
        return ErrorCode.not_coordinator
    if error in _TOO_LARGE:
        return ErrorCode.invalid_commit_offset_size if commit else ErrorCode.unknown_server_error
    return error
