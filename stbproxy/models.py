"""The small, frozen data that flows between the layers.

Nothing here does I/O or knows about mitmproxy, httpx or RocksDB: adapters turn their
own objects into these and back, so the calling rules see one request model.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Mapping, Protocol
from urllib.parse import urlsplit

Headers = tuple[tuple[str, str], ...]


class Source(str, enum.Enum):
    """How an answer was made; sent to clients as the ``X-Stb-Source`` header. A stored
    entry's source is its origin (upstream, simulated, imported, injected), which hits
    send as ``X-Stb-Origin`` (provenance.py)."""

    CACHE = "cache"
    UPSTREAM = "upstream"
    SIMULATED = "simulated"
    SIMULATED_ERROR = "simulated-error"  # the simulator was asked and failed
    UNAVAILABLE = "unavailable"  # the real API could not answer and no simulator is on
    INJECTED = "injected"
    PASSTHROUGH = "passthrough"
    IMPORTED = "imported"
    MISS = "miss"  # replay found nothing: the answer explains the miss
    ERROR = "error"  # the proxy got no answer (transport, TLS set-up, a bad request): never stored
    CHAT = "chat"  # /virtual's chat_with_user, answered by the proxy itself
    LOCAL = "local"  # a message never kept (an MCP notification) answered by the proxy, no real API being asked


class Mode(str, enum.Enum):
    """How the engine answers a request (the rules: the stbproxy.engine package)."""

    VIRTUAL = "virtual"
    RECORD = "record"
    REPLAY = "replay"
    VERIFY = "verify"  # the real API is asked and compared; the stored answer is served


def header_value(headers: Headers, name: str) -> str | None:
    """The first value of a header, matched case-insensitively, or None."""
    lname = name.lower()
    for key, value in headers:
        if key.lower() == lname:
            return value
    return None


def without_headers(headers: Headers, names: frozenset[str]) -> Headers:
    """The headers minus those whose lower-cased name is in ``names``."""
    return tuple((k, v) for k, v in headers if k.lower() not in names)


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    url: str
    headers: Headers = ()
    body: bytes = b""
    # Addressed to the proxy itself (its /virtual endpoint), not to a server to pass it on to:
    # the front end knows, a kind answers it, and nothing ever forwards it.
    to_proxy: bool = False
    # The front end's door it came in by (mitm/lanes.py: fast, tunnel or mitmproxy): written
    # into its session record, never part of a key.
    lane: str = ""

    def header(self, name: str) -> str | None:
        return header_value(self.headers, name)

    @property
    def host(self) -> str:
        return (urlsplit(self.url).hostname or "").lower()


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Headers = ()
    body: bytes = b""
    reason: str = ""

    def header(self, name: str) -> str | None:
        return header_value(self.headers, name)

    def with_header(self, name: str, value: str) -> Response:
        """A copy with ``name`` set to ``value`` (replacing any earlier value)."""
        lname = name.lower()
        kept = tuple(h for h in self.headers if h[0].lower() != lname)
        return Response(self.status, kept + ((name, value),), self.body, self.reason)


class BodyStream(Protocol):
    """A body that arrives as it is made (a server's event stream): read once, then closed."""

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StreamedResponse(Response):
    """A response whose body is carried as it arrives, never read whole nor kept: ``body``
    stays empty and ``stream`` brings the bytes."""

    stream: BodyStream | None = None


@dataclass(frozen=True, slots=True)
class ApiRef:
    """A RapidAPI-style API named by standardized keys (see stb/catalog.py)."""

    category: str
    tool: str
    api: str

    def __str__(self) -> str:
        return f"{self.category}/{self.tool}/{self.api}"


@dataclass(frozen=True, slots=True)
class Exchange:
    """One stored request/answer pair with its provenance.

    ``request`` is always the redacted request: secrets never reach an Exchange.
    ``meta`` carries optional facts (failure taxonomy, simulator model, token counts).
    """

    key: str
    request: Request
    response: Response
    source: Source
    stored_at: float
    upstream_seconds: float | None = None
    api: ApiRef | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
