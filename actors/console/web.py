"""The console's HTTP side (aiohttp): server-rendered pages (jinja2 templates shipped as package
data), live updates over server-sent events, forms for the actions, and a login with ACL on.

Every page is a full document whose `#live` part is also rendered alone: `/events?page=...`
streams that part again whenever the collector's state changes (and only when it differs from
what it last sent), and the page's few lines of inline JavaScript swap it in. Views read the
collector's state only; the forms go through `actions.Actions`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from actors.console import views
from actors.console.actions import ActionError, Actions
from actors.console.calls import ORIGIN
from actors.console.collector import Collector
from actors.console.dlq import DeadLetters, DlqError
from actors.console.groups import GroupConfigs
from namesrv.acl.plain_acl import SessionCredentials
from namesrv.protocol.codes import RequestCode, ResponseCode

SESSION_COOKIE = "console_session"
SSE_KEEPALIVE_S = 15.0
PAGES: dict[str, tuple[str, Callable[..., dict[str, Any]]]] = {
    "cluster": ("cluster_live.j2", lambda s, q: views.cluster_page(s)),
    "namesrvs": ("namesrvs_live.j2", lambda s, q: views.namesrvs_page(s)),
    "topics": ("topics_live.j2", lambda s, q: views.topics_page(s, q.get("q", ""), q.get("system") == "1")),
    "topic": ("topic_live.j2", lambda s, q: views.topic_detail(s, q.get("topic", ""))),
    "groups": ("groups_live.j2", lambda s, q: views.groups_page(s, q.get("q", ""))),
    "group": ("group_live.j2", lambda s, q: views.group_detail(s, q.get("group", ""))),
    "producers": ("producers_live.j2", lambda s, q: views.producers_page(s)),
    "ha": ("ha_live.j2", lambda s, q: views.ha_page(s)),
}
"""page -> (the template of its live part, its data from (state, query))."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _ms(value: int | None) -> str:
    if not value:
        return "-"
    return datetime.fromtimestamp(value / 1000, UTC).strftime("%H:%M:%S")


def templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("actors.console", "templates"),
                             autoescape=jinja2.select_autoescape(["j2", "html"]), undefined=jinja2.StrictUndefined)
    env.filters["clock"] = _ms
    env.filters["q"] = lambda s: quote(str(s), safe="")
    return env


