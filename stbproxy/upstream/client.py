"""Calls to the real API (the only importer of httpx for that job).

The engine, not mitmproxy, makes upstream calls: only there can a failure be turned into
a simulated answer (mitmproxy's error hook cannot supply a response), and only there can
identical concurrent misses share one call. Bodies are returned decoded (no
Content-Encoding), so what is stored and replayed is the content the client reads.

What is read of an answer is bounded (``UpstreamConfig.max_body``, ``serve
--max-upstream-body``): its bytes on the wire and, decoded, what each coding makes, so a
compression bomb stops inflating at the limit. A larger answer is refused whole
(UpstreamError ``too-large``: the engine answers 502, never simulated or stored), not
streamed: an answer is judged, redacted and kept whole or not at all, and an agent reads it
into a context window of a few megabytes. The codings decoded are those of codings.py, in
any stack (``gzip, br``); a request's Accept-Encoding offers no other, and an answer in
another (``compress``) is refused (``undecodable``), never passed on half decoded.

Requests go straight to httpx's connection pool (its transport), not through an
``httpx.AsyncClient``: a client keeps a cookie jar shared by every caller, which would send
one agent's cookies on another agent's requests, make a recording depend on what ran
before, and parse every request's headers on the event loop. The proxy forwards exactly
the headers (cookies included) that the client sent, and nothing else.

At most ``max_connections`` calls are inside a pool at once; the others wait their turn
here. httpcore's pool does work in proportion to the
calls waiting in it times its connections on every call that comes or goes: a few thousand
slow calls at once (a flood of misses) would otherwise hold the event loop, every other
client and SIGTERM with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from dataclasses import dataclass
from typing import AsyncIterator
from urllib.parse import urlsplit

import certifi  # httpx's own source of public CAs
import httpx

from stbproxy.errors import ConfigError, UpstreamError, UpstreamFailure
from stbproxy.models import Headers, Request, Response, StreamedResponse
from stbproxy.upstream.codings import Decoding, OverLimit, accepted_codings, answer_codings

DEFAULT_MAX_UPSTREAM_BODY = 64 << 20  # twice the largest request body taken (32 MiB); see the docstring

# Hop-by-hop headers (RFC 9110 7.6.1) and the ones httpx recomputes itself.
_DROP_REQUEST = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
     "transfer-encoding", "upgrade", "host", "content-length"}
)
_DROP_RESPONSE = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "content-length",
     "content-encoding", "trailer", "upgrade"}
)


def strip_headers(headers: Headers, names: frozenset[str]) -> Headers:
    return tuple((k, v) for k, v in headers if k.lower() not in names)


def wire_bytes(text: str) -> bytes:
    """A header as the client sent it: proxies decode header bytes as UTF-8 with surrogate
    escapes, so encoding back the same way restores the exact bytes."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no byte sequence decodes to
        return text.encode("utf-8", "replace")


@dataclass(frozen=True)
class UpstreamConfig:
    timeout: float = 30.0
    ca_file: str | None = None  # extra trust for upstreams with private certificates
    insecure: bool = False
    proxy: str | None = None  # an outbound proxy, when the real APIs are behind one
    max_connections: int = 256
    max_body: int = DEFAULT_MAX_UPSTREAM_BODY  # the most an answer may take, on the wire and decoded


