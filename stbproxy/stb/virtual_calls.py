"""StableToolBench's ``/virtual`` calls on the wire, and where a proxy's own /virtual sends its
misses. Pure.

Request: ``{category, tool_name, api_name, tool_input, strip, toolbench_key}``, POSTed to
``/virtual`` (or ``/s/<session>/virtual``) on the proxy's own address, or to a
StableToolBench server's /virtual on its way through the proxy. ``parse`` reads the body,
or gives the reply that explains why it is not a call: a 422 naming the field (a body that
is not a JSON object, a required field missing or of the wrong type), or StableToolBench's
own words for a ``tool_input`` that is not JSON (HTTP 200).

Answer: as StableToolBench's server answers it, by default: HTTP 200 with the answer object,
member for member as it is stored; where that server fails with an HTTP status (a
StableToolBench server behind the proxy that failed, a MirrorAPI model that cannot be
asked), that status. ``reply_from_answer`` makes it from the engine's HTTP-shaped answer,
``reply_response`` writes it with the X-Stb-* headers.

Which request is a /virtual call, how it is keyed and answered, is the kind's
(``traffic.py``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

from stbproxy import jsonsafe
from stbproxy.forensics.naming import session_spec
from stbproxy.models import Headers, Request, Response, Source
from stbproxy.provenance import FAILURE_HEADER, FAULT_HEADER, ORIGIN_HEADER, SIMULATOR_HEADER, SOURCE_HEADER
from stbproxy.stb.api_requests import api_request, is_rapidapi_url
from stbproxy.stb.bodies import VIRTUAL_STATUS, WHOLE_ANSWER, body_value
from stbproxy.stb.catalog import ApiDoc, Catalog

CHAT_WITH_USER = "chat_with_user"
TOOL_INPUT_ERROR = "Tool input parse error...\n"  # StableToolBench's answer to a tool_input that is not JSON
_TEXT_FIELDS = ("category", "tool_name", "api_name")
VIRTUAL_PATH = "/virtual"
SESSION_PREFIX = "/s/"  # /s/<name>/virtual names the session in StableToolBench's SERVICE_URL
TOOLBENCH_KEY = "toolbench_key"
INTERNAL_ERROR = "stbproxy internal error (see the proxy's log)"


PROVENANCE_HEADERS = frozenset(h.lower() for h in (ORIGIN_HEADER, SIMULATOR_HEADER, FAULT_HEADER, FAILURE_HEADER))


@dataclass(frozen=True)
class VirtualReply:
    status: int
    document: dict[str, Any]
    source: str
    provenance: Headers = ()  # X-Stb-Origin and the like, as the engine's answer carried them
    raw: Response | None = None  # a server's own answer that is no answer object, passed on as it came

    def body(self) -> bytes:
        if self.raw is not None:
            return self.raw.body
        return json.dumps(self.document, ensure_ascii=False).encode("utf-8", "surrogatepass")


def error_reply(message: str, status: int = 200, source: str = "error") -> VirtualReply:
    return VirtualReply(status, {"error": message, "response": ""}, source)


CHAT_REPLY = VirtualReply(200, {"error": "", "response": "Chat with user."}, Source.CHAT.value)
NOT_POST = error_reply("/virtual takes POST with a JSON body", 405)


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


def reply_from_answer(response: Response, source: Source, meta: Mapping[str, Any] | None) -> VirtualReply:
    """The engine's HTTP-shaped answer (its response, how it was made and the facts kept
    beside it) turned back into a StableToolBench answer object."""
    name = source.value
    marks = tuple((k, v) for k, v in response.headers if k.lower() in PROVENANCE_HEADERS)
    meta = meta or {}
    if VIRTUAL_STATUS in meta:  # the endpoint's own HTTP answer, not an answer object
        return VirtualReply(int(meta[VIRTUAL_STATUS]), {}, name, provenance=marks, raw=response)
    if isinstance(meta.get(WHOLE_ANSWER), dict):  # an answer object kept member for member
        return VirtualReply(200, dict(meta[WHOLE_ANSWER]), name, provenance=marks)
    value = body_value(response.body, response.header("content-type"))
    if source is Source.MISS and isinstance(value, Mapping):  # replay: say why, and what was near
        return VirtualReply(200, {"error": value.get("error", "no stored answer"), "response": "",
                                  "closest": value.get("closest")}, name, provenance=marks)
    if source in (Source.SIMULATED_ERROR, Source.UNAVAILABLE, Source.INJECTED, Source.ERROR) or (
        source is Source.UPSTREAM and response.status >= 400
    ):
        if isinstance(value, Mapping) and "error" in value and "response" in value:
            return VirtualReply(200, dict(value), name, provenance=marks)
        return VirtualReply(200, {"error": f"HTTP {response.status}", "response": value}, name, provenance=marks)
    error = meta.get("error", "")
    if error and isinstance(value, Mapping) and value.keys() == {"error", "response"} and value["error"] == error:
        return VirtualReply(200, dict(value), name, provenance=marks)  # an answer that is only an error
    if response.status >= 400 and not error:
        error = f"HTTP {response.status}"
    return VirtualReply(200, {"error": error, "response": value}, name, provenance=marks)


def virtual_headers(reply: VirtualReply) -> dict[str, str]:
    """The reply's headers: its source, and its origin (the source itself for a reply the
    proxy made without the engine: a bad request, a chat with the user)."""
    content_type = (reply.raw.header("content-type") if reply.raw is not None else None) or "application/json"
    return {"Content-Type": content_type, SOURCE_HEADER: reply.source,
            ORIGIN_HEADER: reply.source, **dict(reply.provenance)}


def reply_response(reply: VirtualReply) -> Response:
    """The reply as the HTTP answer a /virtual client gets: its status, the answer object
    (or a server's own answer) as the body, and virtual_headers."""
    headers = tuple((name, _as_written(value)) for name, value in virtual_headers(reply).items())
    return Response(reply.status, headers, reply.body())


def _as_written(value: str) -> str:
    """A header value as the endpoint has always written it, in UTF-8 (the front end writes
    header text as Latin-1): only a server's own Content-Type can be other than ASCII."""
    return value if value.isascii() else value.encode("utf-8", "surrogateescape").decode("latin-1")


@dataclass(frozen=True)
class VirtualUpstream:
    """Where misses of calls on a proxy's own /virtual really go: a ToolBench-style server
    (``--toolbench-url``), where they are re-packed as StableToolBench's server sends them;
    else the API's URL from the catalog (a RapidAPI URL only with a key, from
    ``$STBPROXY_RAPIDAPI_KEY``); else nowhere, and the simulator answers. (A /virtual call
    addressed to another server goes to that server as the client sent it.)"""

    toolbench_url: str | None = None
    rapidapi_key: str | None = None

    def direct_call(self, catalog: Catalog | None, doc: ApiDoc | None,
                    args: Mapping[str, Any]) -> tuple[Request | None, str]:
        """The API's own URL from the catalog, and why not when there is none to call."""
        if doc is None:
            return None, "the catalog does not know this API" if catalog is not None else "no catalog is loaded"
        if not doc.url:
            return None, "the catalog has no URL for this API"
        if is_rapidapi_url(doc.url) and not self.rapidapi_key:
            return None, ("no RapidAPI key (STBPROXY_RAPIDAPI_KEY) and no ToolBench server (--toolbench-url): "
                          "RapidAPI is not called without a key")
        secret = (("X-RapidAPI-Key", self.rapidapi_key),) if self.rapidapi_key else ()
        real = api_request(doc, args, secret)
        return real, "" if real is not None else f"the catalog's URL for this API is not usable: {doc.url}"

    def real_calls(self, catalog: Catalog | None) -> str:
        """Where misses on the proxy's own /virtual really go, for the ready line: as
        direct_call decides it for each API of the catalog."""
        if self.toolbench_url:
            return f"to a ToolBench server at {_without_userinfo(self.toolbench_url)}"
        if catalog is None:
            return "none (no catalog)"
        called = [doc for doc in catalog if doc.host]  # an API without a URL: the simulator answers
        # (an API with a host has a URL)
        rapidapi = sum(1 for doc in called if is_rapidapi_url(doc.url or ""))
        if not self.rapidapi_key:  # never called without a key (direct_call)
            called = [doc for doc in called if not is_rapidapi_url(doc.url or "")]
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
