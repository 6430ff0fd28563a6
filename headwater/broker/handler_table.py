"""The broker's table of API handlers and the adapters that fit handlers into it.

A raw handler takes the request frame and answers bytes (the hot paths encode
by hand); a kio handler takes a decoded kio request entity and answers a dict
shaped like the response schema, which ``build_response`` fits to the
requested version, so one handler serves every version.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from headwater.broker.connection import RequestContext, Response
from headwater.gc_policy import COLLECTOR
from headwater.protocol.apis import SUPPORTED, ApiKey
from headwater.protocol.header import api_versions_error_body
from headwater.protocol.messages import build_response, decode_request, encode_response
from headwater.protocol.messages import preload as preload_schemas

log = logging.getLogger(__name__)

RawHandler = Callable[[RequestContext, memoryview, int], "Response | Awaitable[Response]"]
KioHandler = Callable[[RequestContext, Any], "dict[str, Any] | Awaitable[dict[str, Any]]"]


@dataclass(frozen=True, slots=True)
class ApiEntry:
    min_version: int
    max_version: int
    call: RawHandler


def with_request_throttle(ctx: RequestContext, out: dict[str, Any]) -> dict[str, Any]:
    """KIP-124: the request-rate throttle in the response's throttle field (kio names it
    ``throttle_time_ms`` or ``throttle_time``; a response without one drops both keys)."""
    ms = ctx.request_throttle_ms()
    if not ms:
        return out
    out = dict(out)
    for key in ("throttle_time_ms", "throttle_time"):
        existing = out.get(key)
        out[key] = max(ms, existing if isinstance(existing, int) else 0)
    return out


def kio(api_key: int, fn: KioHandler) -> RawHandler:
    """Adapt a dict-returning handler of kio request entities to the raw interface."""

    def call(ctx: RequestContext, frame: memoryview, offset: int) -> Response | Awaitable[Response]:
        version = ctx.header.api_version
        req = decode_request(api_key, version, frame, offset)
        out = fn(ctx, req)
        if inspect.isawaitable(out):
            pending = out

            async def finish() -> bytes:
                answer = with_request_throttle(ctx, await pending)
                return encode_response(build_response(api_key, version, answer))

            return finish()
        return encode_response(build_response(api_key, version, with_request_throttle(ctx, out)))

    return call


def inline(fn: KioHandler) -> KioHandler:
    return fn


def on_worker_thread(fn: KioHandler) -> KioHandler:
    """Run a handler that blocks on ZooKeeper off the event loop."""

    def call(ctx: RequestContext, req: Any) -> Awaitable[dict[str, Any]]:
        return asyncio.get_running_loop().run_in_executor(None, fn, ctx, req)  # type: ignore[arg-type]

    return call


def kio_request(api_key: int, fn: Callable[[RequestContext, Any], bytes]) -> RawHandler:
    """Decode the request with kio but let ``fn`` encode the response itself."""

    def call(ctx: RequestContext, frame: memoryview, offset: int) -> bytes:
        return fn(ctx, decode_request(api_key, ctx.header.api_version, frame, offset))

    return call


class HandlerTable:
    """API key -> handler, with the versions served: what ApiVersions advertises."""

    def __init__(self) -> None:
        self.handlers: dict[int, ApiEntry] = {}
        #: (API key, version) pairs served through kio schemas, preloaded at start.
        self._kio_schemas: set[tuple[int, int]] = set()

    def register(
        self, api_key: int, call: RawHandler, versions: tuple[int, int] | None = None
    ) -> None:
        lo, hi = versions or SUPPORTED[ApiKey(api_key)]
        self.handlers[api_key] = ApiEntry(lo, hi, call)

    def register_kio(
        self, api_key: int, fn: KioHandler, versions: tuple[int, int] | None = None
    ) -> None:
        self.register(api_key, kio(api_key, fn), versions)
        lo, hi = versions or SUPPORTED[ApiKey(api_key)]
        self._kio_schemas.update((api_key, v) for v in range(lo, hi + 1))

    def _preload_schemas(self) -> None:
        """Load every kio schema the broker serves, on a thread (see ``messages.preload``)."""
        pairs = sorted(self._kio_schemas)

        def load() -> None:
            try:
                preload_schemas(pairs)
            except Exception:
                log.exception("cannot preload the protocol schemas; they load on first use")
                return
            COLLECTOR.freeze()  # schemas live as long as the process

        threading.Thread(target=load, name="schema-preload", daemon=True).start()

    def advertised_versions(self) -> dict[int, tuple[int, int]]:
        """Only what is implemented: clients switch features on what they see here."""
        return {k: (e.min_version, e.max_version) for k, e in sorted(self.handlers.items())}

    def _api_versions(self, ctx: RequestContext, frame: memoryview, offset: int) -> bytes:
        version = ctx.header.api_version
        entry = self.handlers[ApiKey.API_VERSIONS]
        table = self.advertised_versions()
        if not entry.min_version <= version <= entry.max_version:
            # Error 35 with a v0 body; the client retries with a version we list.
            return api_versions_error_body(table)  # type: ignore[arg-type]
        data = {
            "error_code": 0,
            "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in table.items()
            ],
        }
        return encode_response(build_response(ApiKey.API_VERSIONS, version, data))