class Upstream:
    def __init__(self, config: UpstreamConfig = UpstreamConfig()) -> None:
        self.config = config
        self._timeout = httpx.Timeout(config.timeout).as_dict()
        self._call_slots: asyncio.Semaphore | None = None  # places in the pools (_turn)
        self._stream_slots: asyncio.Semaphore | None = None
        try:
            verify = _verification(config)
            self._transport = self._pool(verify)
            # Event streams stay open as long as a client listens: in a pool of their own, so
            # that however many are open, calls never wait for a connection.
            self._stream_transport = self._pool(verify)
        except ssl.SSLError as exc:
            raise ConfigError(f"the upstream CA bundle {config.ca_file} is not usable ({exc.reason or exc}): "
                              "give a PEM file of CA certificates", setting="upstream_ca") from exc
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot set up the client for real API calls: {exc}") from exc

    def _pool(self, verify: ssl.SSLContext | bool) -> httpx.AsyncHTTPTransport:
        return httpx.AsyncHTTPTransport(
            verify=verify,
            proxy=self.config.proxy,
            # Never read HTTP(S)_PROXY or SSL_* variables: the agent's environment points at
            # us, which would loop. Redirects are relayed, never followed (a transport does not).
            trust_env=False,
            limits=httpx.Limits(max_connections=self.config.max_connections),
        )

    async def send(self, request: Request) -> tuple[Response, float]:
        """The real answer and how long it took; UpstreamError when there is none.

        Error texts carry the URL as sent; the engine redacts them before they are kept.
        """
        started = time.perf_counter()
        async with self._turn(self._calls, request), self._failures(request):
            reply = await self._transport.handle_async_request(self._outgoing(request, self._timeout))
            content = await _read_whole(reply, self.config.max_body, request)
        return _response(reply, content), time.perf_counter() - started

    @property
    def _calls(self) -> asyncio.Semaphore:
        if self._call_slots is None:  # made on first use, in the loop the calls run in
            self._call_slots = asyncio.Semaphore(self.config.max_connections)
        return self._call_slots

    @property
    def _streams(self) -> asyncio.Semaphore:
        if self._stream_slots is None:
            self._stream_slots = asyncio.Semaphore(self.config.max_connections)
        return self._stream_slots

    @contextlib.asynccontextmanager
    async def _turn(self, slots: asyncio.Semaphore, request: Request):
        """A place in the pool (the module docstring). Waited for without a timeout of its own:
        the calls inside have theirs, so places free up; and a timed wait (asyncio.wait_for on
        Python 3.11) can swallow a cancellation that comes as the place is given, which would
        keep a call its client reset (HTTP/2) going to the end."""
        async with slots:
            yield

    async def open_stream(self, request: Request, answer: bool = False) -> tuple[Response, float]:
        """As ``send``, but a 200 event stream comes back as it arrives (a StreamedResponse,
        which waits for events as long as the server keeps it open); any other answer whole.
        ``answer``: the stream is a call's answer (an MCP server's to a POST), read with
        ``send``'s timeout and up to --max-upstream-body, as a whole answer is."""
        started = time.perf_counter()
        timeout = self._timeout if answer else self._stream_timeout
        async with self._turn(self._streams, request), self._failures(request):
            reply = await self._stream_transport.handle_async_request(self._outgoing(request, timeout))
            if reply.status_code != 200 or not _is_event_stream(reply):
                content = await _read_whole(reply, self.config.max_body, request)
                return _response(reply, content), time.perf_counter() - started
            try:
                decoding = Decoding(answer_codings(reply, request.url), None)
            except UpstreamError:
                await reply.aclose()
                raise
        head = _response(reply, b"")
        stream = _EventStream(reply, _host_of(request), decoding, self.config.max_body if answer else None)
        return StreamedResponse(head.status, head.headers, b"", head.reason, stream), time.perf_counter() - started

    def _outgoing(self, request: Request, timeout: dict) -> httpx.Request:
        headers = [(k, accepted_codings(v) if k.lower() == "accept-encoding" else v)
                   for k, v in strip_headers(request.headers, _DROP_REQUEST)]
        return httpx.Request(
            request.method,
            request.url,
            headers=[(wire_bytes(k), wire_bytes(v)) for k, v in headers],
            content=request.body or None,
            extensions={"timeout": timeout},
        )

    @property
    def _stream_timeout(self) -> dict:
        # a server's event stream may say nothing for hours: only connecting is timed
        return {**self._timeout, "read": None}

    @contextlib.asynccontextmanager
    async def _failures(self, request: Request):
        """httpx's failures as UpstreamError, by what went wrong."""
        try:
            yield
        except httpx.TimeoutException as exc:
            raise UpstreamError(f"upstream timed out after {self.config.timeout:g} s: {request.url}",
                                failure=UpstreamFailure.TIMEOUT) from exc
        except (httpx.ConnectError, httpx.ProxyError) as exc:
            tls = _tls_failure(exc)
            if tls is not None:
                raise UpstreamError(self._tls_text(request, tls), failure=UpstreamFailure.TLS) from exc
            raise UpstreamError(f"upstream unreachable: {request.url}: {exc}",
                                failure=UpstreamFailure.UNREACHABLE) from exc
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise UpstreamError(f"cannot call {request.url}: {exc}", failure=UpstreamFailure.INVALID_REQUEST) from exc
        except (httpx.HTTPError, ValueError) as exc:  # resets, garbage, broken encodings
            raise UpstreamError(f"upstream answered garbage or reset the connection: {request.url}: {exc}",
                                failure=UpstreamFailure.PROTOCOL) from exc

    def _tls_text(self, request: Request, failure: ssl.SSLError) -> str:
        """What went wrong in the TLS handshake with the real API, and the setting that fixes it."""
        host = _host_of(request) or request.url
        if isinstance(failure, ssl.SSLCertVerificationError):
            trusted = f"the public CAs and those of {self.config.ca_file}" if self.config.ca_file else "the public CAs"
            fix = ("give the CA that signed it with --upstream-ca FILE, or turn verification off with "
                   "--upstream-insecure (only for hosts you trust)")
            return (f"TLS: the certificate of {host} cannot be verified against {trusted} "
                    f"({failure.verify_message or failure.reason or failure}); {fix}")
        return (f"TLS: the handshake with {host} failed ({failure.reason or failure}); check that {host} "
                "serves HTTPS there with a TLS version and ciphers this proxy accepts")

    async def aclose(self) -> None:
        await self._transport.aclose()
        await self._stream_transport.aclose()


