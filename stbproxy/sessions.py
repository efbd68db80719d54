"""Sessions: which run a request belongs to, named without changing the agent. Pure.

A session is named by the user part of the proxy URL (``HTTP_PROXY=http://run-42:@host:port``
makes clients send ``Proxy-Authorization: Basic base64("run-42:")``, on plain requests
and on CONNECT alike), by an ``X-Stb-Session`` request header, for /virtual calls to the
proxy's own address by a ``/s/<name>/virtual`` path (stb/virtual_calls.own_virtual_path), by
``serve --session``, or else by a default per serve run. In the URL the name is
percent-encoded (``my%20run%2F2``), so any name survives; clients decode it before
sending, and the proxy decodes what a client sent still encoded. Each session keeps an
ordered log of light records
that point at the stored answers.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from urllib.parse import quote, unquote, urlsplit

from stbproxy.models import Headers, header_value

SESSION_HEADER = "X-Stb-Session"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 100


def safe_session_name(raw: str) -> str:
    """A name that is safe as a store key part and as a file name.

    Odd characters (``../``, spaces, non-ASCII) become ``_``; when anything had to change,
    a short digest of the original is appended so that two different raw names never
    share a session.
    """
    cleaned = _UNSAFE.sub("_", raw).strip("._-")[:MAX_NAME] or "session"
    if cleaned != raw:
        cleaned = f"{cleaned}-{hashlib.sha256(raw.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    return cleaned


def default_session_name(now: float | None = None, command: str = "serve") -> str:
    """``<command>-<UTC time>``: the session of a run that names none."""
    return time.strftime(f"{command}-%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))


def proxy_url(host: str, port: int, session: str | None = None, params: str = "") -> str:
    """The proxy URL a client is given, naming ``session`` as its (percent-encoded) user,
    followed by ``params`` as they are (``;trial=2``: forensics/naming.py).

    "NAME:@" rather than "NAME@": Python's requests sends the proxy URL's user on plain HTTP
    requests only when a password part is present (HTTPS tunnels send it either way).
    """
    user = f"{quote(session, safe='')}{params}:@" if session else ""
    host = f"[{host}]" if ":" in host else host
    return f"http://{user}{host}:{port}"


def proxy_user(headers: Headers) -> str | None:
    """The user of a ``Proxy-Authorization: Basic`` header (the proxy URL's user part)."""
    value = header_value(headers, "proxy-authorization")
    if not value:
        return None
    scheme, _, credential = value.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(credential.strip(), validate=True)
    except ValueError:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # requests encodes credentials in Latin-1
    # The password part we hand out is empty, so a name holding ":" ends at the last one.
    user, colon, _password = text.rpartition(":")
    return unquote(user if colon else text) or None


def header_text(value: str) -> str:
    """The text a client meant by a header value that arrived as bytes.

    Proxies decode header bytes as UTF-8 with surrogate escapes; clients such as Python's
    requests send non-ASCII values in Latin-1. Either way the name the user typed comes
    back, so ``export --session`` finds the session under that name.
    """
    raw = value.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def naming_text(headers: Headers) -> str | None:
    """How a request names its session, as sent: the header first, then the proxy URL's user."""
    named = header_value(headers, SESSION_HEADER)
    return header_text(named) if named else proxy_user(headers)


def session_from_headers(headers: Headers) -> str | None:
    """The session a request names itself (its name alone, made safe)."""
    named = naming_text(headers)
    return safe_session_name(named) if named else None


@dataclass(frozen=True)
class SessionRecord:
    """One exchange of a session: what was asked, who answered, and where the answer is."""

    seq: int
    time: float
    method: str
    url: str  # redacted
    status: int
    source: str
    key: str  # the store key of the answer (a cache entry, or a log/ record)
    seconds: float
    origin: str = ""  # a hit: the origin of the stored answer served (upstream, simulated, ...)
    error: str = ""  # source "error": what failed (unreachable, timeout, tls, ...)
    tool: str = ""  # an MCP tool call: "<server>/<tool>", whatever answered it (for counts by server and tool)
    call: str = ""  # the call's key, when ``key`` names a copy kept apart (log/...) rather than its entry
    facts: dict = field(default_factory=dict)  # run forensics: drift (verify mode), fork, ordered playback
    lane: str = ""  # the door the request came in by: fast, tunnel or mitmproxy (mitm/lanes.py); "" without a proxy

    def to_dict(self) -> dict:
        return asdict(self)

    def to_stored(self) -> dict:
        """The record as the store keeps it (stored_record)."""
        return stored_record(self.time, self.method, self.url, self.status, self.source, self.key, self.seconds,
                             self.origin, self.error, self.tool, self.call, self.facts, self.lane)

    @classmethod
    def from_dict(cls, data: dict) -> SessionRecord:
        """A record from its dict; the fields added later (origin, error, tool, lane) may be absent."""
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data and name != "facts"})


