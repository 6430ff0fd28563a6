"""KIP-227's session ids and epochs, shared by the broker and the client.

Kafka keeps these in one class (``FetchMetadata``) that both sides use; so
does Headwater, so the two ends of a fetch session can never disagree on
what an epoch means or what follows it.
"""

from __future__ import annotations

from typing import Final

INVALID_SESSION_ID: Final = 0
"""A request or response session id meaning "no session"."""
INITIAL_EPOCH: Final = 0
"""Request epoch of a full fetch that asks for a new session."""
FINAL_EPOCH: Final = -1
"""Request epoch of a full fetch that wants no session (every request before v7),
or that closes the session it names."""
MAX_EPOCH: Final = 0x7FFFFFFF
"""The largest epoch; the one after it is 1 (epochs of a live session are positive)."""
FIRST_SESSION_VERSION: Final = 7
"""Fetch v7 introduced sessions."""
FIRST_TOPIC_ID_VERSION: Final = 13
"""Fetch v13 names topics by id."""


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: +1, wrapping from 2^31-1 to 1; a final epoch stays final."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch >= MAX_EPOCH:
        return 1
    return epoch + 1
