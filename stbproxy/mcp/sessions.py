"""Session ids of the session era, when an answer comes from the store.

A server mints a session id in its answer to ``initialize`` and the client sends it on
every later request. The id is never stored (it is a live session's credential). When
``initialize`` is answered from the store, the proxy mints a fresh id for the client;
should a later call of that session need the real server (a miss in virtual mode), the
proxy opens a session of its own there, with the client's own ``initialize`` when this
process saw it (else one with the client's protocol version), and sends the server's id
in place of the one it minted. The map is per process and bounded; a process that never
saw the minted id opens its own server session the same way.

A server that does not know the session a request names (it restarted, it ended the
session, or the id is one the proxy minted and it never saw) says so with 404 (400 and a
word of the session, for some servers): the proxy opens a session of its own in its place
and sends the request again, once; the client goes on with the id it has (a DELETE of a
session the server no longer has is answered 200: it has ended). When no session
can be opened, the call fails with an UpstreamError of failure ``session``, which the engine
answers as an error, never simulated: nothing is made up for a problem of the proxy's own.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeGuard

from stbproxy.errors import UpstreamError, UpstreamFailure
from stbproxy.mcp.protocol import DEFAULT_SESSION_VERSION, SESSION_HEADER, VERSION_HEADER
from stbproxy.models import Request, Response
from stbproxy.recent import Recent

MINTED_PREFIX = "stbproxy-"
SESSIONS_KEPT = 4096
CLIENT_INFO = {"name": "stbproxy", "version": "1"}

Send = Callable[[Request], Awaitable[tuple[Response, float]]]


@dataclass
class _Minted:
    initialize: bytes | None  # the client's own initialize body, when this process saw it
    real: str | None = None  # the server's session id, once one was opened


class SessionMap:
    def __init__(self) -> None:
        self._minted: Recent[_Minted] = Recent(SESSIONS_KEPT)

    def mint(self, initialize_body: bytes) -> str:
        """A fresh session id for a client whose ``initialize`` was answered from the store."""
        minted = MINTED_PREFIX + secrets.token_hex(16)
        self._minted.put(minted, _Minted(initialize_body))
        return minted

    @staticmethod
    def is_minted(session_id: str | None) -> TypeGuard[str]:
        return session_id is not None and session_id.startswith(MINTED_PREFIX)

    def real_id(self, minted: str) -> str | None:
        state = self._minted.get(minted)
        return state.real if state else None

    def forget(self, minted: str) -> None:
        self._minted.pop(minted)

    def opened(self, session_id: str, initialize_body: bytes) -> None:
        """A session a client opened at the server itself: its ``initialize`` is kept, so that
        one like it can be opened should the server forget it."""
        if self._minted.get(session_id) is None:
            self._minted.put(session_id, _Minted(initialize_body, session_id))

    async def send(self, request: Request, send: Send) -> tuple[Response, float]:
        """Send ``request`` to the server in the session its client names: a minted id is
        replaced by the server's own (a session is opened there first when there is none),
        and a session the server does not know is opened again, once (the module docstring)."""
        named = request.header(SESSION_HEADER)
        if not named:
            return await send(request)
        state = self._minted.get(named)
        real = state.real if state is not None else None if self.is_minted(named) else named
        if real is None:
            real = await self._open(named, request, send)
        response, seconds = await send(_with_session(request, real))
        if request.method == "DELETE":  # the session ends: a server that has it no more ended it already
            self._minted.pop(named)
            return (Response(200, (), b"") if unknown_session(response) else response), seconds
        if unknown_session(response):
            real = await self._open(named, request, send)
            response, seconds = await send(_with_session(request, real))
            if unknown_session(response):
                raise UpstreamError(f"the MCP server at {request.url} does not know the session the proxy opened "
                                    f"for this client (HTTP {response.status})", failure=UpstreamFailure.SESSION)
        return response, seconds

    async def send_in_open_session(self, request: Request, send: Send) -> tuple[Response, float]:
        """Send ``request`` (a session's GET stream) to the server session a minted id stands
        for; one is never opened for it: a server says nothing to a session it never had."""
        minted = request.header(SESSION_HEADER)
        if not minted or (not self.is_minted(minted) and self._minted.get(minted) is None):
            return await send(request)
        real = self.real_id(minted)
        if real is None:
            raise UpstreamError(f"the session the store opened has no session at {request.url} yet",
                                failure=UpstreamFailure.NO_SESSION)
        return await send(_with_session(request, real))

    async def _open(self, minted: str, request: Request, send: Send) -> str:
        state = self._minted.get(minted) or self._minted.put(minted, _Minted(None))
        version = request.header(VERSION_HEADER) or DEFAULT_SESSION_VERSION
        body = state.initialize or json.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT_INFO}}).encode()
        headers = tuple((k, v) for k, v in request.headers
                        if k.lower() not in (SESSION_HEADER.lower(), VERSION_HEADER.lower(), "content-length"))
        answer, _ = await send(Request("POST", request.url, headers, body))
        real = answer.header(SESSION_HEADER)
        if answer.status != 200 or not real:
            raise UpstreamError(f"the MCP server at {request.url} opened no session for this client, which the "
                                f"proxy asked it to (HTTP {answer.status})", failure=UpstreamFailure.SESSION)
        notified = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
        await send(Request("POST", request.url, headers + ((SESSION_HEADER, real), (VERSION_HEADER, version)),
                           notified))
        state.real = real
        return real


def unknown_session(response: Response) -> bool:
    """Whether a server says it does not know the session a request named: 404, as the
    specification has it, or 400 with a word of the session (the reference server's)."""
    if response.status == 404:
        return True
    return response.status == 400 and b"session" in response.body[:500].lower()


def _with_session(request: Request, session_id: str) -> Request:
    headers = tuple((k, v) for k, v in request.headers if k.lower() != SESSION_HEADER.lower())
    return Request(request.method, request.url, headers + ((SESSION_HEADER, session_id),), request.body)
