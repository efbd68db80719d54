"""MCP's rules as a proxy needs them: which messages are MCP's, which era a request
belongs to, which methods are kept and how they are keyed. Pure.

Two eras of the protocol reach a proxy over Streamable HTTP:

- the session era (2025-03-26 to 2025-11-25): ``initialize`` / ``notifications/initialized``,
  a session id the server mints (``Mcp-Session-Id``), the negotiated version in the
  ``MCP-Protocol-Version`` header (2025-03-26 when it is missing);
- the stateless era (2026-07-28): no handshake; every request carries its version and the
  client's capabilities in ``params._meta``, and ``Mcp-Method`` / ``Mcp-Name`` headers that
  must say what the body says.

A call's key is the server (its URL, or a stdio command line), the method, the era and
version, and the params that choose the answer: never the JSON-RPC id, never ``_meta``
(progress tokens, trace context, client info), never a client's own name and version.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote, unquote, urlsplit

from stbproxy.models import Headers, Request
from stbproxy.recent import Recent

SESSION_ERA, STATELESS_ERA = "session", "stateless"
DEFAULT_SESSION_VERSION = "2025-03-26"  # what a server assumes when the header is missing
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"

STDIO_SCHEME = "stdio://"  # the URL stdio_url gives a stdio server
SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"

# Answers kept and served again. Everything else (notifications, ping, the client's answers
# to a server, subscriptions) is passed on and never kept.
CACHED_METHODS = frozenset({
    "initialize", "server/discover", "tools/list", "tools/call", "resources/list", "resources/read",
    "resources/templates/list", "prompts/list", "prompts/get", "completion/complete",
})
# The methods whose params name one thing (Mcp-Name in the stateless era).
NAMED_BY = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
# A retry that carries the client's answers to a server's question (MRTR, 2026-07-28):
# it continues an exchange, so it is passed on, never served from or written to the store.
INPUT_RESPONSE_FIELDS = ("inputResponses", "requestState")
LISTEN = "subscriptions/listen"  # the stateless era's request whose answer is a stream of changes
# Methods that belong to MCP only: a JSON-RPC body with one of these is an MCP message
# whatever its URL (notifications/* too).
MCP_METHODS = CACHED_METHODS | frozenset({
    "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", LISTEN,
    "tasks/get", "tasks/list", "tasks/cancel", "tasks/result", "tasks/update",
})


def is_mcp_method(method: str) -> bool:
    return method in MCP_METHODS or method.startswith("notifications/")


@dataclass(frozen=True, slots=True)
class Era:
    name: str  # SESSION_ERA or STATELESS_ERA
    version: str


def lowered(headers: Headers) -> dict[str, str]:
    """A request's headers by lower-case name (the first value of each), read once."""
    out: dict[str, str] = {}
    for name, value in headers:
        out.setdefault(name.lower(), value)
    return out


def era_of(method: str, params: Any, headers: Mapping[str, str]) -> Era:
    """The era and protocol version a request speaks (``headers``: by lower-case name)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get(META_VERSION), str):
        return Era(STATELESS_ERA, meta[META_VERSION])
    if method == "initialize" and isinstance(params, dict) and isinstance(params.get("protocolVersion"), str):
        return Era(SESSION_ERA, params["protocolVersion"])
    return Era(SESSION_ERA, headers.get(VERSION_HEADER.lower()) or DEFAULT_SESSION_VERSION)


def carries_input_responses(params: Any) -> bool:
    return isinstance(params, dict) and any(name in params for name in INPUT_RESPONSE_FIELDS)


def named(method: str, params: Any) -> str | None:
    """What the request names (a tool, a prompt, a resource URI), where its method names one."""
    field = NAMED_BY.get(method)
    value = params.get(field) if field and isinstance(params, dict) else None
    return value if isinstance(value, str) else None


def header_mismatch(method: str, params: Any, headers: Mapping[str, str], era: Era) -> str | None:
    """Why a stateless-era request's headers (by lower-case name) do not say what its body
    says, or None."""
    if era.name != STATELESS_ERA:
        return None
    sent_method = headers.get(METHOD_HEADER.lower())
    if sent_method is not None and sent_method != method:
        return f"the {METHOD_HEADER} header says {sent_method!r} but the body's method is {method!r}"
    name = named(method, params)
    sent_name = headers.get(NAME_HEADER.lower())
    if sent_name is not None and name is not None and decoded_header(sent_name) != name:
        return f"the {NAME_HEADER} header says {decoded_header(sent_name)!r} but the body names {name!r}"
    version = headers.get(VERSION_HEADER.lower())
    if version is not None and version != era.version:
        return f"the {VERSION_HEADER} header says {version!r} but _meta says {era.version!r}"
    return None


def decoded_header(value: str) -> str:
    """A header value as sent, or decoded from the ``=?base64?...?=`` form used for values
    that are not plain visible ASCII."""
    value = value.strip()
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return value
    return value


def keyed_params(method: str, params: Any) -> Any:
    """The params that choose the answer: without ``_meta``, without a null or empty
    cursor, and for ``initialize`` without the client's name and version."""
    if not isinstance(params, dict):
        return params if params is not None else {}
    kept = {name: value for name, value in params.items() if name != "_meta"}
    if kept.get("cursor") in (None, ""):
        kept.pop("cursor", None)
    if method == "initialize":
        kept.pop("clientInfo", None)
    return kept


