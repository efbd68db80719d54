"""Replay a cassette or a store session inside the calling process, through requests-mock
(the only importer of requests_mock): no proxy process, nothing listening.

    from stbproxy.cassettes.inprocess import replay

    with replay("cassettes/weather_oslo.yaml") as player:
        run_my_agent()              # its `requests` calls are answered from the cassette
    assert not player.misses, player.explain()

Requests are answered by the same engine, the same keys and the same cassette playback
as ``stbproxy serve --cassette`` (ordered by default, as the pytest plugin plays), so a
miss carries the same explanation: a 404 JSON body naming the closest recorded request
and the parts that differ, with secrets redacted as the proxy redacts them. Only
`requests` in this process is covered: other languages, subprocesses and clients that pin
certificates need the proxy.
"""

from __future__ import annotations

import contextlib
import fnmatch
from pathlib import Path
from typing import Iterator, Sequence

import requests
import requests_mock

from stbproxy.cassettes.store import CassetteStore, describe_miss, session_exchanges
from stbproxy.cassettes.vcr_format import Interaction
from stbproxy.engine import Engine, EngineConfig
from stbproxy.errors import InputError, UpstreamError
from stbproxy.keys import KeyRules
from stbproxy.kinds import kinds_for
from stbproxy.models import Mode, Request, Response


class ReplayMismatch(AssertionError):
    """Requests the cassette did not hold (or had already played)."""


class _NoNetwork:
    """Replay never reaches a real API; the engine is built with this in place of one."""

    async def send(self, request: Request) -> tuple[Response, float]:
        raise UpstreamError("in-process replay never calls the network")


class Player:
    """What a replay gives its caller: the misses so far, and after the block the report."""

    def __init__(self, store: CassetteStore, *, rules: KeyRules, catalog=None) -> None:
        self.store = store
        self.engine = Engine(store, _NoNetwork(), EngineConfig(mode=Mode.REPLAY, rules=rules),
                             kinds=kinds_for(catalog))

    @property
    def misses(self) -> list[dict]:
        """The replay-miss explanations, in order (the JSON the proxy answers a miss with)."""
        return self.engine.misses

    @property
    def report(self):
        """The playback report: played, never played, not in the cassette (final after the block)."""
        self.store.close(self.engine.misses)
        return self.store.report

    def explain(self) -> str:
        """The misses as the proxy's pytest plugin words them; empty when there were none."""
        return "\n".join(line for miss in self.misses for line in describe_miss(miss))

    def check(self) -> None:
        """Raise ReplayMismatch naming every request the cassette could not answer."""
        if self.misses:
            raise ReplayMismatch(self.explain())

    def answer(self, request: Request) -> Response:
        coroutine = self.engine.handle(request)
        try:
            coroutine.send(None)  # replay without faults never waits: it ends at once
        except StopIteration as done:
            return done.value.response
        coroutine.close()
        raise RuntimeError("in-process replay cannot wait for anything (faults and latency need the proxy)")


@contextlib.contextmanager
def replay(cassette: str | Path | None = None, *, store: str | Path | None = None, session: str | None = None,
           ordered: bool = True, passthrough: Sequence[str] = (), catalog=None,
           rules: KeyRules = KeyRules()) -> Iterator[Player]:
    """Answer this process's `requests` calls from ``cassette``, or from the stored
    ``session`` of ``store``, for the length of the block.

    ``passthrough`` host globs (an agent's own LLM, say) are left to the real network;
    every other request is answered from the recording, or gets the proxy's explained 404.
    """
    player = Player(_playback(cassette, store, session, ordered, catalog, rules), rules=rules, catalog=catalog)
    hosts = tuple(h.lower() for h in passthrough)

    def matcher(proxied: requests_mock.Request) -> requests.Response | None:
        request = _request_of(proxied)
        if hosts and any(fnmatch.fnmatchcase(request.host, h) for h in hosts):
            return None  # not ours: requests-mock lets it through (real_http)
        answer = player.answer(request)
        headers: dict[str, str] = {}
        for name, value in answer.headers:
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        return requests_mock.create_response(proxied, status_code=answer.status, headers=headers,
                                             content=answer.body, reason=answer.reason or None)

    with requests_mock.Mocker(real_http=bool(hosts)) as mocker:
        mocker.add_matcher(matcher)
        yield player
    player.store.close(player.engine.misses)


def _playback(cassette, store, session, ordered, catalog, rules) -> CassetteStore:
    if (cassette is None) == (store is None):
        raise InputError("replay either a cassette or a store session (store=..., session=...)")
    if cassette is not None:
        return CassetteStore(Path(cassette), catalog=catalog, rules=rules, ordered=ordered)
    if session is None:
        raise InputError("replaying a store needs the session to play (session=NAME)")
    from stbproxy.store.embedded import Store

    with Store(Path(store), readonly=True) as db:
        exchanges, _skipped = session_exchanges(db, session)
    interactions = [Interaction(i, ex.request, ex.response) for i, ex in enumerate(exchanges)]
    return CassetteStore(Path(f"{store}#{session}"), catalog=catalog, rules=rules, ordered=ordered,
                         interactions=interactions)


def _request_of(proxied: requests_mock.Request) -> Request:
    """requests-mock's view of a request as the engine's Request."""
    body = proxied.body
    if body is None:
        body = b""
    elif isinstance(body, str):
        body = body.encode("utf-8")
    elif not isinstance(body, bytes):
        body = b"".join(chunk.encode() if isinstance(chunk, str) else chunk for chunk in body)
    return Request(proxied.method, proxied.url, tuple(proxied.headers.items()), body)
