"""mitmproxy's flows and our models, both ways: a flow's request as a models.Request, an
answer as a mitmproxy Response (recent hits' responses built once, Prebuilt), and the
exchanges of a mitmproxy flow file (``mitmdump -w``)."""

from __future__ import annotations

import json
import logging
import os
import time
from http import HTTPStatus
from typing import Callable

from mitmproxy import exceptions, http
from mitmproxy.net.http import http1

from stbproxy.mitm.framing import without_hop_by_hop
from stbproxy.mitm.lanes import LANE
from stbproxy.models import Request, Response
from stbproxy.provenance import ORIGIN_HEADER, SOURCE_HEADER
from stbproxy.recent import Recent

log = logging.getLogger("stbproxy")

PREBUILT_ENTRIES = 4096  # response heads of recent hits, ready to send
URL_MEMO_MAX = 2048  # targets longer than this are not remembered (request_url)
_URLS: Recent[str] = Recent(4096)


# -- conversions ------------------------------------------------------------------------


def header_items(flow: http.HTTPFlow) -> tuple[tuple[str, str], ...]:
    """The request's header fields as text, decoded as mitmproxy's ``items(multi=True)`` does."""
    return tuple((k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
                 for k, v in flow.request.headers.fields)


def request_from_flow(flow: http.HTTPFlow, headers: tuple[tuple[str, str], ...] | None = None) -> Request:
    """The request as the engine keys and forwards it: without the header fields its Connection
    field names, which are the client's connection's own (RFC 9110 7.6.1)."""
    req = flow.request
    return Request(
        method=req.method,
        url=request_url(req),
        headers=without_hop_by_hop(header_items(flow) if headers is None else headers),
        body=req.raw_content or b"",
        lane=flow.metadata.get(LANE, ""),
    )


def request_url(request: http.Request) -> str:
    """``request.url``, remembered for the scheme, host, port and target it is made of (but
    for CONNECT, whose URL is its authority): a client asks the same URLs again and again."""
    data = request.data
    if data.method == b"CONNECT" or len(data.path) > URL_MEMO_MAX:
        return request.url
    key = (data.scheme, data.host, data.port, data.path)
    url = _URLS.get(key)
    if url is None:
        url = _URLS.put(key, request.url)
    return url


def response_to_mitm(response: Response) -> http.Response:
    # Response.make sets Content-Length from the body; stored headers carry none.
    return with_reason(http.Response.make(
        response.status,
        response.body,
        [(k.encode("latin-1", "replace"), v.encode("latin-1", "replace")) for k, v in response.headers],
    ))


def json_response(status: int, document: dict, source: str) -> http.Response:
    return with_reason(http.Response.make(
        status,
        # Texts may quote what a client sent, lone surrogates included: \u-escapes keep any of it.
        json.dumps(document).encode(),
        {"Content-Type": "application/json", SOURCE_HEADER: source, ORIGIN_HEADER: source},
    ))


def with_reason(response: http.Response) -> http.Response:
    """mitmproxy leaves the reason phrase of some codes (431, 508) empty."""
    if not response.reason:
        try:
            response.reason = HTTPStatus(response.status_code).phrase
        except ValueError:
            pass
    return response


def error_response(status: int, message: str) -> http.Response:
    return json_response(status, {"error": message, "response": ""}, "error")


def own_error_answers(max_request_body: int) -> Callable[[int, str], bytes]:
    """The answers mitmproxy's HTTP/1 layer gives on its own (a malformed request, a body
    over the limit), written as stbproxy's errors: labelled, in JSON, and naming the option
    where a limit was met. The connection is closed after them, as mitmproxy does."""
    too_large = (f"stbproxy: the request body is larger than the limit of {max_request_body} bytes "
                 "(--max-request-body); it was not read, forwarded or stored")

    def answer(status: int, message: str = "") -> bytes:
        if status == 413:
            message = too_large
        response = error_response(status, message if message.startswith("stbproxy") else f"stbproxy: {message}")
        response.headers["Connection"] = "close"
        return http1.assemble_response(response)

    return answer


class Prebuilt:
    """The parts of recent hits' responses (status line, header fields, body), built once by
    the usual construction and reused while the engine answers with the same object: a hit
    then costs one Response object, byte for byte what the construction makes."""

    def __init__(self, size: int = PREBUILT_ENTRIES) -> None:
        self._parts: Recent[tuple] = Recent(size)

    def response(self, name: str, source: object, build: Callable[[], http.Response]) -> http.Response:
        parts = self._parts.get(name)
        if parts is None or parts[0] is not source:
            made = build()
            parts = self._parts.put(name, (source, made.data.http_version, made.status_code, made.data.reason,
                                           made.headers.fields, made.raw_content))
            return made
        now = time.time()
        # http.Response(...) with what its construction made already (bytes, checked fields):
        # its conversions and Headers' checks would only repeat themselves
        headers = http.Headers.__new__(http.Headers)
        headers.fields = parts[4]
        response = http.Response.__new__(http.Response)
        response.data = http.ResponseData(http_version=parts[1], status_code=parts[2], reason=parts[3], headers=headers,
                                          content=parts[5], trailers=None, timestamp_start=now, timestamp_end=now)
        return response



def read_flow_file(path: str | os.PathLike):
    """The HTTP exchanges of a mitmproxy flow file (``mitmdump -w``), in order, as
    ``(Request, Response | None)`` (None: the flow got no answer). Bodies are decoded
    (no Content-Encoding), as the store keeps answers. A file mitmproxy cannot read (another
    version's format, corrupt, truncated) raises InputError naming it, after the flows
    read before the damage."""
    from mitmproxy import io as mitm_io

    from stbproxy.errors import InputError

    count = 0
    try:
        with open(path, "rb") as handle:
            for flow in mitm_io.FlowReader(handle).stream():
                count += 1
                if not isinstance(flow, http.HTTPFlow):
                    continue  # TCP, UDP, DNS flows: nothing HTTP to import
                request = Request(flow.request.method, flow.request.url,
                                  tuple(flow.request.headers.items(multi=True)), flow.request.raw_content or b"")
                answer = flow.response
                if answer is None:
                    yield request, None
                    continue
                # as upstream/client.py keeps a real answer's header fields: their bytes, as Latin-1 text
                headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in answer.headers.fields)
                body = answer.get_content(strict=False) or b""
                if answer.headers.get("content-encoding") and body != (answer.raw_content or b""):
                    headers = tuple((k, v) for k, v in headers if k.lower() != "content-encoding")
                yield request, Response(answer.status_code, headers, body, answer.reason or "")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except exceptions.FlowReadException as exc:
        from mitmproxy.version import VERSION

        raise InputError(f"{path}: not a flow file mitmproxy {VERSION} can read (after {count} flows: {exc}); "
                         "files from newer mitmproxy versions are not readable by older ones") from exc
    except (ValueError, TypeError, KeyError) as exc:
        raise InputError(f"{path}: damaged flow file after {count} flows: {exc}") from exc
