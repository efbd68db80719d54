"""What every simulator needs of a call: the API's docs, the call's arguments and stored
answers of the same API to learn from.

Secrets: a request may carry API keys. ``CallFacts`` holds the redacted request only,
and arguments without secret fields; nothing a simulator shows comes from headers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Mapping

from stbcore.tool_calls import WireCall, read_tool_call
from stbproxy import keys
from stbproxy.errors import StbError
from stbproxy.forensics.naming import view_of
from stbproxy.keys import KeyRules
from stbproxy.models import ApiRef, Exchange, Request, Source
from stbproxy.redact import redact_request
from stbproxy.stb.api_requests import request_args
from stbproxy.stb.catalog import ApiDoc, Catalog
from stbproxy.synthesis.simulation import NOT_DESCRIBED, SimulationRequest

log = logging.getLogger("stbproxy")

EXAMPLE_SCAN_LIMIT = 200  # stored entries looked at per prefix (the scan runs on the event loop)
EXAMPLE_CACHE_SECONDS = 30.0  # examples picked for an API are reused this long
EXAMPLE_CACHE_SIZE = 4096  # APIs whose examples are remembered
REAL_SOURCES = frozenset({Source.UPSTREAM, Source.IMPORTED})


@dataclass(frozen=True)
class CallFacts:
    """A call as a simulator may see it: redacted, no headers in anything it shows."""

    request: Request  # redacted
    doc: ApiDoc | None
    args: dict[str, Any]
    prefixes: tuple[str, ...]  # store prefixes holding answers of the same API or endpoint
    api: ApiRef | None = None  # the API as the call named it (a /virtual call's names, read as its server reads them)
    names: Mapping[str, str] | None = None  # a /virtual call's category, tool_name, api_name as its client wrote them

    @property
    def name(self) -> str:
        """For logs and error texts."""
        return str(self.doc.ref) if self.doc else f"{self.request.method} {self.request.url}"


def call_facts(job: SimulationRequest, catalog: Catalog | None, rules: KeyRules) -> CallFacts:
    request = redact_request(job.request, rules)
    if job.doc is not NOT_DESCRIBED:
        doc = job.doc  # as the call's kind of traffic describes its API (traffic/seam.py)
    else:
        doc = catalog.get(job.api) if catalog is not None and job.api is not None else None
        if doc is None and catalog is not None:
            doc = _route(catalog, job.request)
    # The call's own key minus its digest is its API (api/...) or endpoint (http/...) prefix.
    prefixes = [job.key.rsplit("/", 1)[0] + "/"]
    if doc is not None and keys.api_prefix(doc.ref) not in prefixes:
        prefixes.insert(0, keys.api_prefix(doc.ref))
    given = dict(job.args) if job.args is not None else call_args(request, catalog)
    args = without_secrets(given, rules)
    return CallFacts(request, doc, args, tuple(prefixes), job.api, job.names)


def _route(catalog: Catalog, request: Request) -> ApiDoc | None:
    match = catalog.route(request.method, request.url, request.headers)
    return match.doc if match else None


def call_args(request: Request, catalog: Catalog | None) -> dict[str, Any]:
    """Query, body and (when the catalog routes the URL) path parameters.

    /virtual calls reach the engine as the real API's request, or as a stand-in whose JSON
    body is the arguments (api_requests.stored_request), so both read the same way. A
    request that names its tool on the wire (an MCP tools/call) gives the arguments it
    carries, as its kind reads them back (stbcore/tool_calls.py).
    """
    args = request_args(request)
    wire = wire_call(request, args)
    if wire is not None and wire.name is not None:
        return dict(wire.arguments)
    match = catalog.route(request.method, request.url, request.headers) if catalog else None
    if match is not None:
        args.update(match.path_params)
    return args


def wire_call(request: Request, body: Any) -> WireCall | None:
    """The tool call a request makes as its kind of traffic reads it off the wire, or None."""
    return read_tool_call(request.method, request.url.split("?", 1)[0], body,
                          {name.lower(): value for name, value in request.headers})


def without_secrets(args: dict[str, Any], rules: KeyRules) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k.lower() not in rules.secret_fields}


def body_text(body: bytes) -> str:
    return body.decode("utf-8", "replace")


def stored_examples(store, facts: CallFacts, skip_key: str, limit: int) -> list[Exchange]:
    """Up to ``limit`` stored answers of the same API: real ones first, then simulated ones.

    Error answers (HTTP >= 400) teach nothing about the API's content and are left out.
    """
    real: list[Exchange] = []
    simulated: list[Exchange] = []
    seen: set[str] = {skip_key}
    own_view = view_of(skip_key)
    for prefix in facts.prefixes:
        try:
            for n, ex in enumerate(store.scan(prefix)):
                if n >= EXAMPLE_SCAN_LIMIT or len(real) >= limit:
                    break
                # "http/h/GET/a/" also prefixes "http/h/GET/a/b/...": keep the same endpoint only.
                if ex.key in seen or ex.key.rsplit("/", 1)[0] + "/" != prefix or ex.response.status >= 400:
                    continue
                if view_of(ex.key) not in (None, own_view):  # another client's view: never shown to this one
                    continue
                seen.add(ex.key)
                if ex.source in REAL_SOURCES:
                    real.append(ex)
                elif ex.source is Source.SIMULATED:
                    simulated.append(ex)
        except StbError as exc:  # a damaged entry: simulate with what was found so far
            log.warning("simulator: scanning stored examples under %s stopped: %s", prefix, exc)
    return (real + simulated)[:limit]


class ExampleCache:
    """``stored_examples`` remembered per API for a while.

    Scanning and decoding up to a few hundred entries takes milliseconds on the event loop
    that also serves cache hits; examples need not be fresher than this.
    """

    def __init__(self, store, limit: int) -> None:
        self.store = store
        self.limit = limit
        self._picked: dict[tuple[tuple[str, ...], str | None], tuple[float, list[Exchange]]] = {}

    def get(self, facts: CallFacts, key: str) -> list[Exchange]:
        now = time.monotonic()
        remembered = (facts.prefixes, view_of(key))  # a view's examples are its own
        cached = self._picked.get(remembered)
        if cached is None or cached[0] < now:
            if len(self._picked) >= EXAMPLE_CACHE_SIZE:
                self._picked.clear()
            picked = stored_examples(self.store, facts, key, self.limit + 1)  # a spare for the skip below
            cached = self._picked[remembered] = (now + EXAMPLE_CACHE_SECONDS, picked)
        return [ex for ex in cached[1] if ex.key != key][: self.limit]
