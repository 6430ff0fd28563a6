"""The console's web application: Starlette routes, Jinja2 pages, htmx fragments.

Every page is a full HTML page for a person (or a screenshot) and, where it
changes on its own (overview, a topic, a group, operations, metrics), it
holds a *live fragment* that htmx re-fetches every few seconds and swaps
in place: no reload, no hand-written client state. The only hand-written
JavaScript is ``static/console.js``: it draws the uPlot charts from the
JSON each fragment carries (uPlot has no declarative mode htmx could
drive) and adds the CSRF header to htmx's requests.

Three things hold for every route, in ``_guard``: a login when a user file
is configured; the session's CSRF token on every POST; and in read-only
mode no write at all (the forms are not rendered and a POST is refused
with 403 even if sent by hand).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode

from itsdangerous import BadSignature, URLSafeSerializer
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from headwater import __version__
from headwater.client.errors import KafkaError
from headwater.client.types import TopicPartition
from headwater.console.auth import Session, SessionCodec, authenticate, csrf_ok
from headwater.console.formatting import (
    human_bytes,
    human_ms,
    human_rate,
    paginate,
    parse_configs,
    parse_format,
    parse_headers,
    parse_int,
    parse_timestamp,
    render_bytes,
    retention_text,
    timestamp_text,
)
from headwater.console.gateway import (
    AclRow,
    ClusterGateway,
    Denied,
    Unreachable,
)
from headwater.console.offsets import STRATEGIES, ResetRow, parse_strategy
from headwater.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType

HERE: Final = Path(__file__).parent
SESSION_COOKIE: Final = "hw_console"
FLASH_COOKIE: Final = "hw_flash"
TOPICS_PER_PAGE: Final = 50
PARTITIONS_PER_PAGE: Final = 100
GROUPS_PER_PAGE: Final = 25
#: How often live fragments poll, in seconds (htmx ``every Ns``).
LIVE_EVERY_S: Final = 3
CONFIG_SOURCES: Final = {
    0: "unknown",
    1: "topic override",
    2: "dynamic broker",
    3: "dynamic cluster default",
    4: "static broker",
    5: "default",
    6: "dynamic broker logger",
}


@dataclass(frozen=True, slots=True)
class ConsoleOptions:
    """How this console runs: who may log in and whether it may write."""

    read_only: bool = False
    users: Mapping[str, str] | None = None  # name -> hash; None: no login (loopback only)
    secret: str | None = None  # session signing key; None: a fresh one per start


@dataclass
class Ctx:
    """One request's view: its session and what the templates always need."""

    request: Request
    session: Session
    new_session: bool
    flash: tuple[str, str] | None = None  # (kind, text)


Handler = Callable[[Ctx], Awaitable[Response]]