class _EventStream:
    """A real server's event stream as it arrives (decoded: no Content-Encoding; each piece
    bounded, however well the server compressed it)."""

    def __init__(self, reply: httpx.Response, host: str, decoding: "Decoding", limit: int | None = None) -> None:
        self._reply = reply
        self._host = host  # the stream's failure is logged where no redaction rule reaches: no path, no query
        self._decoding = decoding
        self._limit = limit  # the most a call's answer may take (None: a stream that is never kept)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The stream's bytes; UpstreamError when the server breaks it off (not an end), or
        (``too-large``) when an answer passes its limit."""
        made = 0
        try:
            async for raw in self._reply.aiter_raw():
                for piece in self._decoding.feed(raw):
                    made += len(piece)
                    if self._limit is not None and made > self._limit:
                        raise _too_large(self._limit, self._host, " (an event stream)")
                    yield piece
            for piece in self._decoding.flush():
                yield piece
        except (httpx.HTTPError, ValueError) as exc:
            raise UpstreamError(f"the event stream from {self._host} broke off ({type(exc).__name__})",
                                failure=UpstreamFailure.PROTOCOL) from exc

    async def aclose(self) -> None:
        await self._reply.aclose()


def _host_of(request: Request) -> str:
    return urlsplit(request.url).netloc.rpartition("@")[2]


async def _read_whole(reply: httpx.Response, limit: int, request: Request) -> bytes:
    """The answer's body, decoded; UpstreamError (``too-large``) as soon as it passes ``limit``
    bytes, on the wire or decoded, and nothing more is read."""
    url = request.url
    try:
        announced = reply.headers.get("content-length", "")
        has_body = request.method != "HEAD" and reply.status_code not in (204, 304)  # else a length names no body
        if has_body and announced.isdigit() and int(announced) > limit:
            raise _too_large(limit, url, f": it announces {int(announced):,} bytes")
        decoding = None  # an answer without a body (HEAD, 304) needs no coding decoded
        parts: list[bytes] = []
        read = 0
        async for raw in reply.aiter_raw():
            read += len(raw)
            if read > limit:
                raise _too_large(limit, url, "")
            decoding = decoding or Decoding(answer_codings(reply, url), limit)
            parts.extend(decoding.feed(raw))
        if decoding is not None:
            parts.extend(decoding.flush())
        return b"".join(parts)
    except OverLimit as exc:
        raise _too_large(limit, url, f" once decoded ({exc})") from None
    finally:
        await reply.aclose()


def _too_large(limit: int, url: str, detail: str) -> UpstreamError:
    return UpstreamError(f"the upstream's answer is larger than the limit of {limit:,} bytes (--max-upstream-body)"
                         f"{detail}; it was not read further, passed on or stored: {url}",
                         failure=UpstreamFailure.TOO_LARGE)


def _response(reply: httpx.Response, content: bytes) -> Response:
    headers = strip_headers(
        tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in reply.headers.raw), _DROP_RESPONSE
    )
    return Response(reply.status_code, headers, content, reply.reason_phrase)


def _is_event_stream(reply: httpx.Response) -> bool:
    return reply.headers.get("content-type", "").split(";")[0].strip().lower() == "text/event-stream"


def _verification(config: UpstreamConfig) -> ssl.SSLContext | bool:
    """How upstream certificates are checked: against the public CAs (certifi's, as httpx
    trusts by default), plus ``ca_file`` when given: an extra CA for private hosts must not
    take the trust of every public API away."""
    if config.insecure:
        return False
    context = ssl.create_default_context(cafile=certifi.where())
    if config.ca_file:
        context.load_verify_locations(cafile=config.ca_file)
    return context


def _tls_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a failed connection, if that is what failed it: a handshake
    failure is a configuration error (a CA to trust, a wrong port), not an API that is down."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ssl.SSLError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None
