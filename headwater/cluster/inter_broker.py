"""Connections from this broker to a peer broker, made in one place.

Replica fetchers and the transaction coordinator's marker sender both talk to
other brokers. Which of the peer's listeners to use and which credentials to
present (``inter.broker.listener.name``, the broker principal) are the same
decision for both, so it lives here rather than in each caller.
"""

from __future__ import annotations

from collections.abc import Callable

from headwater.client.connection import BrokerConnection
from headwater.client.errors import KafkaConnectionError
from headwater.security.client_security import ClientSecurity

#: (broker id, listener name or None for its default address) -> (host, port), or None
#: when the broker (or its listener of that name) is unknown.
AddressOf = Callable[[int, "str | None"], "tuple[str, int] | None"]


class InterBrokerConnector:
    """Opens authenticated connections to peer brokers by broker id.

    ``listener`` is ``inter.broker.listener.name``: peers are dialled at their
    registered endpoint of that name, with ``security`` (TLS and the broker's
    SASL credentials; see ``headwater.security.inter_broker``).
    """

    def __init__(
        self,
        local_id: int,
        address_of: AddressOf,
        security: ClientSecurity | None = None,
        listener: str | None = None,
    ) -> None:
        self.local_id = local_id
        self.address_of = address_of
        self.security = security
        self.listener = listener

    def use(self, listener: str | None, security: ClientSecurity | None) -> None:
        """Set the inter-broker listener and credentials: at start, and when the
        listener's keystore changes (connections opened after it use them)."""
        self.listener = listener
        self.security = security

    async def open(
        self, broker_id: int, purpose: str, *, request_timeout_ms: int = 30_000
    ) -> BrokerConnection:
        """Connect to ``broker_id``; raises ``KafkaConnectionError`` when its address is unknown.

        ``purpose`` names the connection in the peer's logs (client id
        ``<purpose>-<local id>``), so an operator can tell fetchers from
        marker senders.
        """
        address = self.address_of(broker_id, self.listener)
        if address is None:
            where = f" on listener {self.listener}" if self.listener else ""
            raise KafkaConnectionError(f"broker {broker_id} has no known address{where}")
        return await BrokerConnection.open(
            address[0],
            address[1],
            client_id=f"{purpose}-{self.local_id}",
            node_id=broker_id,
            request_timeout_ms=request_timeout_ms,
            security=self.security,
        )
