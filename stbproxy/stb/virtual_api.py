"""StableToolBench's ``/virtual`` calls: on the proxy's own address, and on their way
through the proxy to another server.

Request: ``{category, tool_name, api_name, tool_input, strip, toolbench_key}``.
Answer: as StableToolBench's server answers it, by default: HTTP 200 with the answer
object, member for member as it is stored; where that server fails with an HTTP status
(a StableToolBench server behind the proxy that failed, a MirrorAPI model that cannot be
asked), that status. A body that is not a /virtual request at all (not a JSON object, a
required field missing or of the wrong type) gets a 422 JSON error naming the field on
the proxy's own address, and is plain HTTP on its way elsewhere. A call is keyed as that
server looks it up (keys.stb_api_key), wherever it was addressed (traffic.seam.Call).

Real calls for a miss: a call addressed to another server goes to that server as the
client sent it, which is a StableToolBench server whose answer is the benchmark's answer
(kept as it came, never simulated over); one on the proxy's own address goes to
``--toolbench-url`` when set (re-packed as StableToolBench's server sends it), else to the
API's URL from the catalog (a RapidAPI URL only with a key), else nowhere: the simulator
answers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

from stbcore.toolbench_names import server_names
from stbproxy import jsonsafe, keys
from stbproxy.engine import Answer, Engine
from stbproxy.forensics.naming import session_spec
from stbproxy.keys import EXACT
from stbproxy.models import ApiRef, Headers, Request, Response, Source, header_value
from stbproxy.provenance import FAILURE_HEADER, FAULT_HEADER, ORIGIN_HEADER, SIMULATOR_HEADER, SOURCE_HEADER
from stbproxy.recent import Recent
from stbproxy.stb.api_requests import (
    VIRTUAL_HOST,
    api_request,
    is_rapidapi_url,
    stand_in_request,
    stored_request,
    toolbench_request,
)
from stbproxy.stb.bodies import VIRTUAL_STATUS, WHOLE_ANSWER, body_value
from stbproxy.stb.catalog import ApiDoc, Catalog, called_api_key, category_key, tool_key
from stbproxy.stb.traffic import DOC_REF, SENT_NAMES, SERVER_REPLY, keyed_back
from stbproxy.stb.traffic import NAME as STABLETOOLBENCH
from stbproxy.traffic.seam import Call

CHAT_WITH_USER = "chat_with_user"
TOOL_INPUT_ERROR = "Tool input parse error...\n"  # StableToolBench's answer to a tool_input that is not JSON
_TEXT_FIELDS = ("category", "tool_name", "api_name")
VIRTUAL_PATH = "/virtual"
SESSION_PREFIX = "/s/"  # /s/<name>/virtual names the session in StableToolBench's SERVICE_URL
TOOLBENCH_KEY = "toolbench_key"
MEMO_ENTRIES = 2048  # prepared calls of recent bodies, and replies of recent hits
MEMO_MAX_BODY = 4 * 1024


PROVENANCE_HEADERS = frozenset(h.lower() for h in (ORIGIN_HEADER, SIMULATOR_HEADER, FAULT_HEADER, FAILURE_HEADER))


@dataclass(frozen=True)
class VirtualReply:
    status: int
    document: dict
    source: str
    hit_key: str | None = field(default=None, compare=False)  # the store key of a cache hit's answer
    provenance: Headers = ()  # X-Stb-Origin and the like, as the engine's answer carried them
    raw: Response | None = None  # a server's own answer that is no answer object, passed on as it came

    def body(self) -> bytes:
        if self.raw is not None:
            return self.raw.body
        return json.dumps(self.document, ensure_ascii=False).encode("utf-8", "surrogatepass")


def error_reply(message: str, status: int = 200, source: str = "error") -> VirtualReply:
    return VirtualReply(status, {"error": message, "response": ""}, source)


@dataclass(frozen=True)
class VirtualRequest:
    category: str
    tool_name: str
    api_name: str
    args: dict[str, Any]
    toolbench_key: str = ""  # a secret: sent on to a ToolBench-style server, never stored


# A surrogate escape, or one encoded raw (json reads bytes with surrogatepass): only such
# bodies need the full check.
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _is_unicode(value: Any) -> bool:
    """Whether a parsed JSON value is free of lone surrogates (it encodes as UTF-8)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse(body: bytes) -> VirtualRequest | VirtualReply:
    """The request, or the reply that explains why it is not one."""
    try:
        raw = jsonsafe.loads(body)
    except jsonsafe.JsonTooDeep as exc:
        return error_reply(f"the request body is {exc}", 422)
    except (ValueError, UnicodeDecodeError) as exc:
        return error_reply(f"the request body is not JSON: {exc}", 422)
    if not isinstance(raw, dict):
        return error_reply("the request body must be a JSON object with category, tool_name, api_name "
                           "and tool_input", 422)
    for name in _TEXT_FIELDS:
        if name not in raw:
            return error_reply(f"field {name!r} is missing", 422)
        if not isinstance(raw[name], str):
            return error_reply(f"field {name!r} must be a string, not {type(raw[name]).__name__}", 422)
    tool_input = raw.get("tool_input", "")
    if isinstance(tool_input, str):
        try:
            args = jsonsafe.loads(tool_input) if tool_input else {}
        except jsonsafe.JsonTooDeep as exc:
            return error_reply(f"field 'tool_input' is {exc}", 422)
        except ValueError:
            # StableToolBench's server answers this, word for word: the agent sees it.
            return error_reply(TOOL_INPUT_ERROR)
    elif isinstance(tool_input, dict) or tool_input is None:
        args = tool_input or {}
    else:
        return error_reply(f"field 'tool_input' must be a JSON string or object, not {type(tool_input).__name__}", 422)
    if not isinstance(args, dict):
        return error_reply(f"tool_input must hold a JSON object of arguments, not {type(args).__name__}")
    if _SURROGATE_ESCAPE.search(body) and not (_is_unicode(raw) and _is_unicode(args)):
        return error_reply("the request holds a lone surrogate (a \\ud800-\\udfff escape without its pair), "
                           "which is not Unicode text and cannot be forwarded", 422)
    key = raw.get(TOOLBENCH_KEY)
    return VirtualRequest(raw["category"], raw["tool_name"], raw["api_name"], args,
                          key if isinstance(key, str) else "")


