"""A Fetch request's parameters, decoded once: who fetches, at what isolation,
within what limits (Kafka's ``FetchParams``).

Why: whether the fetcher is a consumer or a follower decides the isolation
(the high watermark or the last stable offset, against the log end), the
authorization, the quota and what the leader learns from the fetch. Deciding
it once, here, keeps those branches out of the request handler.
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.fetch.planner import isolation_for
from headwater.log.isolation import Isolation
from headwater.protocol.fetch_types import FetchRequestData


@dataclass(frozen=True, slots=True)
class FetchParams:
    version: int
    #: The fetching broker's id, or -1 for a consumer.
    replica_id: int
    isolation: Isolation
    max_wait_ms: int
    min_bytes: int
    #: The request's limit, capped by the broker's ``fetch.max.bytes``.
    max_bytes: int

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def wants_aborted_transactions(self) -> bool:
        """read_committed consumers get the aborted transactions with their data."""
        return self.isolation is Isolation.TXN_COMMITTED

    @classmethod
    def of(cls, req: FetchRequestData, broker_max_bytes: int) -> FetchParams:
        requested = req.max_bytes if req.max_bytes > 0 else broker_max_bytes
        return cls(
            version=req.version,
            replica_id=req.replica_id,
            isolation=isolation_for(req.replica_id, req.isolation_level),
            max_wait_ms=req.max_wait_ms,
            min_bytes=req.min_bytes,
            max_bytes=min(requested, broker_max_bytes),
        )
