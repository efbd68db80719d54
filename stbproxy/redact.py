"""Secrets out of requests and responses before anything is stored, logged or exported.

Two passes: first the named places (secret headers, secret query/body fields) are
replaced by ``REDACTED``; then every secret *value* seen in the request is scrubbed from
whatever else is kept (URL, body, response headers and body), because upstreams echo
keys back and agents paste tokens into odd places.

Where a request names its secrets, and their values: request_secrets.py. Scrubbing a
value in every form it may be echoed in (percent-encoded, JSON-escaped, HTML references),
and which values are hunted so at all: scrubbing.py. Their functions users import from
here (secret_values, scrub, scrub_text...) are re-exported.
"""

from __future__ import annotations

import json
import re
import traceback
from dataclasses import replace

from stbproxy.key_rules import DEFAULT_RULES, KeyRules
from stbproxy.models import Headers, Request, Response
from stbproxy.request_secrets import LOOSE_MEMBER, loose_text, pair_spans, parsed_body, text_pair_spans
from stbproxy.request_secrets import secret_values as secret_values
from stbproxy.scrubbing import REDACTED as REDACTED
from stbproxy.scrubbing import holds_secret as holds_secret
from stbproxy.scrubbing import hunted as hunted
from stbproxy.scrubbing import scrub as scrub
from stbproxy.scrubbing import scrub_text as scrub_text
from stbproxy.scrubbing import scrub_value as scrub_value

_RESPONSE_SECRET_HEADERS = frozenset({"set-cookie", "mcp-session-id"})


def redact_request(request: Request, rules: KeyRules = DEFAULT_RULES) -> Request:
    secrets = secret_values(request, rules)
    headers = tuple(
        (scrub_text(name, secrets), REDACTED if name in rules.secret_headers else scrub_text(value, secrets))
        for name, value in request.headers
    )
    url = scrub_text(_redact_url(request.url, rules.secret_fields), secrets)
    body = scrub(_redact_body(request, rules), secrets)
    return replace(request, url=url, headers=headers, body=body)


def redact_url(request: Request, rules: KeyRules = DEFAULT_RULES) -> str:
    """The request's URL as redact_request would keep it, without redacting the rest
    (for log lines and session records, which hold only the URL)."""
    return scrub_text(_redact_url(request.url, rules.secret_fields), secret_values(request, rules))


def redact_response(response: Response, secrets: frozenset[str]) -> Response:
    """The response with every secret scrubbed from its body and its header fields, names
    included (an upstream may echo a key as a header's name)."""
    headers: Headers = tuple(
        (scrub_text(name, secrets),
         REDACTED if name.lower() in _RESPONSE_SECRET_HEADERS else scrub_text(value, secrets))
        for name, value in response.headers
    )
    return replace(response, headers=headers, body=scrub(response.body, secrets))


LOGGED_URL_CHARS = 1024  # a URL in a log line or a reason: its first characters (a URL may take 64 KiB)


def bounded_url(url: str) -> str:
    """A (redacted) URL as a log line or a reason quotes it: its first LOGGED_URL_CHARS characters."""
    if len(url) <= LOGGED_URL_CHARS:
        return url
    return f"{url[:LOGGED_URL_CHARS]}... ({len(url) - LOGGED_URL_CHARS:,} more characters)"


def failure_text(request: Request, exc: BaseException, rules: KeyRules = DEFAULT_RULES) -> str:
    """An unexpected failure on a request, for the log: the request line and the error
    with the request's secrets scrubbed, then where it happened (a traceback without the
    messages of chained errors, which may quote the request). URLs are quoted bounded."""
    secrets = secret_values(request, rules)
    shown = bounded_url(redact_url(request, rules))
    message = scrub_text(str(exc).replace(request.url, shown), secrets)
    where = "".join(traceback.format_tb(exc.__traceback__)).rstrip()
    return f"{request.method} {shown}: {type(exc).__name__}: {message}\n{where}"


# -- masking the named places -------------------------------------------------------------


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    for start, end in reversed(spans):  # from the end, so earlier offsets stay right
        text = text[:start] + REDACTED + text[end:]
    return text


def _redact_url(url: str, names: frozenset[str]) -> str:
    """The URL as sent, each value of a secret name in its query or fragment REDACTED."""
    head, hash_, fragment = url.partition("#")
    path, mark, query = head.partition("?")
    if query:
        query = _replaced(query, pair_spans(query, names))
    if fragment:
        fragment = _replaced(fragment, pair_spans(fragment, names))
    return path + mark + query + hash_ + fragment


def _redact_body(request: Request, rules: KeyRules) -> bytes:
    if not request.body:
        return request.body
    names = rules.secret_fields
    kind, value = parsed_body(request)
    if kind == "multipart":
        body = request.body
        for part in reversed(value):  # from the end, so earlier offsets stay right
            if part.name in names:
                body = body[:part.start] + REDACTED.encode() + body[part.end:]
        return body
    if kind == "json":
        if not _json_has_field(value, names):
            return request.body  # keep the client's exact bytes when there is nothing to hide
        # surrogatepass: a body that held raw surrogate bytes (read that way) keeps them
        return json.dumps(_mask_json(value, names), ensure_ascii=False).encode("utf-8", "surrogatepass")
    if kind == "form":
        spans = pair_spans(value, names)
        return _replaced(value, spans).encode("utf-8", "surrogateescape") if spans else request.body
    # text: the "secret": members of JSON a client broke, and name=value pairs; anything
    # else is kept as sent, bytes that are not UTF-8 included
    loose = _redact_loose(request.body, names)
    text = loose.decode("utf-8", "surrogateescape")
    spans = text_pair_spans(text, names)
    return _replaced(text, spans).encode("utf-8", "surrogateescape") if spans else loose


def _redact_loose(body: bytes, names: frozenset[str]) -> bytes:
    """A body that is neither JSON nor a form, with the value of every "secret": member
    replaced (it may be JSON a client broke); anything else is kept as sent."""
    if not body or b'"' not in body:
        return body

    def masked(match: re.Match) -> bytes:
        if loose_text(match.group(1)) not in names:
            return match.group(0)
        value_at = match.start(2) - match.start(0)
        return match.group(0)[:value_at] + b'"' + REDACTED.encode() + b'"'

    return LOOSE_MEMBER.sub(masked, body)


def _json_has_field(value, names: frozenset[str]) -> bool:
    if isinstance(value, dict):
        return any(k in names or _json_has_field(v, names) for k, v in value.items())
    if isinstance(value, list):
        return any(_json_has_field(v, names) for v in value)
    return False


def _mask_json(value, names: frozenset[str]):
    if isinstance(value, dict):
        return {k: REDACTED if k in names else _mask_json(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_json(v, names) for v in value]
    return value
