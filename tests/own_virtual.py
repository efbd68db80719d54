"""Calls to a proxy's own /virtual, in process: an engine with a running proxy's kinds of
traffic, and what a StableToolBench client reads of each answer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stbproxy.engine import Answer, Engine, EngineConfig
from stbproxy.kinds import proxy_kinds
from stbproxy.models import Request, Response
from stbproxy.stb.catalog import Catalog
from stbproxy.stb.virtual_calls import VirtualUpstream

OWN_URL = "http://127.0.0.1:8080/virtual"  # the proxy's own address, as the front end writes it


@dataclass(frozen=True)
class Seen:
    """An answer as the client reads it: the status, the answer object, X-Stb-Source."""

    status: int
    document: Any
    source: str | None
    response: Response


def own_request(body: bytes, headers: tuple[tuple[str, str], ...] = (), method: str = "POST") -> Request:
    return Request(method, OWN_URL, headers, body, to_proxy=True)


def seen(answer: Answer) -> Seen:
    response = answer.response
    try:
        document = json.loads(response.body)
    except ValueError:
        document = response.body.decode("utf-8", "replace")
    return Seen(response.status, document, response.header("X-Stb-Source"), response)


def virtual_engine(store, upstream, config: EngineConfig = EngineConfig(), catalog: Catalog | None = None, *,
                   toolbench_url: str | None = None, rapidapi_key: str | None = None) -> Engine:
    """An engine with the kinds of a running proxy whose /virtual misses go where these say."""
    kinds = proxy_kinds(catalog, lambda _prefix: iter(()), None, VirtualUpstream(toolbench_url, rapidapi_key))
    return Engine(store, upstream, config, kinds=kinds)


async def ask(engine: Engine, body: bytes, session: str | None = None,
              headers: tuple[tuple[str, str], ...] = ()) -> Seen:
    """POST ``body`` to the engine's own /virtual."""
    return seen(await engine.handle(own_request(body, headers), session))
