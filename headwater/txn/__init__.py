"""Transactions (KIP-98): the coordinator, its log, and the markers it writes."""

TRANSACTION_STATE_TOPIC = "__transaction_state"
