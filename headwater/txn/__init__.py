"""Transactions (KIP-98): the coordinator's state and the markers it writes.

A transactional producer's batches are bracketed, in every partition it
wrote, by a COMMIT or ABORT control batch (a *marker*) that the transaction
coordinator asks the partition leaders to append. ``markers`` is the broker
side of that (WriteTxnMarkers); the coordinator lives beside it and keeps
its state in the compacted ``__transaction_state`` topic.
"""

TRANSACTION_STATE_TOPIC = "__transaction_state"
