"""The kinds of traffic a proxy answers, in the order they are tried: StableToolBench's
(what the catalog routes; and a running proxy's /virtual calls), MCP's (JSON-RPC messages
of MCP), OpenAI-compatible LLM APIs, the operations of imported OpenAPI specs, then plain
HTTP, which takes every request. A new kind is one more entry here (docs/internals.md,
"Adding a kind")."""

from __future__ import annotations

import functools

from stbproxy.keys import KeyRules
from stbproxy.mcp.tools import StoredBodies
from stbproxy.mcp.traffic import Mcp
from stbproxy.models import Request
from stbproxy.openapi.catalog import OpenApiCatalog
from stbproxy.openapi.traffic import OpenApi
from stbproxy.stb.catalog import Catalog
from stbproxy.stb.traffic import StableToolBench
from stbproxy.stb.virtual_calls import VirtualUpstream
from stbproxy.traffic.llm_api import LlmApi
from stbproxy.traffic.plain_http import PlainHttp
from stbproxy.traffic.seam import Call, Kinds

_KEYING_MCP = Mcp()  # keys need no state: one instance serves every keying-only Kinds


@functools.lru_cache(maxsize=16)  # imports key every entry with the same catalogs
def kinds_for(catalog: Catalog | None, openapi: OpenApiCatalog | None = None) -> Kinds:
    """The kinds that key a stored or recorded request as a proxy with these catalogs keys it
    (imports, exports, cassettes, tests); /virtual calls are only a running proxy's."""
    return _kinds(catalog, openapi, _KEYING_MCP, None)


def proxy_kinds(catalog: Catalog | None, stored: StoredBodies, openapi: OpenApiCatalog | None = None,
                virtual: VirtualUpstream = VirtualUpstream()) -> Kinds:
    """The kinds of one running proxy: its StableToolBench kind answers /virtual calls (on
    the proxy's own address, its misses sent where ``virtual`` says, and on their way to
    another server); its MCP kind keeps the tool lists it saw (else reads them with
    ``stored``: the answers kept under a key prefix) and the sessions it minted."""
    return _kinds(catalog, openapi, Mcp(stored), virtual)


def _kinds(catalog: Catalog | None, openapi: OpenApiCatalog | None, mcp: Mcp,
           virtual: VirtualUpstream | None) -> Kinds:
    return Kinds((StableToolBench(catalog, virtual), mcp, LlmApi(), OpenApi(openapi), PlainHttp()))


def http_call(request: Request, catalog: Catalog | None, rules: KeyRules,
              openapi: OpenApiCatalog | None = None) -> Call:
    """The call a proxy with these catalogs makes of a proxied request (its key among others)."""
    return kinds_for(catalog, openapi).call(request, rules)
