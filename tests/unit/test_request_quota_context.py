"""The request-rate throttle a response reports (KIP-124), and who is exempt."""

from __future__ import annotations

from headwater.broker.connection import RequestContext
from headwater.broker.connection_security import ConnectionSecurity
from headwater.protocol.header import RequestHeader
from headwater.security.acl_store import InMemoryAclStore
from headwater.security.authorizer import AclAuthorizer
from headwater.security.quotas import ClientQuotaManager, InMemoryQuotaStore, QuotaKey, entity


def context(security: ConnectionSecurity, client_id: str = "busy") -> RequestContext:
    return RequestContext(RequestHeader(3, 9, 1, client_id), "10.0.0.1:5000", 1, security)


def quotas() -> ClientQuotaManager:
    manager = ClientQuotaManager(InMemoryQuotaStore(), window_ms=1000, samples=2)
    manager.alter([(entity(client_id="busy"), [(QuotaKey.REQUEST_PERCENTAGE.value, 1.0)])])
    return manager


def test_time_over_the_quota_shows_in_later_responses_and_mutes() -> None:
    security = ConnectionSecurity(quotas=quotas())
    ctx = context(security)
    assert ctx.request_throttle_ms() == 0
    # 1% of a thread is 10 ms per second; 50 ms of handler time is far over it.
    assert ctx.throttle(QuotaKey.REQUEST_PERCENTAGE, 50) > 0
    assert context(security).request_throttle_ms() > 0
    assert security.muted_until > 0
    # Another client id has no quota.
    assert context(ConnectionSecurity(quotas=security.quotas), "calm").request_throttle_ms() == 0


def test_follower_fetches_and_super_users_are_exempt() -> None:
    security = ConnectionSecurity(quotas=quotas())
    context(security).throttle(QuotaKey.REQUEST_PERCENTAGE, 50)
    follower = context(security)
    follower.request_quota_exempt = True
    assert follower.request_throttle_ms() == 0
    broker = ConnectionSecurity(
        quotas=security.quotas,
        authorizer=AclAuthorizer(InMemoryAclStore(), super_users=["User:ANONYMOUS"]),
    )
    assert context(broker).request_throttle_ms() == 0