def own_virtual_path(path: str) -> tuple[bool, str | None]:
    """For a path on the proxy's own address: is it the /virtual endpoint, and which
    session does a ``/s/<name>/virtual`` prefix name (None: no prefix)?

    A prefix rather than a query parameter: ToolBench's client only waits without a
    timeout for a SERVICE_URL that ends in "virtual".
    """
    path = path.split("?", 1)[0].rstrip("/")
    if path == VIRTUAL_PATH:
        return True, None
    if path.startswith(SESSION_PREFIX) and path.endswith(VIRTUAL_PATH):
        name = path[len(SESSION_PREFIX):-len(VIRTUAL_PATH)]
        if name and "/" not in name:
            return True, session_spec(unquote(name))
    return False, None


def may_be_virtual_call(request: Request) -> bool:
    """A cheap first test for proxied traffic: a POST to a path ending in /virtual."""
    if request.method != "POST":
        return False
    path = request.url.split("?", 1)[0].rstrip("/")
    return path.endswith(VIRTUAL_PATH)


class VirtualApi:
    def __init__(self, engine: Engine, catalog: Catalog | None, *, toolbench_url: str | None = None,
                 rapidapi_key: str | None = None) -> None:
        self.engine = engine
        self.catalog = catalog
        self.toolbench_url = toolbench_url
        self.rapidapi_key = rapidapi_key
        # A call depends only on its body, its toolbench_key header and where misses go; the
        # reply to a stored answer only on that answer: repeated calls reuse both.
        self._prepared: Recent[Call | VirtualReply] = Recent(MEMO_ENTRIES)
        self._replies: Recent[tuple[Answer, VirtualReply]] = Recent(MEMO_ENTRIES)

    async def handle(self, body: bytes, session: str | None = None, *, headers: Headers = ()) -> VirtualReply:
        """A call POSTed to the proxy's own /virtual."""
        prepared = self._prepare(body, headers, self.toolbench_url)
        if isinstance(prepared, VirtualReply):
            return prepared
        return await self._answer(prepared, session)

    async def handle_proxied(self, request: Request, session: str | None = None) -> VirtualReply | None:
        """A request on its way to another server, answered as a /virtual call when it is
        one (a POST to a path ending in /virtual, with a /virtual body). That server is a
        StableToolBench server: what it answers is the benchmark's answer, so a miss is sent
        to it as the client sent it, and its answer kept as it came (SERVER_REPLY). None:
        plain HTTP, for the engine to handle."""
        if not may_be_virtual_call(request) or self.engine.is_passthrough(request.host):
            return None
        prepared = self._prepare(request.body, request.headers, request)
        if isinstance(prepared, VirtualReply):
            # 422: not a /virtual request at all; 200: a tool_input that is not JSON, which
            # StableToolBench's server answers without a call, as the proxy does.
            return prepared if prepared.status == 200 else None
        return await self._answer(prepared, session)

    def _prepare(self, body: bytes, headers: Headers, server: str | Request | None) -> Call | VirtualReply:
        """The call a /virtual body asks for, or the reply that needs no call (a body that is
        not a call, a chat with the user on the proxy's own address); memoized for small
        bodies. ``server``: where a miss goes (a ToolBench-style server's URL, or the
        request itself when it is addressed to a StableToolBench server)."""
        memo_key = (body, header_value(headers, TOOLBENCH_KEY), server) if len(body) <= MEMO_MAX_BODY else None
        prepared = self._prepared.get(memo_key) if memo_key is not None else None
        if prepared is None:
            parsed = parse(body)
            if isinstance(parsed, VirtualReply):
                prepared = parsed
            elif not isinstance(server, Request) and called_api_key(
                    parsed.api_name, parsed.tool_name, parsed.category) == CHAT_WITH_USER:
                prepared = VirtualReply(200, {"error": "", "response": "Chat with user."}, "chat")
            else:
                prepared = self.call_for(parsed, headers=headers, server=server)
            if memo_key is not None:
                self._prepared.put(memo_key, prepared)
        return prepared

    async def _answer(self, call: Call, session: str | None) -> VirtualReply:
        answer = await self.engine.answer(call, session)
        if answer.source is Source.ERROR and call.reply_format == SERVER_REPLY:
            # No answer from the server it was addressed to: the client learns so as it would
            # have without the proxy, from the proxy's 502, and no answer object is made up.
            return VirtualReply(answer.response.status, {}, answer.source.value, raw=answer.response)
        if answer.source is not Source.CACHE:
            return reply_from_answer(answer)
        known = self._replies.get(answer.key)
        if known is not None and known[0] is answer:  # the engine's very answer object: not stale
            return known[1]
        reply = reply_from_answer(answer)
        reply = replace(reply, hit_key=answer.key)
        self._replies.put(answer.key, (answer, reply))
        return reply

    def call_for(self, request: VirtualRequest, *, headers: Headers = (), server: str | Request | None = None) -> Call:
        """The call's key and where a miss goes: ``server`` (a ToolBench-style server's URL,
        or the client's request to a StableToolBench server), else the API's own URL."""
        rules = self.engine.config.rules
        doc = self.catalog.lookup(request.category, request.tool_name, request.api_name) if self.catalog else None
        facts: dict[str, Any] = {SENT_NAMES: {"category": request.category, "tool_name": request.tool_name,
                                              "api_name": request.api_name}}
        if rules.stb_keys == EXACT:  # the cache file and entry StableToolBench's server reads
            ref = ApiRef(*server_names(request.category, request.tool_name, request.api_name))
            key_args = request.args
            key = keys.exact_api_key(ref, keys.exact_arguments_text(key_args, rules))
            if doc is not None and doc.ref != ref:
                facts[DOC_REF] = doc.ref
        else:
            if doc is not None:
                ref, key_args = doc.ref, doc.key_args(request.args)
            else:  # unknown API: still keyed by its standardized names, so it caches
                ref = ApiRef(category_key(request.category), tool_key(request.tool_name, request.category),
                             called_api_key(request.api_name, request.tool_name, request.category))
                key_args = request.args
            key = keys.api_key(ref, key_args, rules)
        stored = stored_request(ref, doc, request.args)
        if stored.host != VIRTUAL_HOST and rules.stb_keys == EXACT and not keyed_back(self.catalog, stored, key, rules):
            stored = stand_in_request(ref, request.args)  # the arguments as they were, so that a cassette keys them so
        if isinstance(server, Request):
            return Call(key, stored, server, ref, key_args, stored.host, SERVER_REPLY, kind=STABLETOOLBENCH,
                        may_simulate=False, facts=facts)
        if server:
            secret = request.toolbench_key or header_value(headers, TOOLBENCH_KEY) or ""
            upstream = toolbench_request(server, request.category, request.tool_name, request.api_name,
                                         request.args, secret)
            return Call(key, stored, upstream, ref, key_args, stored.host, "virtual", kind=STABLETOOLBENCH,
                        facts=facts)
        real, why_not = self._direct_call(doc, request.args)
        return Call(key, stored, real, ref, key_args, stored.host, no_upstream=why_not, kind=STABLETOOLBENCH,
                    facts=facts)

    def _direct_call(self, doc: ApiDoc | None, args: Mapping[str, Any]) -> tuple[Request | None, str]:
        """The API's own URL from the catalog, and why not when there is none to call."""
        if doc is None:
            return None, "the catalog does not know this API" if self.catalog is not None else "no catalog is loaded"
        if not doc.url:
            return None, "the catalog has no URL for this API"
        if is_rapidapi_url(doc.url) and not self.rapidapi_key:
            return None, ("no RapidAPI key (STBPROXY_RAPIDAPI_KEY) and no ToolBench server (--toolbench-url): "
                          "RapidAPI is not called without a key")
        secret = (("X-RapidAPI-Key", self.rapidapi_key),) if self.rapidapi_key else ()
        real = api_request(doc, args, secret)
        return real, "" if real is not None else f"the catalog's URL for this API is not usable: {doc.url}"

    def real_calls(self) -> str:
        """Where misses on the proxy's own /virtual really go, for the ready line: as
        _direct_call decides it for each API of the catalog."""
        if self.toolbench_url:
            return f"to a ToolBench server at {_without_userinfo(self.toolbench_url)}"
        if self.catalog is None:
            return "none (no catalog)"
        called = [doc for doc in self.catalog if doc.host]  # an API without a URL: the simulator answers
        rapidapi = sum(1 for doc in called if is_rapidapi_url(doc.url))
        if not self.rapidapi_key:  # never called without a key (_direct_call)
            called = [doc for doc in called if not is_rapidapi_url(doc.url)]
        skipped = "on RapidAPI, skipped without $STBPROXY_RAPIDAPI_KEY"
        if not called:
            return f"none ({rapidapi} {skipped})" if rapidapi else "none (the catalog lists no URL)"
        apis, hosts = len(called), len({doc.host for doc in called})
        counts = f"{apis} API{'s' * (apis != 1)} on {hosts} host{'s' * (hosts != 1)}"
        if rapidapi:
            counts += (f"; {rapidapi} of them on RapidAPI, with $STBPROXY_RAPIDAPI_KEY" if self.rapidapi_key
                       else f"; {rapidapi} more {skipped}")
        return f"to the catalog's URLs ({counts})"


