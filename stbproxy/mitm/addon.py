"""The stbproxy addon: every proxied request, and every call to the proxy's own /virtual,
through the engine (StbAddon), the same for ``mitmdump -s addons/stbproxy_addon.py``
(ScriptAddon), and the stb_ options it declares, turned into Settings."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Awaitable, Callable

from mitmproxy import ctx, exceptions, http

from stbproxy.engine import Answer
from stbproxy.errors import ConfigError, StbError
from stbproxy.forensics.naming import FORK_HEADER, TRIAL_HEADER, completed, scoped, session_spec
from stbproxy.front.destinations import own_address
from stbproxy.front.guard import HEAD_MEMO_MAX, Guard, Refusal, loop_message
from stbproxy.front.limits import url_problem
from stbproxy.front.views import SHARED, view_for, view_mode
from stbproxy.key_rules import DEFAULT_RULES
from stbproxy.mcp.endpoints import local_target, to_server
from stbproxy.mitm.connections import ConnectionWatch, Watched
from stbproxy.mitm.flows import (
    Prebuilt,
    error_response,
    header_items,
    request_from_flow,
    request_url,
    response_to_mitm,
)
from stbproxy.mitm.h2_guard import cancelled_on_reset
from stbproxy.mitm.lanes import HANDED_OVER, LANE, MITMPROXY
from stbproxy.mitm.relay import Relay
from stbproxy.mitm.streaming import STREAM, chunked_head
from stbproxy.models import Request, Response, Source
from stbproxy.recent import Recent
from stbproxy.redact import failure_text
from stbproxy.runtime import Runtime
from stbproxy.serve_options import SETTINGS, read_options
from stbproxy.sessions import SESSION_HEADER, naming_text, proxy_user
from stbproxy.settings import Settings
from stbproxy.stb.virtual_calls import own_virtual_path

log = logging.getLogger("stbproxy")

NAMING_HEADERS = frozenset(name.lower() for name in (SESSION_HEADER, TRIAL_HEADER, FORK_HEADER))
RELAYED = "stb_relayed"  # flow.metadata: the flow fetches its streamed answer from the relay
PROXY_AUTHORIZATION = "proxy-authorization"
HEADER_FACTS_REMEMBERED = 1024


# -- the addon --------------------------------------------------------------------------


class StbAddon:
    """Answers every proxied request through the stbproxy engine."""

    def __init__(self, make_runtime: Callable[[Settings], Runtime] = Runtime) -> None:
        self.make_runtime = make_runtime
        self.runtime: Runtime | None = None
        self.settings: Settings | None = None
        self.views = SHARED  # which view of the store a request's calls are keyed in (front/views.py)
        self._tunnel_sessions: dict[str, str] = {}  # client connection id -> session named at CONNECT
        self.guard = Guard()  # per-request limits, destinations, the proxy's own address
        self._header_facts: Recent[tuple] = Recent(HEADER_FACTS_REMEMBERED)  # header_facts, by fields object
        self.close_error: StbError | None = None  # why the store could not be closed cleanly
        self.prebuilt = Prebuilt()
        self.connections: ConnectionWatch | None = None  # serve's watch over client connections
        self.relay = Relay()  # streamed answers for flows mitmproxy serves itself

    def load(self, loader) -> None:
        for setting in SETTINGS:  # every stb_ option, from the one table (serve_options.py)
            kind, default, help_text = setting.addon
            loader.add_option(setting.option_name, kind, default, help_text)

    def configure(self, updated: set[str]) -> None:
        if self.settings is not None and not any(name.startswith("stb_") or name in ("listen_host", "proxyauth")
                                                 for name in updated):
            return
        self.settings = settings_from_options(ctx.options)
        check_proxy_auth(getattr(ctx.options, "proxyauth", None))
        self.views = view_mode(self.settings.views, bool(getattr(ctx.options, "proxyauth", None)))
        self.guard.configure(self.settings, ctx.options.listen_host, bool(getattr(ctx.options, "proxyauth", None)))
        # The store opens when the proxy starts running, not while options are still being
        # set (that would open the default store before --set stb_store arrives). A live
        # change (mitmweb's options editor) reopens it at once.
        if self.runtime is not None and self.runtime.settings != self.settings:
            self._close_runtime()
            try:
                self.open_runtime()
            except StbError as exc:
                raise exceptions.OptionsError(str(exc)) from exc

    def running(self) -> None:
        try:
            self.open_runtime()
        except (exceptions.OptionsError, StbError) as exc:
            log.error("stbproxy: error: %s", exc)  # mitmproxy's errorcheck stops start-up on an error line

    def open_runtime(self) -> Runtime:
        """The running parts, opened on first use; StbError names what cannot be opened."""
        if self.runtime is None:
            if self.settings is None:
                self.settings = settings_from_options(ctx.options)
            self.runtime = self.make_runtime(self.settings)
            log.info("stbproxy: mode %s, store %s", self.settings.mode.value, self.settings.store)
        return self.runtime

    # -- what mitmproxy's layers are doing with a connection, for the watch (connections.py) --

    def watched(self, client) -> Watched | None:
        return None if self.connections is None else self.connections.of(client.peername)

    def tls_established_client(self, data) -> None:
        watched = self.watched(data.context.client)
        if watched is not None:
            watched.between_requests()

    def error(self, flow: http.HTTPFlow) -> None:
        watched = self.watched(flow.client_conn)
        if watched is not None:
            watched.failed(time.monotonic())

    # -- requests --------------------------------------------------------------------------

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        watched = self.watched(flow.client_conn)
        if watched is not None:
            watched.answered(time.monotonic())  # a CONNECT has no body, and its answer is at once
        waiting = self.check_head(flow)
        if waiting is not None:
            await waiting
        if flow.response is not None:
            return
        # HTTPS clients send the proxy URL's user on the CONNECT only: remember it for the tunnel.
        headers = header_items(flow)
        spec = session_spec(naming_text(headers), headers)
        if spec:
            self._tunnel_sessions[flow.client_conn.id] = spec

    def requestheaders(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """(A coroutine only when the check may wait: mitmproxy awaits what a hook returns.)"""
        watched = self.watched(flow.client_conn)
        if watched is not None:
            watched.head_done()
        return self.check_head(flow)

    def check_head(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """Before the body is read (front/guard.py): answers to wrong credentials are held back, a
        head over the limits gets 431, a CONNECT to a refused destination 403. A coroutine to
        await when the check may wait (credentials held back, a destination looked up), else
        None: the check is done."""
        request = flow.request
        # proxyauth (an earlier addon) answered 407: to wrong credentials when some were sent
        wrong = (flow.response is not None and flow.response.status_code == 407
                 and "proxy-authorization" in request.headers)
        credentials = wrong or "proxyauth" in flow.metadata
        data = request.data
        if wrong or self.guard.waits_on_head(data.method, credentials, flow.client_conn.peername):
            return self._check_head_waiting(flow, wrong, credentials)
        self._head_checked(flow, self.guard.head_refusal(data.method, data.path, data.headers.fields))
        return None

    async def _check_head_waiting(self, flow: http.HTTPFlow, wrong: bool, credentials: bool) -> None:
        request = flow.request
        refusal = await self.guard.check_head(
            method=request.data.method, target=request.data.path, host=request.host, port=request.port,
            fields=request.headers.fields,
            client=flow.client_conn.peername, local=flow.client_conn.sockname,
            credentials=credentials, auth_failed=wrong)
        self._head_checked(flow, refusal)

    def _head_checked(self, flow: http.HTTPFlow, refusal: Refusal | None) -> None:
        request = flow.request
        if refusal is not None and flow.response is None:
            flow.response = error_response(refusal.status, refusal.message)
            if refusal.closes:
                flow.response.headers["Connection"] = "close"
        if flow.response is None:  # a URL longer than can be forwarded: 414 before any work
            too_long = url_problem(request.data.path, request.host, lambda: request.url)
            if too_long is not None:
                flow.response = error_response(414, f"stbproxy: {too_long}")

    def client_disconnected(self, client) -> None:
        self._tunnel_sessions.pop(client.id, None)

    def session_for(self, flow: http.HTTPFlow) -> tuple[str, tuple[tuple[str, str], ...]]:
        """The request's session string (its name, trial and fork: forensics/naming.py), and
        its header fields without the naming ones, which are removed from the flow so that
        they never travel on."""
        headers, spec, strips = self.header_facts(flow)
        if strips:
            for name in (SESSION_HEADER, TRIAL_HEADER, FORK_HEADER):
                flow.request.headers.pop(name, None)
            if proxy_user(headers) is not None:
                flow.request.headers.pop("Proxy-Authorization", None)
            headers = header_items(flow)
        fallback = self._tunnel_sessions.get(flow.client_conn.id) or self.open_runtime().session
        return self.in_scope(flow, completed(spec, fallback), headers), headers

    def header_facts(self, flow: http.HTTPFlow) -> tuple[tuple[tuple[str, str], ...], str | None, bool]:
        """The request's header fields as text, the session they name (session_spec) and whether
        naming fields are to be removed from the flow: worked out once for the same fields
        object (a head the fast lane read before: plain_http.py), while it is remembered (small
        heads only; the memo holds the object, so its id is its own)."""
        fields = flow.request.headers.fields
        known = self._header_facts.get(id(fields))
        if known is not None and known[0] is fields:
            return known[1]
        headers = header_items(flow)
        spec = session_spec(naming_text(headers), headers)
        names = {key.lower() for key, _ in headers}
        strips = bool(names & NAMING_HEADERS) or (PROXY_AUTHORIZATION in names and proxy_user(headers) is not None)
        facts = (headers, spec, strips)
        if len(fields) <= 64 and sum(len(name) + len(value) for name, value in fields) <= HEAD_MEMO_MAX:
            self._header_facts.put(id(fields), (fields, facts))
        return facts

    def in_scope(self, flow: http.HTTPFlow, session: str, headers) -> str:
        """The session string with the request's user (whose sessions are its own) and view
        of the store (front/views.py), when there are such: behind --proxy-auth."""
        auth = flow.metadata.get("proxyauth")
        user = auth[0] if isinstance(auth, tuple) and auth and auth[0] else None
        if user is None and self.views == SHARED:
            return session
        view = view_for(self.views, user, headers, self.open_runtime().engine.config.rules)
        return scoped(session, user, view)

    @cancelled_on_reset  # HTTP/2 and 3: a stream its client resets is answered no further (h2_guard.py)
    async def request(self, flow: http.HTTPFlow) -> None:
        watched = self.watched(flow.client_conn)
        if watched is not None:
            watched.body_done()
        if LANE not in flow.metadata:  # a lane marks its flows; the others came through mitmproxy's layers
            flow.metadata[LANE] = MITMPROXY
            if watched is not None and watched.handed_over:
                flow.metadata[HANDED_OVER] = watched.handed_over
        if flow.response is not None or flow.error is not None:
            return  # another addon answered, or the flow is dead
        if addressed_to_proxy(flow):
            flow.response = await self.own_endpoint(flow)
            return
        body = flow.request.raw_content or b""
        if self.guard.rules.active:  # destinations are checked (a name may be looked up)
            refusal = await self.guard.check_request(flow.request.host, body, flow.request.headers.get("content-type"))
        else:
            refusal = self.guard.body_refusal(body, flow.request.headers.get("content-type")) if body else None
        if refusal is not None:  # a refused destination (403), a body nested too deep (422)
            flow.response = error_response(refusal.status, refusal.message)
            return
        session, headers = self.session_for(flow)
        flow.response = await self.engine_response(flow, request_from_flow(flow, headers), session)

    async def engine_response(self, flow: http.HTTPFlow, request: Request, session: str) -> http.Response | None:
        """The engine's answer to ``request`` as the flow's response (None: it streams through
        the relay, answered)."""
        try:
            answer = await self.open_runtime().engine.handle(request, session)
        except Exception as exc:  # one bad request must never take the proxy down
            self.log_failure(request, exc)
            reply = self.failure_reply(request)
            return response_to_mitm(reply) if reply is not None else error_response(
                502, "stbproxy internal error (see the proxy's log)")
        flow.metadata["stb_source"] = answer.source.value
        flow.metadata["stb_session"] = session
        flow.metadata["stb_key"] = answer.key
        if answer.source is Source.CACHE and answer.stream is None and answer.key is not None:
            # (a stored MCP answer may play as it goes)
            return self.prebuilt.response(answer.key, answer.response, lambda: response_to_mitm(answer.response))
        return await self.answered(flow, answer)

    def log_failure(self, request: Request, exc: Exception) -> None:
        """The proxy failed on ``request``: logged with its secrets scrubbed by the key rules in force."""
        # (before the options are read, the default rules)
        rules = DEFAULT_RULES if self.settings is None else self.settings.key_rules()
        log.error("stbproxy failed on %s", failure_text(request, exc, rules))

    def failure_reply(self, request: Request) -> Response | None:
        """The answer a request's kind gives when the proxy failed on it (a /virtual client's
        answer object), or None for the 502."""
        try:
            return self.open_runtime().engine.failure_reply(request)
        except Exception:  # the failure is logged already
            return None

    def response(self, flow: http.HTTPFlow) -> None:
        watched = self.watched(flow.client_conn)
        if watched is not None:
            watched.answered(time.monotonic())
        # An answer to HEAD has the headers of a GET's and no body (a stored or simulated answer
        # has one): a body would be read as the start of the next answer on the connection.
        if flow.request.method == "HEAD" and flow.response is not None and flow.response.raw_content:
            flow.response.raw_content = b""

    async def own_endpoint(self, flow: http.HTTPFlow) -> http.Response | None:
        """A request to the proxy's own address: /virtual (answered by the engine, the
        request marked as the proxy's own), else a pointer to usage (404), or a loop error
        (508) when it names the proxy in a way only a relayed request does.

        Never forwarded: that would send the proxy a request to itself, forever.
        """
        is_virtual, named_session = own_virtual_path(flow.request.path)
        if is_virtual:
            if named_session:
                headers = self.header_facts(flow)[0]
                session = self.in_scope(flow, completed(named_session, self.open_runtime().session), headers)
            else:
                session, headers = self.session_for(flow)
            request = Request(flow.request.method, request_url(flow.request), headers,
                              flow.request.raw_content or b"", to_proxy=True, lane=flow.metadata.get(LANE, ""))
            return await self.engine_response(flow, request, session)
        mcp = local_target(flow.request.path)
        if mcp is not None:
            return await self.local_mcp(flow, *mcp)
        if own_address(flow.request.host, flow.request.port, flow.client_conn.sockname) == "other":
            # Only a request relayed to the proxy names it so: it would loop back here.
            return error_response(508, loop_message(flow.request.method, flow.request.host, flow.request.port))
        return error_response(404, f"stbproxy: no endpoint {flow.request.method} {flow.request.path}; use this "
                                   "address as HTTP_PROXY / HTTPS_PROXY, or POST StableToolBench calls to /virtual")

    async def local_mcp(self, flow: http.HTTPFlow, name: str, named_session: str | None) -> http.Response | None:
        """A message to ``serve --mcp NAME=URL``'s endpoint, answered as if sent to URL."""
        runtime = self.open_runtime()
        servers = runtime.settings.mcp_servers()
        if name not in servers:
            known = ", ".join(f"/mcp/{n}" for n in servers) or "none (serve --mcp NAME=URL adds one)"
            return error_response(404, f"stbproxy: no MCP server named {name!r}; the MCP endpoints here: {known}")
        if named_session:
            headers = header_items(flow)
            session = self.in_scope(flow, named_session, headers)
        else:
            session, headers = self.session_for(flow)
        request = to_server(request_from_flow(flow, headers), servers[name])
        try:
            answer = await runtime.engine.handle(request, session)
        except Exception as exc:  # one bad message must never take the proxy down
            self.log_failure(request, exc)
            return error_response(502, "stbproxy internal error (see the proxy's log)")
        flow.metadata["stb_source"] = answer.source.value
        flow.metadata["stb_session"] = session
        flow.metadata["stb_key"] = answer.key
        return await self.answered(flow, answer)

    async def answered(self, flow: http.HTTPFlow, answer: Answer) -> http.Response | None:
        """The response for ``answer``; a body still arriving goes to the fast lane serving
        the flow, else through the relay, which mitmproxy then streams (streaming.py): None,
        the flow goes there."""
        response = response_to_mitm(answer.response)
        if answer.stream is None:
            return response
        if flow.metadata.get(LANE, MITMPROXY) != MITMPROXY:
            flow.metadata[STREAM] = answer.stream
            return response
        host, port, path = await self.relay.hand(chunked_head(response), answer.stream)
        flow.request.scheme, flow.request.host, flow.request.port, flow.request.path = "http", host, port, path
        flow.request.headers.clear()  # the relay reads no header; the client's stay with the proxy
        flow.request.headers["host"] = f"{host}:{port}"
        flow.request.content = b""
        flow.metadata[RELAYED] = True
        return None

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(RELAYED) and flow.response is not None:
            flow.response.stream = True

    async def done(self) -> None:
        await self.relay.aclose()
        if self.runtime is not None:
            runtime, self.runtime = self.runtime, None
            try:
                await runtime.aclose()
            except StbError as exc:  # a failed flush: reported by serve() as an error exit
                log.error("%s", exc)
                self.close_error = exc

    def _close_runtime(self) -> None:
        if self.runtime is None:
            return
        runtime, self.runtime = self.runtime, None
        runtime.store.close()  # synchronously: a new runtime may reopen the same store
        try:
            asyncio.get_running_loop().create_task(runtime.upstream.aclose())
        except RuntimeError:
            pass  # no loop yet (configure at start-up): nothing was connected