def stored_record(when: float, method: str, url: str, status: int, source: str, key: str, seconds: float,
                  origin: str = "", error: str = "", tool: str = "", call: str = "",
                  facts: Mapping | None = None, lane: str = "") -> dict:
    """A SessionRecord (its fields but the sequence number, which is part of the store key)
    as the store keeps it. When ``key`` names a stored exchange, which holds the request and
    its status already, only that reference with the time, source and duration (about half
    the size: this is written once per request, hits included); otherwise the whole record.
    The engine makes it without a SessionRecord on every request."""
    stored = {"time": when, "source": source, "key": key, "seconds": seconds}
    if not key:
        stored.update(method=method, url=url, status=status)
    if origin:
        stored["origin"] = origin
    if error:
        stored["error"] = error
    if tool:
        stored["tool"] = tool
    if call:
        stored["call"] = call
    if lane:
        stored["lane"] = lane
    if facts:
        stored.update(facts)
    return stored


def expand_record(stored: dict, seq: int) -> dict:
    """A record as the store returns it: every field named (None where a compact record
    refers to its stored exchange instead), and its sequence number."""
    return {"seq": seq, "method": None, "url": None, "status": None, **stored}


@dataclass
class SessionTally:
    """Counts over session records: calls by source, hits by the origin of the answer they
    served, and calls that got no answer (source ``error``) by what failed and where."""

    by_source: Counter = field(default_factory=Counter)
    hits_by_origin: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # (kind, host) -> calls
    tools: Counter = field(default_factory=Counter)  # (MCP server, tool, source) -> calls
    fork: dict | None = None  # a fork's source, step count, calls replayed and why it stopped early
    first: float | None = None
    last: float | None = None

    def add(self, record: dict) -> None:
        source = record.get("source", "?")
        self.by_source[source] += 1
        if source == "cache":
            self.hits_by_origin[record.get("origin") or "unrecorded"] += 1  # records older than origins
        elif source == "error":
            self.errors[(record.get("error") or "unknown", _host(record.get("url") or ""))] += 1
        if record.get("tool"):
            server, _, tool = record["tool"].rpartition("/")
            self.tools[(server, tool, source)] += 1
        self._add_fork(record)
        moment = record.get("time")
        if moment is not None:
            self.first = moment if self.first is None else min(self.first, moment)
            self.last = moment if self.last is None else max(self.last, moment)

    def _add_fork(self, record: dict) -> None:
        started = record.get("fork")
        if isinstance(started, dict) and self.fork is None:
            self.fork = {"from": started.get("from"), "at": started.get("at"), "replayed": 0, "stopped": None}
        if self.fork is None:
            return
        if record.get("forked"):
            self.fork["replayed"] += 1
        if record.get("fork_stopped"):
            self.fork["stopped"] = record["fork_stopped"]

    @property
    def calls(self) -> int:
        return sum(self.by_source.values())

    @property
    def hit_rate(self) -> float | None:
        """Cache answers among all answers but passthrough ones (an agent's own LLM calls,
        never served from the store) and the proxy's own (``local``: an MCP notification's
        202), as StableToolBench reports its hit rates."""
        served = self.calls - self.by_source.get("passthrough", 0) - self.by_source.get("local", 0)
        return self.by_source.get("cache", 0) / served if served else None


def _host(url: str) -> str:
    try:
        return urlsplit(url).netloc.rpartition("@")[2] or "?"
    except ValueError:
        return "?"