def server_id(url: str) -> str:
    """A server's identity: scheme, host, port (when not the default) and path of its URL
    (a stdio server's URL, stdio_url's, as it is)."""
    known = _SERVER_IDS.get(url)
    if known is None:
        known = _SERVER_IDS.put(url, _server_id(url))
    return known


_SERVER_IDS: Recent[str] = Recent(256)  # a client calls a few servers, many times each


def _server_id(url: str) -> str:
    if url.startswith(STDIO_SCHEME):
        return url
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(parts.scheme)
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port in (None, default) else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{parts.path or '/'}"


def stdio_url(argv: list[str]) -> str:
    """The URL that stands for a stdio server: its program's name and a digest of its whole
    command line (which may hold secrets, and so is never written as it is)."""
    program = quote(argv[0].rsplit("/", 1)[-1].lower(), safe="") or "server"
    digest = hashlib.sha256(json.dumps(argv, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{STDIO_SCHEME}{program}/{digest[:16]}"


def key(server: str, method: str, params: Any, era: Era, auth: str = "") -> str:
    """``mcp/<where>/<server digest>/<method>/<name>/<digest>``: readable prefixes (every
    tools/call of a tool, every answer of a server) over a digest of what chooses the answer;
    ``<name>`` is empty for a method that names nothing. ``auth``: a digest of the
    credentials a call carried (their answers are theirs alone)."""
    material = json.dumps({"era": era.name, "version": era.version, "params": keyed_params(method, params),
                           "auth": auth}, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    digest = hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return key_prefix(server, method, named(method, params) or "") + digest


def key_prefix(server: str, method: str, name: str | None = None) -> str:
    """The prefix of every key of ``method`` on ``server`` (naming ``name``, when given)."""
    server_digest = hashlib.sha256(server.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    head = f"mcp/{_where(server)}/{server_digest}/{method}/"
    return head if name is None else f"{head}{quote(name, safe='')[:100]}/"


def _where(server: str) -> str:
    if server.startswith(STDIO_SCHEME):
        return "stdio"
    return quote(urlsplit(server).netloc.lower(), safe=":[]") or "-"


def server_label(server: str) -> str:
    """How a server is shown: its host and port, or ``stdio:<program>``."""
    if server.startswith(STDIO_SCHEME):
        return "stdio:" + unquote(server[len(STDIO_SCHEME):].split("/", 1)[0])
    return urlsplit(server).netloc.lower() or server


def key_parts(stored_key: str) -> Mapping[str, str] | None:
    """The server's host (or ``stdio``), method and name of an MCP key (for counts by server
    and tool), or None for another key."""
    parts = stored_key.split("/")
    if len(parts) < 6 or parts[0] != "mcp":
        return None
    return {"where": parts[1], "method": "/".join(parts[3:-2]), "name": unquote(parts[-2])}


def is_json_rpc_post(request: Request, headers: Mapping[str, str]) -> bool:
    content_type = (headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    return request.method == "POST" and content_type in ("application/json", "") and request.body[:1] in (b"{", b"[")
