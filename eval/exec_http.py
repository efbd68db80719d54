"""Sending an execution-scored command's request through the proxy: the only module of
stbeval that imports httpx.

Every request goes to the proxy the user names (never straight to an API), with a
timeout, a cap on the answer's size and redirects followed only for ``curl -L``, each
hop's host checked by the caller's rule. A secret (the task's key) never appears in what
this module returns or logs: error texts are scrubbed by the caller's ``scrub``, and so
are httpx's own log records while a Sender is open. The proxy's headers that say how an
answer was made (``X-Stb-Source``, ``X-Stb-Origin``) are kept with it.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urljoin

import httpx

from .errors import EvalError
from .exec_curl import CurlRequest, host_of

MAX_ANSWER_BYTES = 16 * 1024 * 1024
MAX_REDIRECTS = 10
KEPT_HEADERS = ("content-type", "location", "x-stb-source", "x-stb-origin", "x-stb-simulator")


class ProxyUnreachable(EvalError):
    """The proxy itself cannot be reached: no command can run."""


@dataclass
class Reply:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)  # KEPT_HEADERS, lower-case names
    body: bytes = b""
    error: str | None = None  # why there is no answer (a timeout, a refused redirect, ...)
    hops: int = 0


class _Scrubbed(logging.Filter):
    """httpx's and httpcore's log records with the secrets taken out of their text."""

    def __init__(self, scrub: Callable[[str], str]) -> None:
        super().__init__()
        self.scrub = scrub

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self.scrub(record.getMessage()), ()
        return True


_LOGGERS = ("httpx", "httpcore")


class Sender:
    def __init__(self, proxy: str, *, ca: str | None, timeout: float, scrub: Callable[[str], str]) -> None:
        self.proxy = proxy
        self.timeout = timeout
        self.scrub = scrub
        self._filter = _Scrubbed(scrub)
        for name in _LOGGERS:
            logging.getLogger(name).addFilter(self._filter)
        try:
            verify = ssl.create_default_context(cafile=ca) if ca else True
            self._client = httpx.Client(proxy=proxy, verify=verify, trust_env=False,
                                        follow_redirects=False, timeout=timeout,
                                        headers={"User-Agent": "stbeval-exec"})
        except (ValueError, httpx.InvalidURL) as exc:
            self.close()
            raise EvalError(f"--proxy {proxy_for_humans(proxy)}: {exc}") from None
        except (OSError, ssl.SSLError) as exc:
            self.close()
            raise EvalError(f"--ca {ca}: not a CA bundle ({exc})") from None

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
        for name in _LOGGERS:
            logging.getLogger(name).removeFilter(self._filter)

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, request: CurlRequest, allowed: Callable[[str], str | None]) -> Reply:
        """The answer to ``request`` (following redirects for -L, each new host checked by
        ``allowed``, which names why one is refused)."""
        timeout = min(self.timeout, request.max_time) if request.max_time else self.timeout
        method, url, body = request.method, request.url, request.body
        headers = list(request.headers)
        for hop in range(MAX_REDIRECTS + 1):
            reply = self._once(method, url, headers, body, timeout)
            reply.hops = hop
            location = reply.headers.get("location")
            if reply.error or not request.follow_redirects or reply.status not in (301, 302, 303, 307, 308) \
                    or not location:
                return reply
            url = urljoin(url, location)
            if not url.startswith(("http://", "https://")):
                return Reply(error="a redirect to a scheme other than http(s)")
            why = allowed(host_of(url))
            if why:
                return Reply(error=f"a redirect to {host_of(url)}: {why}")
            if reply.status in (301, 302, 303) and method == "POST" or reply.status == 303 and method != "HEAD":
                method, body = "GET", None
                headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
        return Reply(error=f"more than {MAX_REDIRECTS} redirects")

    def _once(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes | None,
              timeout: float) -> Reply:
        try:
            with self._client.stream(method, url, headers=headers, content=body, timeout=timeout) as response:
                kept = {name: response.headers[name] for name in KEPT_HEADERS if name in response.headers}
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        return Reply(response.status_code, kept, error=f"an answer over {MAX_ANSWER_BYTES} bytes")
                    chunks.append(chunk)
                return Reply(response.status_code, kept, b"".join(chunks))
        except httpx.ConnectError as exc:
            if url.startswith("https://") and "CERTIFICATE_VERIFY_FAILED" in str(exc):
                raise ProxyUnreachable("the proxy's certificate is not trusted for https URLs: give --ca with the "
                                       "bundle `stbproxy env` exports as SSL_CERT_FILE (or the proxy's CA)") from None
            raise ProxyUnreachable(f"cannot reach the proxy at {proxy_for_humans(self.proxy)} "
                                   f"({self.scrub(str(exc)) or type(exc).__name__}); is stbproxy serve running "
                                   "there?") from None
        except httpx.TimeoutException:
            return Reply(error=f"no answer within {timeout:g} s")
        except httpx.ProxyError as exc:
            return Reply(error=f"the proxy refused the tunnel ({self.scrub(str(exc))})")
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            return Reply(error=f"{type(exc).__name__}: {self.scrub(str(exc))}")


def proxy_for_humans(proxy: str) -> str:
    """The proxy's address without its user part (a session name, a credential)."""
    scheme, sep, rest = proxy.partition("://")
    if not sep:
        return proxy.rpartition("@")[2]
    return f"{scheme}://{rest.rpartition('@')[2]}"
