"""Calls to the real API (the only importer of httpx for that job).

The engine, not mitmproxy, makes upstream calls: only there can a failure be turned into
a simulated answer (mitmproxy's error hook cannot supply a response), and only there can
identical concurrent misses share one call. Bodies are returned decoded (no
Content-Encoding), so what is stored and replayed is the content the client reads.

Requests go straight to httpx's connection pool (its transport), not through an
``httpx.AsyncClient``: a client keeps a cookie jar shared by every caller, which would send
one agent's cookies on another agent's requests, make a recording depend on what ran
before, and parse every request's headers on the event loop. The proxy forwards exactly
the headers (cookies included) that the client sent, and nothing else.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from dataclasses import dataclass
from typing import AsyncIterator
from urllib.parse import urlsplit

import certifi  # httpx's own source of public CAs
import httpx

from stbproxy.errors import ConfigError, UpstreamError
from stbproxy.models import Headers, Request, Response, StreamedResponse

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


class Upstream:
    def __init__(self, config: UpstreamConfig = UpstreamConfig()) -> None:
        self.config = config
        self._timeout = httpx.Timeout(config.timeout).as_dict()
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
        async with self._failures(request):
            reply = await self._transport.handle_async_request(self._outgoing(request, self._timeout))
            content = await _read_whole(reply)
        return _response(reply, content), time.perf_counter() - started

    async def open_stream(self, request: Request) -> tuple[Response, float]:
        """As ``send``, but a 200 event stream comes back as it arrives (a StreamedResponse,
        which waits for events as long as the server keeps it open); any other answer whole."""
        started = time.perf_counter()
        async with self._failures(request):
            reply = await self._stream_transport.handle_async_request(self._outgoing(request, self._stream_timeout))
            if reply.status_code != 200 or not _is_event_stream(reply):
                return _response(reply, await _read_whole(reply)), time.perf_counter() - started
        head = _response(reply, b"")
        return (StreamedResponse(head.status, head.headers, b"", head.reason, _EventStream(reply, _host_of(request))),
                time.perf_counter() - started)

    def _outgoing(self, request: Request, timeout: dict) -> httpx.Request:
        return httpx.Request(
            request.method,
            request.url,
            headers=[(wire_bytes(k), wire_bytes(v)) for k, v in strip_headers(request.headers, _DROP_REQUEST)],
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
            raise UpstreamError(f"upstream timed out after {self.config.timeout:g} s: {request.url}", kind="timeout") from exc
        except (httpx.ConnectError, httpx.ProxyError) as exc:
            tls = _tls_failure(exc)
            if tls is not None:
                raise UpstreamError(self._tls_text(request, tls), kind="tls") from exc
            raise UpstreamError(f"upstream unreachable: {request.url}: {exc}", kind="unreachable") from exc
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise UpstreamError(f"cannot call {request.url!r}: {exc}", kind="invalid-request") from exc
        except (httpx.HTTPError, ValueError) as exc:  # resets, garbage, broken encodings
            raise UpstreamError(f"upstream answered garbage or reset the connection: {request.url}: {exc}", kind="protocol") from exc

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
    """A real server's event stream as it arrives (decoded: no Content-Encoding)."""

    def __init__(self, reply: httpx.Response, host: str) -> None:
        self._reply = reply
        self._host = host  # the stream's failure is logged where no redaction rule reaches: no path, no query

    async def chunks(self) -> AsyncIterator[bytes]:
        """The stream's bytes; UpstreamError when the server breaks it off (not an end)."""
        try:
            async for chunk in self._reply.aiter_bytes():
                yield chunk
        except (httpx.HTTPError, ValueError) as exc:
            raise UpstreamError(f"the event stream from {self._host} broke off ({type(exc).__name__})",
                                kind="protocol") from exc

    async def aclose(self) -> None:
        await self._reply.aclose()


def _host_of(request: Request) -> str:
    return urlsplit(request.url).netloc.rpartition("@")[2]


async def _read_whole(reply: httpx.Response) -> bytes:
    try:
        return await reply.aread()
    finally:
        await reply.aclose()


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