class ScriptAddon(StbAddon):
    """StbAddon as ``mitmdump -s addons/stbproxy_addon.py`` loads it: a bad stb_ option at
    start-up is one error line, after which mitmdump stops, instead of the traceback that
    mitmproxy prints for any exception in a script; later changes (mitmweb's option
    editor) are refused as usual."""

    def __init__(self) -> None:
        super().__init__()
        self._started = False

    def configure(self, updated: set[str]) -> None:
        try:
            super().configure(updated)
        except exceptions.OptionsError as exc:
            if self._started:
                raise
            self.settings = None
            log.error("stbproxy: error: %s", exc)

    def running(self) -> None:
        self._started = True
        super().running()


def settings_from_options(opts) -> Settings:
    """Validate every stb_ option; an OptionsError names the option at fault."""
    try:
        values = read_options(lambda name: getattr(opts, name))
        # A key for real RapidAPI calls made on behalf of /virtual: from the environment
        # only, so that it never shows among mitmproxy's (printable) options.
        return Settings(**values, rapidapi_key=os.environ.get("STBPROXY_RAPIDAPI_KEY") or None)
    except ConfigError as exc:
        setting = exc.setting or ""
        option = setting if setting.startswith("stb_") else f"stb_{setting}" if setting else "stb options"
        raise exceptions.OptionsError(f"{option}: {exc}") from exc


def check_proxy_auth(spec: str | None) -> None:
    """mitmproxy's ``proxyauth`` in its USER:PASS form takes empty parts (``:``, ``u:``, ``:p``)
    and then admits a client sending them: an open proxy. Refused (its other forms, "any",
    an htpasswd file, LDAP, are mitmproxy's to check)."""
    if not spec or spec == "any" or spec.startswith(("@", "ldap:", "ldaps:")) or ":" not in spec:
        return
    user, _, password = spec.partition(":")
    if not user or not password:
        raise exceptions.OptionsError("proxyauth: a user name and a password are needed, neither of them empty")


def addressed_to_proxy(flow: http.HTTPFlow) -> bool:
    """True for a request to the proxy's own listening address, in any spelling (127.1,
    2130706433, 0.0.0.0, localhost, [::1] on its port): served here, never forwarded."""
    return own_address(flow.request.host, flow.request.port, flow.client_conn.sockname) is not None
