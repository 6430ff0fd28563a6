"""What a connection knows about who is on the other end.

The connection layer carries this object and nothing else of security: the
listener it was accepted on, the principal (from the TLS certificate or the
SASL exchange) and, on SASL listeners, the SASL conversation. Handlers of
SaslHandshake/SaslAuthenticate update it; every request's context takes the
principal from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.security.authorizer import AllowAllAuthorizer, Authorizer
from headwater.security.listeners import Listener, SecurityProtocol
from headwater.security.principal import ANONYMOUS, KafkaPrincipal
from headwater.security.quotas import ClientQuotaManager
from headwater.security.sasl import SaslServerSession

PLAINTEXT_LISTENER = Listener("PLAINTEXT", SecurityProtocol.PLAINTEXT, "0.0.0.0", 0)


@dataclass
class ConnectionSecurity:
    listener: Listener = PLAINTEXT_LISTENER
    principal: KafkaPrincipal = ANONYMOUS
    sasl: SaslServerSession | None = None
    #: The broker's one authorizer (allow-all when ACLs are off), so handlers
    #: authorize through the request context without being wired to it.
    authorizer: Authorizer = field(default_factory=AllowAllAuthorizer)
    #: Set by a handler whose response must be the connection's last (failed SASL).
    close_after_response: bool = False
    #: The broker's client quotas (None: no quotas configured at start).
    quotas: ClientQuotaManager | None = None
    #: KIP-219: a throttled client's next request is not read before this
    #: (``time.monotonic()`` seconds).
    muted_until: float = 0.0

    @property
    def quota_exempt(self) -> bool:
        """Super users (the brokers' own principal among them) are not throttled."""
        return str(self.principal) in getattr(self.authorizer, "super_users", ())
