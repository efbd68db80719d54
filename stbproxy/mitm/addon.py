"""The stbproxy addon: every proxied request through the engine (StbAddon), the same for
``mitmdump -s addons/stbproxy_addon.py`` (ScriptAddon), and the stb_ options it declares,
turned into Settings."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence  # mitmproxy's --set parses list options typed with this one only
from pathlib import Path
from typing import Awaitable, Callable, Optional

from mitmproxy import ctx, exceptions, http

from stbproxy.engine import DEFAULT_MAX_BODY, Answer
from stbproxy.errors import ConfigError, StbError
from stbproxy.front.destinations import own_address
from stbproxy.front.guard import HEAD_MEMO_MAX, Guard, Refusal, loop_message
from stbproxy.mcp.endpoints import local_target, to_server
from stbproxy.front.limits import DEFAULT_HEAD_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, \
    DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_HEADERS, DEFAULT_MAX_REQUEST_BODY, url_problem
from stbproxy.mitm.connections import ConnectionWatch, Watched
from stbproxy.mitm.h2_guard import cancelled_on_reset
from stbproxy.mitm.relay import Relay
from stbproxy.mitm.streaming import LANE, STREAM, chunked_head
from stbproxy.mitm.flows import Prebuilt, error_response, header_items, json_response, request_from_flow, response_to_mitm
from stbproxy.models import Request, Source
from stbproxy.recent import Recent
from stbproxy.redact import failure_text
from stbproxy.runtime import Runtime
from stbproxy.forensics.naming import FORK_HEADER, TRIAL_HEADER, completed, scoped, session_spec
from stbproxy.front.views import SHARED, view_for, view_mode
from stbproxy.sessions import SESSION_HEADER, naming_text, proxy_user
from stbproxy.store.shared_url import shared_url_from_env
from stbproxy.settings import Settings, parse_mode, parse_temperature, parse_timeout
from stbproxy.stb.validity import parse_keep_status
from stbproxy.stb.virtual_api import VirtualReply, may_be_virtual_call, own_virtual_path, virtual_headers
from stbproxy.store.embedded import default_store_path
from stbproxy.upstream import DEFAULT_MAX_UPSTREAM_BODY

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
        loader.add_option("stb_mode", str, "virtual", "How to answer: virtual (store, else upstream, else simulator), record (always upstream, store it), replay (store only) or verify (always upstream, compared with the stored answer, which is served).")
        loader.add_option("stb_store", str, "", "Store directory (default: $STBPROXY_STORE or ./.stbproxy/store).")
        loader.add_option("stb_passthrough", Sequence[str], [], "Host globs always forwarded and never answered from the store (still logged, redacted).")
        loader.add_option("stb_secret_fields", Sequence[str], [], "Extra query/body field names that are secret: redacted and never part of a key.")
        loader.add_option("stb_secret_headers", Sequence[str], [], "Extra header names that are secret: redacted and never stored.")
        loader.add_option("stb_volatile_fields", Sequence[str], [], "Query/body field names left out of keys (timestamps, nonces).")
        loader.add_option("stb_not_secret_fields", Sequence[str], [], "Default secret query/body field names that are not secret here (kept and keyed).")
        loader.add_option("stb_not_secret_headers", Sequence[str], [], "Default secret header names that are not secret here (kept).")
        loader.add_option("stb_max_body", int, DEFAULT_MAX_BODY, "Bodies larger than this many bytes are forwarded but not stored.")
        loader.add_option("stb_upstream_timeout", str, "30", "Seconds to wait for the real API.")
        loader.add_option("stb_upstream_ca", Optional[str], None, "A CA bundle to trust for upstream TLS, besides the system's.")
        loader.add_option("stb_upstream_insecure", bool, False, "Do not verify upstream TLS certificates.")
        loader.add_option("stb_upstream_proxy", Optional[str], None, "An outbound proxy URL for real API calls.")
        loader.add_option("stb_session", Optional[str], None, "Session for requests that name none (default: one per run, serve-<time>).")
        loader.add_option("stb_cassette", Optional[str], None, "Replay this vcrpy cassette instead of the store (mode replay).")
        loader.add_option("stb_ordered", bool, False, "The n-th identical request gets the n-th recorded answer: of the cassette, or (store) of the session of the same name.")
        loader.add_option("stb_fork", Optional[str], None, "SESSION@K: every other session starts as a fork of that recorded session, its first K calls answered from it in order.")
        loader.add_option("stb_update", bool, False, "Mode verify: a real answer that changed replaces the stored one (the old kept as history).")
        loader.add_option("stb_drift_ignore", Sequence[str], [], "Mode verify: what differs on every call, e.g. path:*/etag, value:REGEX, '@api.example.com path:/meta/*'.")
        loader.add_option("stb_drift_defaults", bool, True, "Mode verify: ignore the usual timestamp and request-id members too.")
        loader.add_option("stb_report", Optional[str], None, "Cassette replay: write a JSON playback report here at shutdown.")
        loader.add_option("stb_allow_empty", bool, False, "Replay: start even when the store does not exist or holds no entries (every request a miss).")
        loader.add_option("stb_validity", str, "auto", "Which real answers are valid: auto (stb for /virtual and catalog-routed calls, strict for other HTTP), stb (StableToolBench's check_result) or strict (HTTP status first), or schema (auto, and an OpenAPI operation's answer that breaks its documented schema is invalid).")
        loader.add_option("stb_keep_status", Sequence[str], [], "4xx statuses (e.g. 404,410) whose real answers are kept as real, stored with origin upstream and served, where virtual mode would replace them.")
        loader.add_option("stb_refresh_simulated", bool, False, "Virtual mode: ask the real API again for stored simulated answers; a valid real answer replaces them.")
        loader.add_option("stb_faults", Sequence[str], [], "Fault injection rules, e.g. down=0.2 or status=503,p=0.1,tool=weather*.")
        loader.add_option("stb_fault_seed", int, 0, "Seed for fault decisions: the same seed fails the same tools and requests.")
        loader.add_option("stb_catalog", Optional[str], None, "Catalog file (default: catalog.json in the store's folder, if present).")
        loader.add_option("stb_views", str, "auto", "Views of the store: shared (one for all), user (one per proxyauth user), credential (one per user and per credential a request carries), auto (user behind proxyauth, else shared).")
        loader.add_option("stb_keys", str, "exact", "How StableToolBench calls are keyed: exact (as StableToolBench's server looks them up: the arguments' text, order and types) or canonical (arguments compared as text, in any order).")
        loader.add_option("stb_toolbench_url", Optional[str], None, "A ToolBench-style server for real /virtual calls.")
        loader.add_option("stb_mcp", Sequence[str], [], "NAME=URL: an MCP server answered at this proxy's own /mcp/NAME (for clients that ignore proxy variables).")
        loader.add_option("stb_simulator", str, "auto", "auto, llm, mirrorapi, schema or off (auto: llm when an LLM is configured, else schema).")
        loader.add_option("stb_sim_model", Optional[str], None, "The simulator's model name.")
        loader.add_option("stb_sim_temperature", str, "", "The simulator's sampling temperature (empty: 0, or 0.1 for mirrorapi).")
        loader.add_option("stb_sim_max_tokens", Optional[int], None, "Most tokens per simulated answer.")
        loader.add_option("stb_sim_seed", Optional[int], None, "Seed passed to the simulator's LLM.")
        loader.add_option("stb_sim_concurrency", int, 16, "Most simulator LLM calls in flight at once.")
        loader.add_option("stb_dir", Optional[str], None, "A StableToolBench checkout: the mirrorapi simulator's system prompt is read from it.")
        loader.add_option("stb_prompt", str, "plain", "With stb_dir: plain (SFT_SYSTEM) or cot (COT_SYSTEM).")
        loader.add_option("stb_sim_system_prompt", Optional[str], None, "A file holding the simulator model's system prompt.")
        loader.add_option("stb_sim_prompt", Optional[str], None, "A prompt template for the simulator model (docs/simulators.md).")
        loader.add_option("stb_mirrorapi_parse", str, "stb", "mirrorapi replies read as StableToolBench's server reads them, once (stb), or recovered over up to 3 attempts (recover).")
        loader.add_option("stb_mirrorapi_unknown", str, "fail", "mirrorapi for an API the catalog does not hold: HTTP 500 unasked, as StableToolBench's server (fail), or ask the model (prompt).")
        loader.add_option("stb_shared", Optional[str], None, "A shared store tier: redis://, rediss:// or redis+cluster:// URL (default: $STBPROXY_SHARED, or its older name $STBPROXY_SHARED_URL; never $REDIS_URL).")
        loader.add_option("stb_max_headers", int, DEFAULT_MAX_HEADERS, "Requests with more header fields are answered 431.")
        loader.add_option("stb_max_header_bytes", int, DEFAULT_MAX_HEADER_BYTES, "Requests whose header fields take more bytes are answered 431.")
        loader.add_option("stb_max_request_body", int, DEFAULT_MAX_REQUEST_BODY, "Requests with a larger body (bytes) are answered 413 before it is read (stbproxy serve; under mitmdump set body_size_limit).")
        loader.add_option("stb_max_upstream_body", int, DEFAULT_MAX_UPSTREAM_BODY, "A real answer larger than this (bytes, on the wire or decoded) is read no further and answered 502, never stored.")
        loader.add_option("stb_head_timeout", str, str(DEFAULT_HEAD_TIMEOUT), "Seconds from a request's first byte to the end of its head; slower connections are closed (stbproxy serve).")
        loader.add_option("stb_idle_timeout", str, str(DEFAULT_IDLE_TIMEOUT), "Seconds a connection may wait for its next request before it is closed (stbproxy serve).")
        loader.add_option("stb_max_connections", int, DEFAULT_MAX_CONNECTIONS, "Most open client connections per process; more are answered 503 and closed (stbproxy serve).")
        loader.add_option("stb_allow_hosts", Sequence[str], [], "Destination host globs always allowed (they win over stb_deny_hosts and the private-address rule).")
        loader.add_option("stb_deny_hosts", Sequence[str], [], "Destination host globs refused with 403.")

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
        wrong = flow.response is not None and flow.response.status_code == 407 and "proxy-authorization" in request.headers
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
        request = request_from_flow(flow, headers)
        try:
            if may_be_virtual_call(request) and await self.proxied_virtual(flow, request, session):
                return
            answer = await self.open_runtime().engine.handle(request, session)
        except Exception as exc:  # one bad request must never take the proxy down
            log.error("stbproxy failed on %s", failure_text(request, exc, self.settings.key_rules()))
            flow.response = error_response(502, "stbproxy internal error (see the proxy's log)")
            return
        if answer.source is Source.CACHE and answer.stream is None:  # (a stored MCP answer may play as it goes)
            flow.response = self.prebuilt.response(answer.key, answer.response,
                                                   lambda: response_to_mitm(answer.response))
        else:
            flow.response = await self.answered(flow, answer)
        flow.metadata["stb_source"] = answer.source.value
        flow.metadata["stb_session"] = session
        flow.metadata["stb_key"] = answer.key

    def response(self, flow: http.HTTPFlow) -> None:
        watched = self.watched(flow.client_conn)
        if watched is not None:
            watched.answered(time.monotonic())
        # An answer to HEAD has the headers of a GET's and no body (a stored or simulated answer
        # has one): a body would be read as the start of the next answer on the connection.
        if flow.request.method == "HEAD" and flow.response is not None and flow.response.raw_content:
            flow.response.raw_content = b""

    async def proxied_virtual(self, flow: http.HTTPFlow, request: Request, session: str) -> bool:
        """Answer a /virtual call addressed to another server; False: it is plain HTTP."""
        try:
            reply = await self.open_runtime().virtual.handle_proxied(request, session)
        except Exception as exc:  # never a 500 for one bad call
            log.error("stbproxy failed on a /virtual call: %s", failure_text(request, exc, self.settings.key_rules()))
            reply = VirtualReply(200, {"error": "stbproxy internal error (see the proxy's log)", "response": ""},
                                 "error")
        if reply is None:
            return False
        flow.response = self.virtual_response(reply)
        flow.metadata["stb_source"] = reply.source
        flow.metadata["stb_session"] = session
        return True

    def virtual_response(self, reply: VirtualReply) -> http.Response:
        def build() -> http.Response:
            return http.Response.make(reply.status, reply.body(), virtual_headers(reply))

        if reply.hit_key is None:
            return build()
        return self.prebuilt.response("virtual " + reply.hit_key, reply, build)

    async def own_endpoint(self, flow: http.HTTPFlow) -> http.Response:
        """A request to the proxy's own address: /virtual, else a pointer to usage (404), or a
        loop error (508) when it names the proxy in a way only a relayed request does.

        Never forwarded: that would send the proxy a request to itself, forever.
        """
        is_virtual, named_session = own_virtual_path(flow.request.path)
        if is_virtual:
            if flow.request.method != "POST":
                return json_response(405, {"error": "/virtual takes POST with a JSON body", "response": ""}, "error")
            if named_session:
                headers = self.header_facts(flow)[0]
                session = self.in_scope(flow, completed(named_session, self.open_runtime().session), headers)
            else:
                session, headers = self.session_for(flow)
            try:
                reply = await self.open_runtime().virtual.handle(flow.request.raw_content or b"", session,
                                                                 headers=headers)
            except Exception as exc:  # never a 500 for one bad call
                request = request_from_flow(flow)
                log.error("stbproxy /virtual failed: %s", failure_text(request, exc, self.settings.key_rules()))
                return json_response(200, {"error": "stbproxy internal error (see the proxy's log)", "response": ""},
                                     "error")
            flow.metadata["stb_source"] = reply.source
            return self.virtual_response(reply)
        mcp = local_target(flow.request.path)
        if mcp is not None:
            return await self.local_mcp(flow, *mcp)
        if own_address(flow.request.host, flow.request.port, flow.client_conn.sockname) == "other":
            # Only a request relayed to the proxy names it so: it would loop back here.
            return error_response(508, loop_message(flow.request.method, flow.request.host, flow.request.port))
        return error_response(404, f"stbproxy: no endpoint {flow.request.method} {flow.request.path}; use this "
                                   "address as HTTP_PROXY / HTTPS_PROXY, or POST StableToolBench calls to /virtual")

    async def local_mcp(self, flow: http.HTTPFlow, name: str, named_session: str | None) -> http.Response:
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
            log.error("stbproxy failed on %s", failure_text(request, exc, self.settings.key_rules()))
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
        if flow.metadata.get(LANE):
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
        if flow.metadata.get(RELAYED):
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

    def checked(name: str, parse: Callable):
        try:
            return parse(getattr(opts, name))
        except ConfigError as exc:
            raise exceptions.OptionsError(f"{name}: {exc}") from exc

    if opts.stb_max_body < 0:
        raise exceptions.OptionsError("stb_max_body: must be 0 or more bytes")
    for name in ("stb_upstream_ca", "stb_catalog", "stb_cassette"):
        value = getattr(opts, name)
        if value and not Path(value).is_file():
            raise exceptions.OptionsError(f"{name}: no such file: {value}")
    values = dict(
        store=Path(opts.stb_store) if opts.stb_store else default_store_path(),
        mode=checked("stb_mode", parse_mode),
        passthrough=tuple(opts.stb_passthrough),
        secret_fields=tuple(opts.stb_secret_fields),
        secret_headers=tuple(opts.stb_secret_headers),
        volatile_fields=tuple(opts.stb_volatile_fields),
        not_secret_fields=tuple(opts.stb_not_secret_fields),
        not_secret_headers=tuple(opts.stb_not_secret_headers),
        max_body_bytes=opts.stb_max_body,
        upstream_timeout=checked("stb_upstream_timeout", parse_timeout),
        upstream_ca=opts.stb_upstream_ca,
        upstream_insecure=opts.stb_upstream_insecure,
        upstream_proxy=opts.stb_upstream_proxy,
        validity=opts.stb_validity,
        keep_status=checked("stb_keep_status", parse_keep_status),
        stb_keys=opts.stb_keys,
        views=opts.stb_views,
        refresh_simulated=opts.stb_refresh_simulated,
        faults=tuple(opts.stb_faults),
        fault_seed=opts.stb_fault_seed,
        catalog=Path(opts.stb_catalog) if opts.stb_catalog else None,
        toolbench_url=opts.stb_toolbench_url,
        mcp=tuple(opts.stb_mcp),
        # A key for real RapidAPI calls made on behalf of /virtual: from the environment
        # only, so that it never shows among mitmproxy's (printable) options.
        rapidapi_key=os.environ.get("STBPROXY_RAPIDAPI_KEY") or None,
        session=opts.stb_session,
        cassette=Path(opts.stb_cassette) if opts.stb_cassette else None,
        ordered=opts.stb_ordered,
        fork=opts.stb_fork,
        update=opts.stb_update,
        drift_ignore=tuple(opts.stb_drift_ignore),
        drift_defaults=opts.stb_drift_defaults,
        report=Path(opts.stb_report) if opts.stb_report else None,
        allow_empty=opts.stb_allow_empty,
        simulator=opts.stb_simulator,
        sim_model=opts.stb_sim_model,
        sim_temperature=checked("stb_sim_temperature", parse_temperature) if opts.stb_sim_temperature else None,
        sim_max_tokens=opts.stb_sim_max_tokens,
        sim_seed=opts.stb_sim_seed,
        sim_concurrency=opts.stb_sim_concurrency,
        stb_dir=Path(opts.stb_dir) if opts.stb_dir else None,
        stb_prompt=opts.stb_prompt,
        sim_system_prompt=Path(opts.stb_sim_system_prompt) if opts.stb_sim_system_prompt else None,
        sim_prompt=Path(opts.stb_sim_prompt) if opts.stb_sim_prompt else None,
        mirrorapi_parse=opts.stb_mirrorapi_parse,
        mirrorapi_unknown=opts.stb_mirrorapi_unknown,
        shared=opts.stb_shared or shared_url_from_env(),
        max_headers=opts.stb_max_headers,
        max_header_bytes=opts.stb_max_header_bytes,
        max_request_body=opts.stb_max_request_body,
        max_upstream_body=opts.stb_max_upstream_body,
        head_timeout=checked("stb_head_timeout", parse_timeout),
        idle_timeout=checked("stb_idle_timeout", parse_timeout),
        max_connections=opts.stb_max_connections,
        allow_hosts=tuple(opts.stb_allow_hosts),
        deny_hosts=tuple(opts.stb_deny_hosts),
    )
    try:
        return Settings(**values)
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
