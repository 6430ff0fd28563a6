"""SASL (SaslHandshake, SaslAuthenticate), the ACL APIs and the SCRAM credential APIs.

Also the authentication gate every request passes on a SASL listener:
until the SASL exchange succeeds only ApiVersions, SaslHandshake and
SaslAuthenticate may pass; anything else closes the connection, as Kafka
does. Past ``connections.max.reauth.ms`` (KIP-368) only re-authentication
may pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.connection import CloseConnection, RequestContext
from headwater.protocol.error_codes import ErrorCode
from headwater.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from headwater.security.auth_failures import FailedAuthenticationDelay
from headwater.security.authorizer import AclAuthorizer, Authorizer
from headwater.security.config import SecurityConfig
from headwater.security.credentials import CredentialStore
from headwater.security.quotas import (
    ClientQuotaManager,
    Entity,
    validate_entity,
    validate_ops,
)
from headwater.security.sasl import SaslServerSession
from headwater.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanisms,
)

log = logging.getLogger(__name__)

SASL_APIS = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate
BEFORE_AUTHENTICATION = SASL_APIS | {18}  # and ApiVersions


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class SecurityApis:
    def __init__(
        self,
        config: SecurityConfig,
        credentials: CredentialStore,
        authorizer: Authorizer,
        quotas: ClientQuotaManager | None = None,
    ) -> None:
        self.config = config
        self.credentials = credentials
        self.authorizer = authorizer
        self.quotas = quotas
        self.failures = FailedAuthenticationDelay(config.failed_authentication_delay_ms)

    # -- the gate ----------------------------------------------------------------

    def new_sasl_session(self, mechanisms: tuple[str, ...] | None = None) -> SaslServerSession:
        """``mechanisms``: the listener's ``sasl.enabled.mechanisms`` (default: the broker's)."""
        return SaslServerSession(
            list(mechanisms or self.config.sasl_enabled_mechanisms),
            self.credentials.get,
            max_reauth_ms=self.config.connections_max_reauth_ms,
            max_token_bytes=self.config.sasl_max_token_bytes,
        )

    @staticmethod
    def gate(ctx: RequestContext) -> None:
        """Raise ``CloseConnection`` for a request the connection may not make yet."""
        sasl = ctx.security.sasl
        if sasl is None:
            return
        api_key = ctx.header.api_key
        if not sasl.authenticated:
            if api_key not in BEFORE_AUTHENTICATION:
                raise CloseConnection(
                    f"API key {api_key} before SASL authentication on {ctx.listener.name}"
                )
        elif api_key not in SASL_APIS and sasl.expired(_now_ms()):
            raise CloseConnection(
                f"SASL session of {sasl.principal} expired (connections.max.reauth.ms)"
            )

    # -- SASL --------------------------------------------------------------------

    def sasl_handshake(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        sasl = ctx.security.sasl
        if sasl is None:
            return {"error_code": int(E.illegal_sasl_state), "mechanisms": []}
        if ctx.header.api_version == 0:
            # v0 would be followed by unframed tokens (pre-KIP-152 clients).
            ctx.security.close_after_response = True
            return {"error_code": int(E.illegal_sasl_state), "mechanisms": []}
        result = sasl.handshake(str(req.mechanism))
        if result.close:
            ctx.security.close_after_response = True
            log.info(
                "SASL handshake from %s refused (mechanism %r, error %d)",
                ctx.client_host, req.mechanism, result.error_code,
            )  # fmt: skip
        return {"error_code": result.error_code, "mechanisms": result.mechanisms}

    def sasl_authenticate(
        self, ctx: RequestContext, req: Any
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        sasl = ctx.security.sasl
        if sasl is None:
            return {
                "error_code": int(E.illegal_sasl_state),
                "error_message": f"listener {ctx.listener.name} does not use SASL",
                "auth_bytes": b"",
            }
        result = sasl.authenticate(bytes(req.auth_bytes), _now_ms())
        answer = {
            "error_code": result.error_code,
            "error_message": result.error_message,
            "auth_bytes": result.token,
            "session_lifetime": result.session_lifetime_ms,
        }
        if result.close:
            ctx.security.close_after_response = True
        if result.error_code == ErrorCode.sasl_authentication_failed:
            delay_ms = self.failures.failure(ctx.host, _now_ms())
            log.info(
                "SASL authentication failed from %s (%s); closing after %d ms",
                ctx.client_host, result.error_message, delay_ms,
            )  # fmt: skip
            return _after(delay_ms, answer)
        if sasl.authenticated and result.error_code == 0 and sasl.principal is not None:
            if ctx.security.principal != sasl.principal:
                log.info(
                    "%s authenticated with %s on %s from %s",
                    sasl.principal, sasl.mechanism_name, ctx.listener.name, ctx.client_host,
                )  # fmt: skip
            ctx.security.principal = sasl.principal
            self.failures.success(ctx.host)
        return answer

    # -- ACL APIs -------------------------------------------------------------------

    def _cluster(self, ctx: RequestContext, op: AclOperation) -> bool:
        return self.authorizer.authorize(
            ctx.principal, ctx.host, op, ResourceType.CLUSTER, CLUSTER_NAME
        )

    def _acl_authorizer(self) -> AclAuthorizer | None:
        return self.authorizer if isinstance(self.authorizer, AclAuthorizer) else None

    def describe_acls(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        acls = self._acl_authorizer()
        if acls is None:
            return _error(E.security_disabled, "no authorizer is configured")
        if not self._cluster(ctx, AclOperation.DESCRIBE):
            return _error(E.cluster_authorization_failed, None)
        try:
            acl_filter = _filter(req)
        except ValueError as exc:
            return _error(E.invalid_request, str(exc))
        grouped: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
        for b in acls.acls(acl_filter):
            grouped[b.pattern].append(b.entry)
        return {
            "error_code": 0,
            "resources": [
                {
                    "resource_type": int(p.resource_type),
                    "resource_name": p.name,
                    "pattern_type": int(p.pattern_type),
                    "acls": [
                        {
                            "principal": e.principal,
                            "host": e.host,
                            "operation": int(e.operation),
                            "permission_type": int(e.permission),
                        }
                        for e in entries
                    ],
                }
                for p, entries in grouped.items()
            ],
        }

    def create_acls(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        acls = self._acl_authorizer()
        n = len(req.creations)
        if acls is None or not self._cluster(ctx, AclOperation.ALTER):
            code = E.security_disabled if acls is None else E.cluster_authorization_failed
            return {"results": [{"error_code": int(code)}] * n}
        results: list[dict[str, Any]] = []
        valid: list[AclBinding] = []
        for c in req.creations:
            try:
                valid.append(
                    AclBinding(
                        ResourcePattern(
                            ResourceType(c.resource_type),
                            c.resource_name,
                            PatternType(getattr(c, "resource_pattern_type", PatternType.LITERAL)),
                        ),
                        AccessControlEntry(
                            c.principal,
                            c.host,
                            AclOperation(c.operation),
                            AclPermissionType(c.permission_type),
                        ),
                    )
                )
                results.append({"error_code": 0, "error_message": None})
            except ValueError as exc:
                results.append({"error_code": int(E.invalid_request), "error_message": str(exc)})
        acls.create_acls(valid)
        for b in valid:
            log.info("%s added ACL: %s", ctx.principal, b)
        return {"results": results}

    def delete_acls(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        acls = self._acl_authorizer()
        n = len(req.filters)
        if acls is None or not self._cluster(ctx, AclOperation.ALTER):
            code = E.security_disabled if acls is None else E.cluster_authorization_failed
            return {"filter_results": [{"error_code": int(code)}] * n}
        parsed: list[AclBindingFilter | str] = []
        for f in req.filters:
            try:
                parsed.append(_filter(f))
            except ValueError as exc:
                parsed.append(str(exc))
        removed = acls.delete_acls([f for f in parsed if isinstance(f, AclBindingFilter)])
        out: list[dict[str, Any]] = []
        it = iter(removed)
        for f in parsed:
            if isinstance(f, str):
                out.append({"error_code": int(E.invalid_request), "error_message": f})
                continue
            matched = next(it)
            for b in matched:
                log.info("%s removed ACL: %s", ctx.principal, b)
            out.append(
                {
                    "error_code": 0,
                    "matching_acls": [
                        {
                            "error_code": 0,
                            "resource_type": int(b.pattern.resource_type),
                            "resource_name": b.pattern.name,
                            "pattern_type": int(b.pattern.pattern_type),
                            "principal": b.entry.principal,
                            "host": b.entry.host,
                            "operation": int(b.entry.operation),
                            "permission_type": int(b.entry.permission),
                        }
                        for b in matched
                    ],
                }
            )
        return {"filter_results": out}

    # -- SCRAM credentials (KIP-554) ----------------------------------------------------

    def describe_user_scram_credentials(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        if not self._cluster(ctx, AclOperation.DESCRIBE):
            return _error(E.cluster_authorization_failed, None)
        known = self.credentials.describe()
        wanted = [u.name for u in req.users] if req.users else sorted(known)
        seen: set[str] = set()
        results = []
        for name in wanted:
            if name in seen:
                continue
            seen.add(name)
            dup = wanted.count(name) > 1
            creds = known.get(name)
            if dup or not creds:
                code = E.duplicate_resource if dup else E.resource_not_found
                message = (
                    "cannot describe the same user twice in one request"
                    if dup
                    else "attempt to describe a user credential that does not exist"
                )
                results.append({"user": name, "error_code": int(code), "error_message": message})
                continue
            infos = []
            for mech_name, iterations in creds.items():
                mech = ScramMechanisms.by_name(mech_name)
                assert mech is not None
                infos.append({"mechanism": mech.kafka_type, "iterations": iterations})
            results.append({"user": name, "error_code": 0, "credential_infos": infos})
        return {"error_code": 0, "results": results}

    def alter_user_scram_credentials(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        users = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
        if not self._cluster(ctx, AclOperation.ALTER):
            return {
                "results": [
                    {"user": u, "error_code": int(E.cluster_authorization_failed)}
                    for u in dict.fromkeys(users)
                ]
            }
        errors: dict[str, tuple[E, str]] = {}
        counts: dict[tuple[str, int], int] = defaultdict(int)
        for item in (*req.deletions, *req.upsertions):
            counts[(item.name, item.mechanism)] += 1
        for (name, _mech), count in counts.items():
            if count > 1:
                errors.setdefault(
                    name, (E.duplicate_resource, "a user and mechanism may appear only once")
                )
        for d in req.deletions:
            mech = ScramMechanisms.by_kafka_type(d.mechanism)
            if not d.name:
                errors.setdefault(d.name, (E.unacceptable_credential, "empty user name"))
            elif mech is None:
                errors.setdefault(d.name, (E.unsupported_sasl_mechanism, "unknown mechanism"))
            elif self.credentials.get(d.name, mech) is None:
                errors.setdefault(
                    d.name,
                    (E.resource_not_found, "attempt to delete a credential that does not exist"),
                )
        for u in req.upsertions:
            mech = ScramMechanisms.by_kafka_type(u.mechanism)
            if not u.name:
                errors.setdefault(u.name, (E.unacceptable_credential, "empty user name"))
            elif mech is None:
                errors.setdefault(u.name, (E.unsupported_sasl_mechanism, "unknown mechanism"))
            elif not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
                errors.setdefault(
                    u.name,
                    (
                        E.unacceptable_credential,
                        f"iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}",
                    ),
                )
            elif not u.salt or len(u.salted_password) != mech.digest_size:
                errors.setdefault(u.name, (E.unacceptable_credential, "bad salt or password"))
        for d in req.deletions:
            mech = ScramMechanisms.by_kafka_type(d.mechanism)
            if d.name not in errors and mech is not None:
                self.credentials.delete(d.name, mech)
                log.info(
                    "%s deleted %s credential of %s", ctx.principal, mech.mechanism_name, d.name
                )
        for u in req.upsertions:
            mech = ScramMechanisms.by_kafka_type(u.mechanism)
            if u.name not in errors and mech is not None:
                cred = ScramCredential.from_salted_password(
                    mech, bytes(u.salt), bytes(u.salted_password), u.iterations
                )
                self.credentials.upsert(u.name, mech, cred)
                log.info("%s set %s credential of %s", ctx.principal, mech.mechanism_name, u.name)
        results = []
        for name in dict.fromkeys(users):
            code, message = errors.get(name, (E.none, None))
            results.append({"user": name, "error_code": int(code), "error_message": message})
        return {"results": results}

    # -- client quotas (KIP-546) --------------------------------------------------------

    def describe_client_quotas(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        if not self._cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
            return _error(E.cluster_authorization_failed, None)
        assert self.quotas is not None
        components = [(c.entity_type, int(c.match_type), c.match) for c in req.components]
        for etype, match_type, _ in components:
            if match_type not in (0, 1, 2) or etype not in ("user", "client-id"):
                return _error(E.invalid_request, f"unsupported filter on {etype!r}")
        found = self.quotas.describe(components, bool(req.strict))
        return {
            "error_code": 0,
            "entries": [
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in ent],
                    "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
                }
                for ent, values in found
            ],
        }

    def alter_client_quotas(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        assert self.quotas is not None
        allowed = self._cluster(ctx, AclOperation.ALTER_CONFIGS)
        results: list[dict[str, Any]] = []
        changes: list[tuple[Entity, list[tuple[str, float | None]]]] = []
        for entry in req.entries:
            parts = [(e.entity_type, e.entity_name) for e in entry.entity]
            result: dict[str, Any] = {
                "error_code": 0,
                "error_message": None,
                "entity": [{"entity_type": t, "entity_name": n} for t, n in parts],
            }
            results.append(result)
            if not allowed:
                result["error_code"] = int(E.cluster_authorization_failed)
                continue
            ops: list[tuple[str, float | None]] = [
                (op.key, None if op.remove else float(op.value)) for op in entry.ops
            ]
            try:
                ent = validate_entity(parts)
                validate_ops(ops)
            except ValueError as exc:
                result.update(error_code=int(E.invalid_request), error_message=str(exc))
                continue
            changes.append((ent, ops))
        if changes and not req.validate_only:
            self.quotas.alter(changes)
            for ent, ops in changes:
                log.info("%s set quotas %s on %s", ctx.principal, ops, ent)
        return {"entries": results}


async def _after(delay_ms: int, answer: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(delay_ms / 1000)
    return answer


def _error(code: E, message: str | None) -> dict[str, Any]:
    return {"error_code": int(code), "error_message": message}


def _filter(f: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter; ValueError for unknown codes."""
    try:
        out = AclBindingFilter(
            resource_type=ResourceType(f.resource_type_filter),
            name=f.resource_name_filter,
            pattern_type=PatternType(getattr(f, "pattern_type_filter", PatternType.LITERAL)),
            principal=f.principal_filter,
            host=f.host_filter,
            operation=AclOperation(f.operation),
            permission=AclPermissionType(f.permission_type),
        )
    except ValueError as exc:
        raise ValueError(f"invalid ACL filter: {exc}") from None
    out.validate()
    return out