class ConsoleApp:
    """Builds the Starlette app around one ``ClusterGateway``."""

    def __init__(self, gateway: ClusterGateway, options: ConsoleOptions | None = None) -> None:
        self.gateway = gateway
        self.options = options or ConsoleOptions()
        self.sessions = SessionCodec(self.options.secret)
        self._flash_signer = URLSafeSerializer(
            self.options.secret or self.sessions.dumps(self.sessions.new(None)), salt="flash"
        )
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            bytes=human_bytes,
            ms=human_ms,
            rate=human_rate,
            ts=timestamp_text,
            retention=retention_text,
            q=lambda v: quote(str(v), safe=""),
            # JSON inside <script>: "</" must not end the script element early.
            script_json=lambda v: json.dumps(v).replace("</", "<\\/"),
        )
        self.env.globals.update(version=__version__, live_every=LIVE_EVERY_S, urlencode=urlencode)
        self._last_scrape = 0.0
        routes = [
            Route("/", self._wrap(self.overview)),
            Route("/fragment/overview", self._wrap(self.overview_fragment)),
            Route("/login", self._wrap(self.login, public=True), methods=["GET", "POST"]),
            Route("/logout", self._wrap(self.logout), methods=["POST"]),
            Route("/_ping", self._wrap(self.ping)),
            Route("/topics", self._wrap(self.topics), methods=["GET"]),
            Route("/topics", self._wrap(self.create_topic, write=True), methods=["POST"]),
            Route("/topics/{name}", self._wrap(self.topic)),
            Route("/topics/{name}/fragment", self._wrap(self.topic_fragment)),
            Route(
                "/topics/{name}/delete", self._wrap(self.delete_topic, write=True), methods=["POST"]
            ),
            Route(
                "/topics/{name}/configs",
                self._wrap(self.alter_configs, write=True),
                methods=["POST"],
            ),
            Route(
                "/topics/{name}/partitions",
                self._wrap(self.add_partitions, write=True),
                methods=["POST"],
            ),
            Route("/topics/{name}/messages", self._wrap(self.messages)),
            Route("/topics/{name}/record", self._wrap(self.record)),
            Route("/topics/{name}/produce", self._wrap(self.produce, write=True), methods=["POST"]),
            Route("/groups", self._wrap(self.groups)),
            Route("/groups/{group}", self._wrap(self.group)),
            Route("/groups/{group}/fragment", self._wrap(self.group_fragment)),
            Route(
                "/groups/{group}/reset",
                self._wrap(self.reset_preview, write=True),
                methods=["POST"],
            ),
            Route(
                "/groups/{group}/reset/execute",
                self._wrap(self.reset_execute, write=True),
                methods=["POST"],
            ),
            Route(
                "/groups/{group}/delete",
                self._wrap(self.delete_group, write=True),
                methods=["POST"],
            ),
            Route("/security", self._wrap(self.security)),
            Route("/security/users", self._wrap(self.create_user, write=True), methods=["POST"]),
            Route(
                "/security/users/delete", self._wrap(self.delete_user, write=True), methods=["POST"]
            ),
            Route("/security/acls", self._wrap(self.create_acl, write=True), methods=["POST"]),
            Route(
                "/security/acls/delete", self._wrap(self.delete_acl, write=True), methods=["POST"]
            ),
            Route("/operations", self._wrap(self.operations)),
            Route("/operations/fragment", self._wrap(self.operations_fragment)),
            Route("/operations/elect", self._wrap(self.elect, write=True), methods=["POST"]),
            Route("/operations/hanging", self._wrap(self.hanging)),
            Route("/operations/abort", self._wrap(self.abort, write=True), methods=["POST"]),
            Route("/metrics", self._wrap(self.metrics)),
            Route("/metrics/fragment", self._wrap(self.metrics_fragment)),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
        self.app = Starlette(routes=routes)

    # -- the guard: sessions, login, CSRF, read-only ----------------------------------

    def _wrap(
        self, fn: Handler, *, write: bool = False, public: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await self._guard(request, fn, write=write, public=public)

        return endpoint

    async def _guard(self, request: Request, fn: Handler, *, write: bool, public: bool) -> Response:
        session = self.sessions.loads(request.cookies.get(SESSION_COOKIE))
        new = session is None
        if session is None:
            session = self.sessions.new(None)
        ctx = Ctx(request, session, new, self._take_flash(request))
        login_needed = self.options.users is not None
        if login_needed and session.user is None and not public:
            if request.method == "GET" and "HX-Request" not in request.headers:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                response: Response = RedirectResponse(f"/login?next={quote(target, safe='')}", 303)
            else:
                response = self.render(
                    ctx, "error.html", {"title": "Log in", "message": "log in first"}, 401
                )
                response.headers["HX-Redirect"] = "/login"
            return self._finish(ctx, response)
        if request.method == "POST":
            form = await request.form()
            submitted = request.headers.get("X-CSRF-Token") or _field(form, "csrf")
            if not csrf_ok(session if not new else None, submitted):
                response = self.render(
                    ctx, "error.html",
                    {"title": "Refused", "message": "refused: the form's CSRF token is missing or "
                     "stale (reload the page and try again)"},
                    403,
                )  # fmt: skip
                return self._finish(ctx, response)
            if write and self.options.read_only:
                response = self.render(
                    ctx, "error.html",
                    {"title": "Read-only", "message": "refused: this console is read-only "
                     "(started with --read-only); no change was made"},
                    403,
                )  # fmt: skip
                return self._finish(ctx, response)
        try:
            response = await fn(ctx)
        except Unreachable as exc:
            response = self._unreachable(ctx, str(exc))
        except Denied as exc:
            response = self._error(ctx, "Denied", str(exc), 403)
        except KafkaError as exc:  # e.g. a coordinator moving: said, and retried live
            response = self._error(ctx, "Refused", str(exc), 502)
        return self._finish(ctx, response)

    def _error(self, ctx: Ctx, title: str, message: str, status: int) -> Response:
        """A page's error; a live fragment's error keeps polling its own URL (status 200,
        so htmx swaps it in) and is replaced by the data once the cluster answers again."""
        if "HX-Request" in ctx.request.headers:
            url = ctx.request.url.path + (
                f"?{ctx.request.url.query}" if ctx.request.url.query else ""
            )
            return self.render(ctx, "error_fragment.html", {"message": message, "retry": url})
        return self.render(ctx, "error.html", {"title": title, "message": message}, status)

    def _finish(self, ctx: Ctx, response: Response) -> Response:
        if ctx.new_session:
            self._set_session(response, ctx.session)
        if ctx.flash is not None:
            response.delete_cookie(FLASH_COOKIE)
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    def _set_session(self, response: Response, session: Session) -> None:
        response.set_cookie(
            SESSION_COOKIE, self.sessions.dumps(session), max_age=self.sessions.max_age_s,
            httponly=True, samesite="strict", path="/",
        )  # fmt: skip

    def _take_flash(self, request: Request) -> tuple[str, str] | None:
        raw = request.cookies.get(FLASH_COOKIE)
        if not raw:
            return None
        try:
            kind, text = self._flash_signer.loads(raw)
        except (BadSignature, ValueError, TypeError):
            return None
        return str(kind), str(text)

    def redirect(self, url: str, text: str, kind: str = "ok") -> Response:
        """Post/redirect/get, with the outcome shown once on the next page."""
        response = RedirectResponse(url, 303)
        response.set_cookie(
            FLASH_COOKIE, self._flash_signer.dumps([kind, text]), httponly=True,
            samesite="strict", path="/",
        )  # fmt: skip
        return response

    def render(
        self, ctx: Ctx, template: str, context: Mapping[str, Any], status: int = 200
    ) -> HTMLResponse:
        page = self.env.get_template(template).render(
            request=ctx.request,
            csrf=ctx.session.csrf,
            user=ctx.session.user,
            login=self.options.users is not None,
            read_only=self.options.read_only,
            bootstrap=self.gateway.bootstrap,
            flash=ctx.flash,
            path=ctx.request.url.path,
            **context,
        )
        return HTMLResponse(page, status)

    def _unreachable(self, ctx: Ctx, message: str) -> Response:
        fragment = "HX-Request" in ctx.request.headers
        template = "unreachable_fragment.html" if fragment else "unreachable.html"
        return self.render(
            ctx, template, {"title": "Cluster unreachable", "message": message,
                            "tried_at": time.strftime("%H:%M:%S")}, 200 if fragment else 503,
        )  # fmt: skip

    async def _failed(
        self, ctx: Ctx, template: str, context: dict[str, Any], exc: Exception
    ) -> Response:
        """A refused write: the same page again with the reason, nothing changed."""
        context["error"] = str(exc)
        return self.render(ctx, template, context, 400)

    # -- login ---------------------------------------------------------------------------

    async def login(self, ctx: Ctx) -> Response:
        target = ctx.request.query_params.get("next") or "/"
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        if self.options.users is None:
            return RedirectResponse(target, 303)
        if ctx.request.method == "GET":
            return self.render(ctx, "login.html", {"title": "Log in", "next": target})
        form = await ctx.request.form()
        name, password = _field(form, "username"), _field(form, "password")
        if not authenticate(self.options.users, name, password):
            return self.render(
                ctx, "login.html",
                {"title": "Log in", "next": target, "error": "wrong user name or password"}, 401,
            )  # fmt: skip
        # A fresh session (and CSRF token) at login: no fixation of a pre-login cookie.
        ctx.session = self.sessions.new(name)
        ctx.new_session = True
        return RedirectResponse(target, 303)

    async def logout(self, ctx: Ctx) -> Response:
        ctx.session = self.sessions.new(None)
        ctx.new_session = True
        return RedirectResponse("/login" if self.options.users is not None else "/", 303)

    async def ping(self, ctx: Ctx) -> Response:
        """The unreachable banner's retry: once the cluster answers, reload the page."""
        await self.gateway.snapshot(fresh=True)
        response = Response(status_code=204)
        response.headers["HX-Refresh"] = "true"
        return response

    # -- overview ------------------------------------------------------------------------

    async def _overview_context(self) -> dict[str, Any]:
        snap = await self.gateway.snapshot(fresh=True)
        dirs = await self.gateway.log_dirs()
        await self._maybe_scrape()
        under, offline = snap.health()
        leaders = snap.leaders()
        brokers = []
        for broker_id, broker in snap.known.items():
            series = self.gateway.metrics.get(broker_id)
            point = series.latest if series else None
            up = broker_id in snap.live
            brokers.append(
                {
                    "id": broker_id,
                    "address": f"{broker.host}:{broker.port}" if broker.port else "unknown",
                    "rack": broker.rack or "-",
                    "up": up,
                    "controller": broker_id == snap.controller_id,
                    "leaders": leaders.get(broker_id, 0),
                    "dirs": sorted(dirs.dirs.get(broker_id, {}).items()) if up else [],
                    "dir_error": dirs.errors.get(broker_id),
                    "bytes_in": point.bytes_in_rate if point and up else None,
                    "bytes_out": point.bytes_out_rate if point and up else None,
                }
            )
        points = [s.latest for s in self.gateway.metrics.values() if s.latest is not None]
        return {
            "snap": snap,
            "brokers": brokers,
            "under": under,
            "offline": offline,
            "partitions": snap.partition_count(),
            "bytes_in": sum(p.bytes_in_rate for p in points) if points else None,
            "bytes_out": sum(p.bytes_out_rate for p in points) if points else None,
        }

    async def _maybe_scrape(self) -> None:
        if time.monotonic() - self._last_scrape >= 2.0:
            self._last_scrape = time.monotonic()
            await self.gateway.scrape_metrics()

    async def overview(self, ctx: Ctx) -> Response:
        return self.render(
            ctx, "overview.html", {"title": "Overview", **await self._overview_context()}
        )

    async def overview_fragment(self, ctx: Ctx) -> Response:
        return self.render(ctx, "overview_fragment.html", await self._overview_context())

    # -- topics --------------------------------------------------------------------------

    async def _topics_context(self, ctx: Ctx) -> dict[str, Any]:
        params = ctx.request.query_params
        query = (params.get("q") or "").strip()
        internal = params.get("internal") == "1"
        snap = await self.gateway.snapshot()
        names = [
            n for n, m in snap.topics.items()
            if (not query or query.lower() in n.lower()) and (internal or not m.is_internal)
        ]  # fmt: skip
        page = paginate(names, parse_int(params.get("page"), 1, 1), TOPICS_PER_PAGE)
        configs = await self.gateway.topic_configs(list(page.items))
        dirs = await self.gateway.log_dirs()
        rows = []
        for name in page.items:
            meta = snap.topics[name]
            size = 0
            known = False
            under = 0
            for index, p in meta.partitions.items():
                s = dirs.partition_size(name, index, p.leader)
                if s is not None:
                    size += s
                    known = True
                if (p.leader >= 0 and len(p.isr) < len(p.replicas)) or p.leader < 0:
                    under += 1
            cfg = configs.get(name, {})
            rows.append(
                {
                    "name": name,
                    "partitions": len(meta.partitions),
                    "rf": max((len(p.replicas) for p in meta.partitions.values()), default=0),
                    "size": size if known else None,
                    "retention": (cfg.get("retention.ms") or (None, 0))[0],
                    "cleanup": (cfg.get("cleanup.policy") or ("-", 0))[0],
                    "unhealthy": under,
                    "internal": meta.is_internal,
                }
            )
        return {"rows": rows, "page": page, "q": query, "internal": internal}

    async def topics(self, ctx: Ctx) -> Response:
        return self.render(
            ctx, "topics.html", {"title": "Topics", **await self._topics_context(ctx)}
        )

    async def create_topic(self, ctx: Ctx) -> Response:
        form = await ctx.request.form()
        name = _field(form, "name").strip()
        try:
            if not name:
                raise ValueError("a topic needs a name")
            partitions = int(_field(form, "partitions") or "1")
            replication = int(_field(form, "replication_factor") or "-1")
            configs = parse_configs(_field(form, "configs"))
            await self.gateway.create_topic(name, partitions, replication, configs)
        except (KafkaError, ValueError) as exc:
            context = {"title": "Topics", **await self._topics_context(ctx)}
            context["form"] = dict(form)
            return await self._failed(ctx, "topics.html", context, exc)
        return self.redirect(f"/topics/{quote(name, safe='')}", f"created topic {name}")

    async def _topic_context(self, ctx: Ctx, name: str) -> dict[str, Any]:
        snap = await self.gateway.snapshot()
        meta = snap.topics.get(name)
        if meta is None:
            raise KafkaError(3, f"topic {name!r} does not exist")
        numbers = sorted(meta.partitions)
        page = paginate(
            numbers, parse_int(ctx.request.query_params.get("page"), 1, 1), PARTITIONS_PER_PAGE
        )
        tps = [TopicPartition(name, p) for p in page.items]
        offsets = await self.gateway.offsets(tps)
        dirs = await self.gateway.log_dirs()
        rows = []
        for p in page.items:
            pm = meta.partitions[p]
            start, end = offsets.get(TopicPartition(name, p), (-1, -1))
            rows.append(
                {
                    "partition": p,
                    "leader": pm.leader,
                    "replicas": pm.replicas,
                    "isr": pm.isr,
                    "start": start,
                    "end": end,
                    "size": dirs.partition_size(name, p, pm.leader),
                    "under": pm.leader < 0 or len(pm.isr) < len(pm.replicas),
                    "offline": pm.leader < 0,
                    "down": [r for r in pm.replicas if r not in snap.live],
                }
            )
        return {"name": name, "meta": meta, "rows": rows, "page": page, "snap": snap}

    async def topic(self, ctx: Ctx) -> Response:
        name = ctx.request.path_params["name"]
        try:
            context = await self._topic_context(ctx, name)
        except KafkaError as exc:
            return self.render(ctx, "error.html", {"title": name, "message": str(exc)}, 404)
        configs = (await self.gateway.topic_configs([name])).get(name, {})
        groups = await self.gateway.groups_of_topic(name)
        return self.render(
            ctx, "topic.html",
            {"title": f"Topic {name}", **context, "groups": groups,
             "configs": [
                 (k, v, CONFIG_SOURCES.get(s, str(s))) for k, (v, s) in sorted(configs.items())
             ]},
        )  # fmt: skip

    async def topic_fragment(self, ctx: Ctx) -> Response:
        name = ctx.request.path_params["name"]
        try:
            context = await self._topic_context(ctx, name)
        except KafkaError as exc:
            return self.render(ctx, "error_fragment.html", {"message": str(exc)})
        return self.render(ctx, "topic_fragment.html", context)

    async def delete_topic(self, ctx: Ctx) -> Response:
        name = ctx.request.path_params["name"]
        form = await ctx.request.form()
        if _field(form, "confirm") != name:
            return self.redirect(
                f"/topics/{quote(name, safe='')}",
                f"not deleted: type the topic's name ({name}) to confirm", "error",
            )  # fmt: skip
        try:
            await self.gateway.delete_topic(name)
        except KafkaError as exc:
            return self.redirect(f"/topics/{quote(name, safe='')}", str(exc), "error")
        return self.redirect("/topics", f"deleted topic {name}")

    async def alter_configs(self, ctx: Ctx) -> Response:
        name = ctx.request.path_params["name"]
        form = await ctx.request.form()
        here = f"/topics/{quote(name, safe='')}"
        try:
            sets = parse_configs(_field(form, "set"))
            deletes = [
                k.strip()
                for k in _field(form, "delete").replace(",", "\n").splitlines()
                if k.strip()
            ]
            if not sets and not deletes:
                raise ValueError("nothing to change: give KEY=VALUE lines to set or keys to delete")
            await self.gateway.alter_topic_configs(name, sets, deletes)
        except (KafkaError, ValueError) as exc:
            return self.redirect(here, str(exc), "error")
        changed = ", ".join([*(f"{k}={v}" for k, v in sets.items()), *(f"-{k}" for k in deletes)])
        return self.redirect(here, f"altered configs of {name}: {changed}")

    async def add_partitions(self, ctx: Ctx) -> Response:
        name = ctx.request.path_params["name"]
        form = await ctx.request.form()
        here = f"/topics/{quote(name, safe='')}"
        try:
            total = int(_field(form, "total"))
            await self.gateway.add_partitions(name, total)
        except (KafkaError, ValueError) as exc:
            return self.redirect(here, str(exc), "error")
        return self.redirect(here, f"{name} now has {total} partitions")

    # -- messages ------------------------------------------------------------------------

    async def messages(self, ctx: Ctx) -> Response:
        name = ctx.request.path_params["name"]
        params = ctx.request.query_params
        snap = await self.gateway.snapshot()
        meta = snap.topics.get(name)
        if meta is None:
            return self.render(
                ctx, "error.html", {"title": name, "message": f"topic {name!r} does not exist"}, 404
            )
        fmt = parse_format(params.get("format"))
        mode = params.get("mode") or "latest"
        if mode not in ("latest", "offset", "timestamp"):
            mode = "latest"
        partition = params.get("partition") or "all"
        limit = parse_int(params.get("limit"), 20, 1, 500)
        # "search", not "contains": a field named "contains" shadows form.contains() in the DOM.
        contains = params.get("search") or ""
        raw_value = params.get("value") or ""
        context: dict[str, Any] = {
            "title": f"Messages of {name}", "name": name, "meta": meta, "format": fmt, "mode": mode,
            "partition": partition, "limit": limit, "contains": contains, "value": raw_value,
            "records": None,
        }  # fmt: skip
        try:
            if mode == "timestamp":
                value = (
                    parse_timestamp(raw_value) if raw_value else int(time.time() * 1000) - 3_600_000
                )
            else:
                value = parse_int(raw_value, 0 if mode == "offset" else limit, 0)
            partition = partition.strip() or "all"
            partitions = [] if partition == "all" else [_partition_number(partition)]
            if partitions and partitions[0] not in meta.partitions:
                raise ValueError(f"{name} has no partition {partition}")
        except ValueError as exc:
            context["error"] = str(exc)
            return self.render(ctx, "messages.html", context, 400)
        try:
            found = await self.gateway.browse(
                name, partitions, mode=mode, value=value, limit=limit, contains=contains
            )
        except KafkaError as exc:
            context["error"] = str(exc)
            return self.render(ctx, "messages.html", context, 400)
        context["browse"] = found
        context["records"] = [
            {
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": render_bytes(r.key, fmt),
                "value": render_bytes(r.value, fmt),
                "headers": [(k, render_bytes(v, "text", 100)) for k, v in r.headers],
            }
            for r in found.records
        ]
        return self.render(ctx, "messages.html", context)

    async def record(self, ctx: Ctx) -> Response:
        """One record whole (a truncated value's "show all")."""
        name = ctx.request.path_params["name"]
        params = ctx.request.query_params
        partition = parse_int(params.get("partition"), 0, 0)
        offset = parse_int(params.get("offset"), 0, 0)
        fmt = parse_format(params.get("format"))
        found = await self.gateway.browse(name, [partition], mode="offset", value=offset, limit=1)
        rec = next((r for r in found.records if r.offset == offset), None)
        if rec is None:
            return self.render(
                ctx, "error.html",
                {"title": name, "message": f"no record at offset {offset} of {name}-{partition}"},
                404,
            )  # fmt: skip
        if params.get("raw") == "1":
            return Response(
                rec.value or b"",
                media_type="application/octet-stream",
                headers={
                    "Content-Disposition": f'attachment; filename="{name}-{partition}-{offset}.bin"'
                },
            )
        return self.render(
            ctx, "record.html",
            {"title": f"{name}-{partition} offset {offset}", "name": name, "rec": rec,
             "format": fmt, "key": render_bytes(rec.key, fmt, None),
             "value": render_bytes(rec.value, fmt, 1 << 20),
             "headers": [(k, render_bytes(v, fmt, None)) for k, v in rec.headers]},
        )  # fmt: skip

    async def produce(self, ctx: Ctx) -> Response:
        name = ctx.request.path_params["name"]
        form = await ctx.request.form()
        here = f"/topics/{quote(name, safe='')}/messages"
        try:
            headers = parse_headers(_field(form, "headers"))
            partition_text = _field(form, "partition").strip()
            partition = int(partition_text) if partition_text not in ("", "any") else None
            key = _field(form, "key")
            meta = await self.gateway.produce(
                name,
                _field(form, "value").encode(),
                key.encode() if key else None,
                headers,
                partition,
            )
        except (KafkaError, ValueError) as exc:
            return self.redirect(here, f"not produced: {exc}", "error")
        return self.redirect(here, f"produced to {name}-{meta.partition} at offset {meta.offset}")

    # -- consumer groups -------------------------------------------------------------------

    async def groups(self, ctx: Ctx) -> Response:
        listings = await self.gateway.list_groups()
        query = (ctx.request.query_params.get("q") or "").strip()
        if query:
            listings = [g for g in listings if query.lower() in g.group_id.lower()]
        page = paginate(
            listings, parse_int(ctx.request.query_params.get("page"), 1, 1), GROUPS_PER_PAGE
        )
        rows: list[dict[str, Any]] = []
        for g in page.items:
            try:
                view = await self.gateway.describe_group(g.group_id)
            except (KafkaError, Denied):
                rows.append({"listing": g, "view": None})
                continue
            rows.append({"listing": g, "view": view})
        return self.render(
            ctx, "groups.html", {"title": "Consumer groups", "rows": rows, "page": page, "q": query}
        )

    async def _group_context(self, group: str) -> dict[str, Any]:
        view = await self.gateway.describe_group(group)
        series = self.gateway.lag_history.series(group)
        chart = {
            "title": "total lag",
            "x": [t for t, _ in series],
            "series": [{"label": "lag", "values": [v for _, v in series]}],
        }
        return {
            "view": view,
            "chart": chart,
            "exists": view.state != "Dead" or bool(view.partitions),
        }

    async def group(self, ctx: Ctx) -> Response:
        group = ctx.request.path_params["group"]
        context = await self._group_context(group)
        return self.render(
            ctx, "group.html",
            {"title": f"Group {group}", "group": group, **context, "strategies": STRATEGIES},
        )  # fmt: skip

    async def group_fragment(self, ctx: Ctx) -> Response:
        group = ctx.request.path_params["group"]
        return self.render(
            ctx, "group_fragment.html", {"group": group, **await self._group_context(group)}
        )

    def _reset_params(self, form: FormData) -> tuple[str, str | None, int, str]:
        strategy = parse_strategy(_field(form, "strategy"))
        topic = _field(form, "topic").strip() or None
        raw = _field(form, "value").strip()
        if strategy == "timestamp":
            value = parse_timestamp(raw)
        elif strategy in ("offset", "shift"):
            if not raw:
                raise ValueError(f"reset to {strategy} needs a number")
            value = int(raw)
        else:
            value = 0
        return strategy, topic, value, raw

    async def reset_preview(self, ctx: Ctx) -> Response:
        group = ctx.request.path_params["group"]
        form = await ctx.request.form()
        context: dict[str, Any] = {
            "title": f"Group {group}",
            "group": group,
            "strategies": STRATEGIES,
        }
        try:
            strategy, topic, value, raw = self._reset_params(form)
            rows = await self.gateway.plan_group_reset(
                group, parse_strategy(strategy), topic, value
            )
        except (KafkaError, ValueError) as exc:
            context.update(await self._group_context(group))
            context["reset_error"] = str(exc)
            context["reset_form"] = dict(form)
            return self.render(ctx, "group.html", context, 400)
        context.update(await self._group_context(group))
        context["preview"] = rows
        context["plan"] = _plan_text(rows)
        context["reset_form"] = {"strategy": strategy, "topic": topic or "", "value": raw}
        return self.render(ctx, "group.html", context)

    async def reset_execute(self, ctx: Ctx) -> Response:
        group = ctx.request.path_params["group"]
        form = await ctx.request.form()
        here = f"/groups/{quote(group, safe='')}"
        try:
            rows = _parse_plan(_field(form, "plan"))
            await self.gateway.execute_group_reset(group, rows)
        except (KafkaError, ValueError) as exc:
            return self.redirect(here, f"offsets not reset: {exc}", "error")
        return self.redirect(here, f"reset the offsets of {len(rows)} partition(s) of {group}")

    async def delete_group(self, ctx: Ctx) -> Response:
        group = ctx.request.path_params["group"]
        form = await ctx.request.form()
        here = f"/groups/{quote(group, safe='')}"
        if _field(form, "confirm") != group:
            return self.redirect(
                here, f"not deleted: type the group's id ({group}) to confirm", "error"
            )
        try:
            await self.gateway.delete_group(group)
        except KafkaError as exc:
            return self.redirect(here, f"not deleted: {exc}", "error")
        return self.redirect("/groups", f"deleted group {group}")

    # -- security ------------------------------------------------------------------------

    async def security(self, ctx: Ctx) -> Response:
        context: dict[str, Any] = {
            "title": "Security",
            "resource_types": [t.name for t in ResourceType if t.name not in ("UNKNOWN", "ANY")],
            "operations": [o.name for o in AclOperation if o.name not in ("UNKNOWN", "ANY")],
            "patterns": ["LITERAL", "PREFIXED"],
            "permissions": ["ALLOW", "DENY"],
        }
        try:
            context["users"] = await self.gateway.list_users()
        except (Denied, KafkaError) as exc:
            context["users_error"] = str(exc)
        try:
            context["acls"] = await self.gateway.list_acls()
        except (Denied, KafkaError) as exc:
            context["acls_error"] = str(exc)
        return self.render(ctx, "security.html", context)

    async def create_user(self, ctx: Ctx) -> Response:
        form = await ctx.request.form()
        name = _field(form, "username").strip()
        try:
            if not name or not _field(form, "password"):
                raise ValueError("a user needs a name and a password")
            iterations = int(_field(form, "iterations") or "4096")
            await self.gateway.upsert_user(
                name,
                _field(form, "password"),
                _field(form, "mechanism") or "SCRAM-SHA-256",
                iterations,
            )
        except (KafkaError, ValueError) as exc:
            return self.redirect("/security", f"user not created: {exc}", "error")
        return self.redirect("/security", f"created user {name}")

    async def delete_user(self, ctx: Ctx) -> Response:
        form = await ctx.request.form()
        name = _field(form, "username")
        try:
            await self.gateway.delete_user(name)
        except (KafkaError, ValueError) as exc:
            return self.redirect("/security", f"user not deleted: {exc}", "error")
        return self.redirect("/security", f"deleted user {name}")

    def _acl_from(self, form: FormData) -> AclRow:
        row = AclRow(
            resource_type=_field(form, "resource_type").upper(),
            resource_name=_field(form, "resource_name").strip(),
            pattern_type=_field(form, "pattern_type").upper() or "LITERAL",
            principal=_field(form, "principal").strip(),
            host=_field(form, "host").strip() or "*",
            operation=_field(form, "operation").upper(),
            permission=_field(form, "permission").upper() or "ALLOW",
        )
        if row.resource_type not in ResourceType.__members__:
            raise ValueError(f"unknown resource type {row.resource_type!r}")
        if row.operation not in AclOperation.__members__:
            raise ValueError(f"unknown operation {row.operation!r}")
        if row.pattern_type not in PatternType.__members__:
            raise ValueError(f"unknown pattern type {row.pattern_type!r}")
        if row.permission not in AclPermissionType.__members__:
            raise ValueError(f"unknown permission {row.permission!r}")
        if not row.resource_name or ":" not in row.principal:
            raise ValueError("an ACL needs a resource name and a principal such as User:alice")
        return row

    async def create_acl(self, ctx: Ctx) -> Response:
        form = await ctx.request.form()
        try:
            row = self._acl_from(form)
            await self.gateway.create_acl(row)
        except (KafkaError, ValueError) as exc:
            return self.redirect("/security", f"ACL not created: {exc}", "error")
        return self.redirect(
            "/security",
            f"created ACL {row.permission} {row.principal} {row.operation} on "
            f"{row.resource_type}:{row.resource_name}",
        )

    async def delete_acl(self, ctx: Ctx) -> Response:
        form = await ctx.request.form()
        try:
            row = self._acl_from(form)
            removed = await self.gateway.delete_acl(row)
        except (KafkaError, ValueError) as exc:
            return self.redirect("/security", f"ACL not deleted: {exc}", "error")
        return self.redirect("/security", f"deleted {removed} ACL(s)")

    # -- operations ------------------------------------------------------------------------

    async def _operations_context(self) -> dict[str, Any]:
        context: dict[str, Any] = {}
        try:
            context["reassignments"] = await self.gateway.reassignments()
        except (Denied, KafkaError) as exc:
            context["reassignments_error"] = str(exc)
        try:
            context["transactions"] = await self.gateway.transactions()
        except (Denied, KafkaError) as exc:
            context["transactions_error"] = str(exc)
        return context

    async def operations(self, ctx: Ctx) -> Response:
        return self.render(
            ctx, "operations.html", {"title": "Operations", **await self._operations_context()}
        )

    async def operations_fragment(self, ctx: Ctx) -> Response:
        return self.render(ctx, "operations_fragment.html", await self._operations_context())

    async def elect(self, ctx: Ctx) -> Response:
        try:
            results = await self.gateway.elect_preferred()
        except KafkaError as exc:
            return self.redirect("/operations", f"election failed: {exc}", "error")
        done = sum(1 for r in results.values() if r.ok)
        not_needed = sum(1 for r in results.values() if r.error_code == 84)
        failed = len(results) - done - not_needed
        return self.redirect(
            "/operations",
            f"preferred leader election: {done} moved, {not_needed} already preferred, "
            f"{failed} failed",
            "error" if failed else "ok",
        )

    async def hanging(self, ctx: Ctx) -> Response:
        params = ctx.request.query_params
        topic = (params.get("topic") or "").strip() or None
        minutes = parse_int(params.get("max_timeout_min"), 15, 0)
        context = {"title": "Operations", **await self._operations_context()}
        try:
            context["hanging"] = await self.gateway.find_hanging(topic, minutes * 60_000)
        except KafkaError as exc:
            context["hanging_error"] = str(exc)
        context["hanging_topic"] = topic or ""
        context["hanging_minutes"] = minutes
        return self.render(ctx, "operations.html", context)

    async def abort(self, ctx: Ctx) -> Response:
        form = await ctx.request.form()
        try:
            tp = TopicPartition(_field(form, "topic"), int(_field(form, "partition")))
            start = int(_field(form, "start_offset"))
            producer = await self.gateway.abort_hanging(tp, start)
        except (KafkaError, ValueError) as exc:
            return self.redirect("/operations", f"not aborted: {exc}", "error")
        return self.redirect(
            "/operations",
            f"aborted the transaction of producer {producer.producer_id} "
            f"on {tp.topic}-{tp.partition}",
        )

    # -- metrics ---------------------------------------------------------------------------

    async def _metrics_context(self) -> dict[str, Any]:
        await self._maybe_scrape()
        series = dict(sorted(self.gateway.metrics.items()))
        charts = []
        for key, title, unit in (
            ("produce_rate", "Produce requests / s", "req/s"),
            ("fetch_rate", "Consumer fetch requests / s", "req/s"),
            ("produce_p99_ms", "Produce latency p99 (ms)", "ms"),
            ("fetch_p99_ms", "Consumer fetch latency p99 (ms)", "ms"),
            ("bytes_in_rate", "Bytes in / s", "B/s"),
            ("bytes_out_rate", "Bytes out / s", "B/s"),
        ):
            xs = sorted({p.at for s in series.values() for p in s.points})
            lines = []
            for broker_id, s in series.items():
                by_at = {p.at: getattr(p, key) for p in s.points}
                lines.append({"label": f"broker {broker_id}", "values": [by_at.get(x) for x in xs]})
            charts.append(
                {
                    "key": key,
                    "title": title,
                    "unit": unit,
                    "spec": {"title": title, "x": xs, "series": lines},
                }
            )
        return {"series": series, "charts": charts}

    async def metrics(self, ctx: Ctx) -> Response:
        return self.render(
            ctx, "metrics.html", {"title": "Metrics", **await self._metrics_context()}
        )

    async def metrics_fragment(self, ctx: Ctx) -> Response:
        return self.render(ctx, "metrics_fragment.html", await self._metrics_context())


def _partition_number(text: str) -> int:
    if not text.strip().isdigit():
        raise ValueError(f"partition {text!r}: a partition number, or all")
    return int(text)


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _plan_text(rows: list[ResetRow]) -> str:
    """The previewed plan as the execute form carries it: ``topic|partition|offset`` lines."""
    return "\n".join(f"{r.tp.topic}|{r.tp.partition}|{r.new}" for r in rows)


def _parse_plan(text: str) -> list[ResetRow]:
    rows: list[ResetRow] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        topic, partition, offset = line.rsplit("|", 2)
        new = int(offset)
        rows.append(ResetRow(TopicPartition(topic, int(partition)), None, new, new, new))
    if not rows:
        raise ValueError("the plan is empty: preview again")
    return rows
