"""How a follower reaches its leader: Kafka's ``LeaderEndPoint``, over the inter-broker connection.

The follower's fetch state decides what to ask; this sends it. A protocol,
so the replica fetcher's loop runs the same against a real leader
(:class:`RemoteLeaderEndpoint`) or against a leader's fetch planner in a
unit test. Truncation happens on fetch (Fetch v12 diverging epochs), so a
Fetch is the only request a follower needs to send.
"""

from __future__ import annotations

from typing import Protocol

from headwater.client.connection import BrokerConnection
from headwater.cluster.follower_fetch_state import FOLLOWER_FETCH_VERSION
from headwater.cluster.inter_broker import InterBrokerConnector
from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_types import FetchRequestData, FetchResponseData


class LeaderEndpoint(Protocol):
    """The leader of a set of partitions, as a follower's fetcher talks to it."""

    async def fetch_version(self) -> int:
        """The Fetch version both ends speak (connecting if need be)."""
        ...

    async def fetch(self, request: FetchRequestData) -> FetchResponseData:
        """Send ``request``; the response's records are views into its frame."""
        ...

    def close(self, reason: str) -> None:
        """Drop the connection (after a failure, or on stop); the next call reconnects."""
        ...


class RemoteLeaderEndpoint:
    """A leader on another broker, over one connection opened by the inter-broker connector."""

    def __init__(self, connector: InterBrokerConnector, leader_id: int) -> None:
        self.connector = connector
        self.leader_id = leader_id
        self._conn: BrokerConnection | None = None

    async def _connection(self) -> BrokerConnection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        self._conn = await self.connector.open(self.leader_id, "replica")
        return self._conn

    async def fetch_version(self) -> int:
        conn = await self._connection()
        return conn.version(ApiKey.FETCH, FOLLOWER_FETCH_VERSION)

    async def fetch(self, request: FetchRequestData) -> FetchResponseData:
        conn = await self._connection()
        # Records as views into the response frame: the follower writes the
        # leader's bytes as they came, with no copy on the way.
        return await conn.fetch(request, record_views=True)

    def close(self, reason: str) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close(reason)