class ConsoleApp:
    def __init__(self, collector: Collector, acl: bool = False) -> None:
        self.collector = collector
        self.actions = Actions(collector)
        self.dead_letters = DeadLetters(collector)
        self.group_configs = GroupConfigs(self.actions)
        self.acl = acl
        self.sessions: dict[str, SessionCredentials] = {}
        self.env = templates()
        self.renders = 0
        self.app = web.Application(middlewares=[self._auth])
        r = self.app.router
        r.add_get("/", self.index)
        r.add_get("/login", self.login_form)
        r.add_post("/login", self.login)
        r.add_post("/logout", self.logout)
        r.add_get("/cluster", self.page("cluster", "cluster.j2"))
        r.add_get("/namesrvs", self.page("namesrvs", "namesrvs.j2"))
        r.add_get("/topics", self.page("topics", "topics.j2"))
        r.add_get("/topics/{topic}", self.page("topic", "topic.j2"))
        r.add_get("/groups", self.page("groups", "groups.j2"))
        r.add_get("/groups/{group}", self.page("group", "group.j2"))
        r.add_get("/producers", self.page("producers", "producers.j2"))
        r.add_get("/ha", self.page("ha", "ha.j2"))
        r.add_get("/messages", self.messages)
        r.add_get("/events", self.events)
        r.add_get("/healthz", self.healthz)
        r.add_post("/topics", self.create_topic)
        r.add_post("/topics/{topic}/delete", self.delete_topic)
        r.add_post("/topics/{topic}/send", self.send_message)
        r.add_post("/topics/{topic}/update", self.update_topic)
        r.add_post("/groups/{group}/reset", self.reset_offset)
        r.add_post("/groups/{group}/skip", self.skip_backlog)
        r.add_post("/groups/{group}/config", self.update_group_config)
        r.add_post("/producers", self.watch_producer)
        r.add_post("/messages/dlq/resend", self.resend_dead_letter)
        r.add_post("/messages/consume-directly", self.consume_directly)

    # ------------------------------------------------------------------ sessions (ACL)
    def credentials(self, request: web.Request) -> SessionCredentials | None:
        return self.sessions.get(request.cookies.get(SESSION_COOKIE, ""))

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # Whatever this request asks of the servers is counted under its origin (calls.ORIGIN):
        # a form's action, or a page view, which must ask nothing.
        ORIGIN.set("action" if request.method == "POST" or (request.path == "/messages" and request.query) else "view")
        if not self.acl or request.path in ("/login", "/healthz") or self.credentials(request) is not None:
            return await handler(request)
        if request.method == "GET" and request.path != "/events":
            raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")
        raise web.HTTPUnauthorized(text="log in first (ACL is on)")

    async def login_form(self, request: web.Request) -> web.Response:
        return self.render("login.j2", {"next": request.query.get("next", "/cluster"), "error": None})

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        access, secret = str(form.get("access_key", "")).strip(), str(form.get("secret_key", ""))
        nxt = str(form.get("next", "/cluster"))
        if not nxt.startswith("/") or nxt.startswith("//"):
            nxt = "/cluster"
        if not access or not secret:
            return self.render("login.j2", {"next": nxt, "error": "enter an access key and a secret key"}, 400)
        creds = SessionCredentials(access_key=access, secret_key=secret)
        why = await self._check_account(creds)
        if why is not None:
            return self.render("login.j2", {"next": nxt, "error": why}, 403)
        token = secrets.token_urlsafe(24)
        self.sessions[token] = creds
        self.collector.servers.credentials = creds  # the collector reads with the last account that logged in
        resp = web.HTTPSeeOther(nxt)
        resp.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="Strict")
        raise resp

    async def _check_account(self, creds: SessionCredentials) -> str | None:
        """None when a NameServer accepts a request signed with `creds`, else why not."""
        name = self.collector.namesrv_names[0]
        try:
            resp = await self.collector.servers.call_namesrv(name, self.collector.servers.request(
                RequestCode.GET_BROKER_CLUSTER_INFO, credentials=creds))
        except Exception as e:
            return f"{name} could not check the account: {type(e).__name__}"
        if resp.code == ResponseCode.NO_PERMISSION:
            return f"refused: {resp.remark}"
        return None

    async def logout(self, request: web.Request) -> web.StreamResponse:
        self.sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)
        resp = web.HTTPSeeOther("/login")
        resp.del_cookie(SESSION_COOKIE)
        raise resp

    # ------------------------------------------------------------------ pages
    def render(self, template: str, data: dict[str, Any], status: int = 200) -> web.Response:
        self.renders += 1
        base = {"acl": self.acl, "state_version": self.collector.state.version, "notice": None, "error": None}
        html = self.env.get_template(template).render(**(base | data))
        return web.Response(text=html, content_type="text/html", status=status)

    def live(self, page: str, query: dict[str, str], data: dict[str, Any] | None = None) -> str:
        """The page's live part (from `data` when the caller has it already)."""
        template, compute = PAGES[page]
        return self.env.get_template(template).render(**(data if data is not None else
                                                         compute(self.collector.state, query)))

    def page(self, page: str, template: str, status: int = 200) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            return self.page_response(request, page, template)
        return handler

    def page_response(self, request: web.Request, page: str, template: str, status: int = 200,
                      **extra: Any) -> web.Response:
        query = dict(request.query) | dict(request.match_info)
        data = PAGES[page][1](self.collector.state, query)
        events = "/events?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in ({"page": page} | query).items())
        notice = request.query.get("notice")
        return self.render(template, data | {"page": page, "events_url": events,
                                             "live_html": self.live(page, query, data),
                                             "notice": notice} | extra, status)

    async def index(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther("/cluster")

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.collector.state.version, "calls": self.collector.servers.counts,
                                  "ticks": self.collector.ticks, "renders": self.renders})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: the page's live part each time it changes."""
        query = dict(request.query)
        page = query.pop("page", "")
        if page not in PAGES:
            raise web.HTTPBadRequest(text=f"no page {page!r}")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        seen, last = -1, ""
        try:
            while True:
                seen = await self.collector.wait_change(seen, SSE_KEEPALIVE_S)
                html = self.live(page, query)
                if html != last:
                    last = html
                    payload = "".join(f"data: {line}\n" for line in html.split("\n"))
                    await resp.write(f"event: live\n{payload}\n".encode())
                else:
                    await resp.write(b": keepalive\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return resp

    # ------------------------------------------------------------------ actions
    async def _form(self, request: web.Request) -> dict[str, str]:
        return {k: str(v) for k, v in (await request.post()).items()}

    async def create_topic(self, request: web.Request) -> web.StreamResponse:
        form = await self._form(request)
        try:
            where = await self.actions.create_topic(form.get("topic", ""), form.get("queues", "8"),
                                                    self.credentials(request))
        except ActionError as e:
            return self.page_response(request, "topics", "topics.j2", 400, error=str(e))
        topic = form["topic"].strip()
        raise web.HTTPSeeOther(f"/topics/{quote(topic, safe='')}?notice="
                               + quote(f"created {topic} on {', '.join(where)}", safe=""))

    async def delete_topic(self, request: web.Request) -> web.StreamResponse:
        topic = request.match_info["topic"]
        try:
            await self.actions.delete_topic(topic, self.credentials(request))
        except ActionError as e:
            return self.page_response(request, "topic", "topic.j2", 400, error=str(e))
        raise web.HTTPSeeOther("/topics?notice=" + quote(f"deleted {topic}", safe=""))

    async def send_message(self, request: web.Request) -> web.StreamResponse:
        topic = request.match_info["topic"]
        form = await self._form(request)
        try:
            sent = await self.actions.send_test_message(topic, form.get("body", ""), form.get("key", ""),
                                                        form.get("tag", ""), self.credentials(request))
        except ActionError as e:
            return self.page_response(request, "topic", "topic.j2", 400, error=str(e))
        return self.page_response(request, "topic", "topic.j2", notice=(
            f"sent to {sent.get('broker')}: msgId {sent.get('msgId')}, queue {sent.get('queueId')}, "
            f"offset {sent.get('queueOffset')}"))

    async def update_topic(self, request: web.Request) -> web.StreamResponse:
        topic = request.match_info["topic"]
        form = await self._form(request)
        try:
            where = await self.actions.update_topic(topic, form.get("readQueueNums", ""),
                                                    form.get("writeQueueNums", ""), form.get("perm", ""),
                                                    self.credentials(request))
        except ActionError as e:
            return self.page_response(request, "topic", "topic.j2", 400, error=str(e))
        raise web.HTTPSeeOther(f"/topics/{quote(topic, safe='')}?notice=" + quote(
            f"updated {topic} on {', '.join(where)}: read {form['readQueueNums'].strip()}, write "
            f"{form['writeQueueNums'].strip()}, perm {form['perm'].strip()}", safe=""))

    async def reset_offset(self, request: web.Request, timestamp: str | None = None) -> web.StreamResponse:
        """The group's offsets of a topic reset by time (`timestamp`: the form's, unless given)."""
        group = request.match_info["group"]
        form = await self._form(request)
        try:
            offsets = await self.actions.reset_offset(group, form.get("topic", ""),
                                                      form.get("timestamp", "") if timestamp is None else timestamp,
                                                      self.credentials(request))
        except ActionError as e:
            return self.page_response(request, "group", "group.j2", 400, error=str(e))
        shown = ", ".join(f"{k}={v}" for k, v in sorted(offsets.items())) or "no queue"
        what = "skipped the backlog of" if timestamp == "now" else "reset"
        return self.page_response(request, "group", "group.j2", notice=f"{what} {group}: {shown}")

    async def skip_backlog(self, request: web.Request) -> web.StreamResponse:
        """rocketmq-dashboard's skipAccumulate: the group's offsets of a topic reset to now."""
        return await self.reset_offset(request, "now")

    async def update_group_config(self, request: web.Request) -> web.StreamResponse:
        group = request.match_info["group"]
        form = await self._form(request)
        try:
            where = await self.group_configs.update(group, form, self.credentials(request))
        except ActionError as e:
            return self.page_response(request, "group", "group.j2", 400, error=str(e))
        self.collector.bump()
        raise web.HTTPSeeOther(f"/groups/{quote(group, safe='')}?notice="
                               + quote(f"updated the config of {group} on {', '.join(where)}", safe=""))

    async def watch_producer(self, request: web.Request) -> web.StreamResponse:
        form = await self._form(request)
        group = form.get("group", "").strip()
        if not group or any(c.isspace() for c in group) or len(group) > 255:
            return self.page_response(request, "producers", "producers.j2", 400,
                                      error=f"invalid producer group {form.get('group', '')!r}")
        await self.collector.producers.watch(group)
        self.collector.bump()
        raise web.HTTPSeeOther("/producers?notice=" + quote(f"watching producer group {group}", safe=""))

    async def messages(self, request: web.Request) -> web.Response:
        """Look messages up by id or key, or list a group's dead letters (`dlq`, `begin`, `end`)."""
        q = request.query
        creds = self.credentials(request)
        data = self._messages_data(dict(q))
        try:
            if q.get("id"):
                data["rows"] = [await self.actions.message_by_id(q["id"], creds)]
                data["asked"] = True
            elif q.get("topic") or q.get("key"):
                data["rows"] = await self.actions.messages_by_key(q.get("topic", ""), q.get("key", ""), creds)
                data["asked"] = True
            elif "dlq" in q:
                data["dead"], data["full"] = await self.dead_letters.list(q["dlq"], q.get("begin", ""),
                                                                          q.get("end", ""), creds)
        except (ActionError, DlqError) as e:
            return self.render("messages.j2", data | {"error": str(e)}, 400)
        return self.render("messages.j2", data)

    def _messages_data(self, q: dict[str, str]) -> dict[str, Any]:
        return {"rows": [], "msg_id": q.get("id", ""), "topic": q.get("topic", ""), "key": q.get("key", ""),
                "asked": False, "dlq_group": q.get("dlq", ""), "begin": q.get("begin", ""), "end": q.get("end", ""),
                "dead": None, "full": False, "groups": sorted(self.collector.state.groups), "page": "messages",
                "notice": q.get("notice"), "live_groups": {g: v.members for g, v in
                                                           sorted(self.collector.state.groups.items()) if v.members}}

    async def resend_dead_letter(self, request: web.Request) -> web.StreamResponse:
        """A dead letter back to its group (dlq.DeadLetters.resend); the group's DLQ listed again."""
        form = await self._form(request)
        group = form.get("group", "")
        try:
            notice = await self.dead_letters.resend(group, form.get("msgId", ""), self.credentials(request))
        except DlqError as e:
            return self.render("messages.j2", self._messages_data({"dlq": group}) | {"error": str(e)}, 400)
        raise web.HTTPSeeOther(f"/messages?dlq={quote(group.strip(), safe='')}&notice={quote(notice, safe='')}")

    async def consume_directly(self, request: web.Request) -> web.StreamResponse:
        """A live client of a group runs its listener once on a message (Actions.consume_directly);
        the message shown again with the result as the notice."""
        form = await self._form(request)
        msg_id = form.get("msgId", "").strip()
        try:
            client, result = await self.actions.consume_directly(form.get("group", ""), form.get("clientId", ""),
                                                                 msg_id, self.credentials(request))
        except ActionError as e:
            return self.render("messages.j2", self._messages_data({"id": msg_id}) | {"error": str(e)}, 400)
        outcome = result.consume_result.value if result.consume_result is not None else "no result"
        notice = (f"{client} of {form.get('group', '').strip()} consumed {msg_id} directly: {outcome} in "
                  f"{result.spent_time_mills} ms" + (f" ({result.remark})" if result.remark else ""))
        raise web.HTTPSeeOther(f"/messages?id={quote(msg_id, safe='')}&notice={quote(notice, safe='')}")
