"""``serve --mcp NAME=URL``: MCP servers answered at the proxy's own address, for clients
that ignore proxy variables. A client whose server URL is ``http://127.0.0.1:PORT/mcp/NAME``
(or ``.../s/SESSION/mcp/NAME``, naming its session; either with ``/mcp`` after it, for
clients that take only a URL ending in ``/mcp``) is answered as if it had sent its
messages to URL through the proxy: the same keys, the same store entries. Pure."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from stbproxy.errors import ConfigError
from stbproxy.models import Request

_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
# /mcp/NAME, and /mcp/NAME/mcp for clients that take only a URL ending in /mcp (the Inspector CLI)
_PATH = re.compile(r"^(?:/s/(?P<session>[^/]+))?/mcp/(?P<name>[^/?]+)(?:/mcp)?/?$")


def parse_specs(specs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``NAME=URL`` specs as {name: url}; ConfigError naming the bad one."""
    servers: dict[str, str] = {}
    for spec in specs:
        name, equals, url = spec.partition("=")
        name, url = name.strip(), url.strip()
        if not equals or not _NAME.fullmatch(name):
            raise ConfigError(f"{spec!r}: give NAME=URL, NAME made of letters, digits, '.', '_' and '-'",
                              setting="mcp")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{spec!r}: {url!r} is not an http:// or https:// URL with a host", setting="mcp")
        if name in servers:
            raise ConfigError(f"{spec!r}: the name {name} is given twice", setting="mcp")
        servers[name] = url
    return servers


def local_target(path: str) -> tuple[str, str | None] | None:
    """(server name, session or None) for a path of the local MCP endpoint, else None."""
    found = _PATH.match(path.split("?", 1)[0])
    if found is None:
        return None
    session = found["session"]
    return unquote(found["name"]), unquote(session) if session else None


def to_server(request: Request, url: str) -> Request:
    """The client's message as sent to the server at ``url`` through the proxy."""
    netloc = urlsplit(url).netloc
    headers = tuple((k, v) for k, v in request.headers if k.lower() != "host") + (("Host", netloc),)
    return Request(request.method, url, headers, request.body)