def _without_userinfo(url: str) -> str:
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))
    except ValueError:
        return "(unparseable URL)"


def reply_from_answer(answer: Answer) -> VirtualReply:
    """Turn the engine's HTTP-shaped answer back into a StableToolBench answer object."""
    response = answer.response
    source = answer.source.value
    marks = tuple((k, v) for k, v in response.headers if k.lower() in PROVENANCE_HEADERS)
    meta = answer.meta or {}
    if VIRTUAL_STATUS in meta:  # the endpoint's own HTTP answer, not an answer object
        return VirtualReply(int(meta[VIRTUAL_STATUS]), {}, source, provenance=marks, raw=response)
    if isinstance(meta.get(WHOLE_ANSWER), dict):  # an answer object kept member for member
        return VirtualReply(200, dict(meta[WHOLE_ANSWER]), source, provenance=marks)
    value = body_value(response.body, response.header("content-type"))
    if answer.source is Source.MISS and isinstance(value, Mapping):  # replay: say why, and what was near
        return VirtualReply(200, {"error": value.get("error", "no stored answer"), "response": "",
                                  "closest": value.get("closest")}, source, provenance=marks)
    if answer.source in (Source.SIMULATED_ERROR, Source.UNAVAILABLE, Source.INJECTED, Source.ERROR) or (
        source == Source.UPSTREAM.value and response.status >= 400
    ):
        if isinstance(value, Mapping) and "error" in value and "response" in value:
            return VirtualReply(200, dict(value), source, provenance=marks)
        return VirtualReply(200, {"error": f"HTTP {response.status}", "response": value}, source, provenance=marks)
    error = meta.get("error", "")
    if error and isinstance(value, Mapping) and value.keys() == {"error", "response"} and value["error"] == error:
        return VirtualReply(200, dict(value), source, provenance=marks)  # an answer that is only an error
    if response.status >= 400 and not error:
        error = f"HTTP {response.status}"
    return VirtualReply(200, {"error": error, "response": value}, source, provenance=marks)


def virtual_headers(reply: VirtualReply) -> dict[str, str]:
    """The reply's headers: its source, and its origin (the source itself for a reply the
    proxy made without the engine: a bad request, a chat with the user)."""
    content_type = (reply.raw.header("content-type") if reply.raw is not None else None) or "application/json"
    return {"Content-Type": content_type, SOURCE_HEADER: reply.source,
            ORIGIN_HEADER: reply.source, **dict(reply.provenance)}
