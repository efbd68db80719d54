"""vcrpy cassettes read back (format version 1): a cassette file (YAML or JSON, read with
vcrpy's own loaders, YAML with its safe loader) or a mitmproxy flow file recognised, each
interaction checked and turned into a request and a response, bad ones reported one by
one (Problem) while the others are read; and an outside exchange turned into what the
store keeps (imported_exchange): keyed as the proxy keys its request, redacted, with the
origin it was recorded with.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vcr.serialize import CASSETTE_FORMAT_VERSION
from vcr.serializers import jsonserializer, yamlserializer

from stbproxy import yaml_text
from stbproxy.cassettes.vcr_format import Interaction, Problem, one_line
from stbproxy.errors import InputError
from stbproxy.keys import KeyRules, stb_api_key
from stbproxy.kinds import http_call
from stbproxy.models import ApiRef, Exchange, Headers, Request, Response, Source
from stbproxy.provenance import SOURCE_HEADER
from stbproxy.redact import redact_request, redact_response, secret_values
from stbproxy.stb.api_requests import VIRTUAL_HOST
from stbproxy.stb.bodies import answer_facts

# Framing that belongs to one transfer, not to the answer: the store keeps none of it.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive",
                              "proxy-connection", "trailer", "upgrade"})
_FLOW_FILE = re.compile(rb"^\d{1,12}:")  # a mitmproxy flow file is a stream of tnetstrings


def is_flow_file(head: bytes) -> bool:
    """Whether the first bytes of a file look like a mitmproxy flow file (``mitmdump -w``)."""
    return bool(_FLOW_FILE.match(head))


CASSETTE_FORMS = ("a vcrpy cassette (YAML or JSON with 'interactions' and 'version: 1', as vcrpy or stbproxy "
                  "export writes)")


class NotACassette(InputError):
    """A file of another kind than a cassette: ``what`` says which kind it looks like, and
    the message what a cassette is (a command that reads more kinds says so instead)."""

    def __init__(self, name: str, what: str) -> None:
        self.name, self.what = name, what
        super().__init__(f"{name}: {what}, not a vcrpy cassette; expected {CASSETTE_FORMS}")

    def accepting(self, accepted: str) -> str:
        """The message for a command that reads ``accepted``."""
        return f"{self.name}: {self.what}, not a vcrpy cassette; {accepted}"


def foreign_format(raw: bytes) -> str | None:
    """What a file that is no cassette looks like, from its bytes (None: it may be one)."""
    head = raw[:16]
    if not raw.strip():
        return "an empty file"
    if head.startswith(b"\x1f\x8b"):
        return "a gzip-compressed file (decompress it first)"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive"
    if is_flow_file(head):
        return "a mitmproxy flow file (mitmdump -w; 'stbproxy import cassette' reads it into a store)"
    return None


def read_cassette(path: str | os.PathLike) -> tuple[list[Interaction], list[Problem]]:
    """The usable interactions of a YAML or JSON cassette and a problem per unusable one.

    Unreadable text, unsafe YAML tags, or a document that is not a version 1 cassette
    raise InputError naming the file (NotACassette for a file of another kind, a truncated
    one said to look truncated); one bad interaction never stops the others.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    what = foreign_format(raw)
    if what is not None:
        raise NotACassette(str(path), what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotACassette(str(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    data = parse_cassette_text(text, str(path))
    interactions, problems = [], []
    for index, raw in enumerate(data["interactions"]):
        try:
            interactions.append(interaction_from_dict(index, raw))
        except _Bad as exc:
            problems.append(Problem(index, str(exc)))
    return interactions, problems


def parse_cassette_text(text: str, name: str) -> dict:
    """The cassette document, checked down to its list of interactions."""
    if text.lstrip().startswith("{"):
        try:
            data = jsonserializer.deserialize(text)
        except ValueError as exc:
            # a document cut short: inside a string, at its last character, or before its closing brace
            stripped = text.rstrip()
            at_end = ("Unterminated string" in str(exc) or getattr(exc, "pos", -1) >= len(stripped)
                      or not stripped.endswith("}"))
            raise InputError(f"{name}: " + (_TRUNCATED if at_end else "") + f"invalid JSON: {exc}") from exc
    else:
        try:
            # vcrpy's loader is a SafeLoader: tags such as !!python/object/apply are refused
            # (ConstructorError), never executed; only a few inert tags vcrpy writes are read.
            data = yamlserializer.deserialize(text)
        except yaml_text.ConstructorError as exc:
            raise InputError(f"{name}: refused an unsafe or unknown YAML tag "
                             f"({one_line(exc.problem or str(exc))}{yaml_text.where(exc)}); "
                             "nothing was constructed") from exc
        except yaml_text.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at_end = "end of stream" in str(exc) or (mark is not None and mark.line >= text.rstrip().count("\n"))
            raise InputError(f"{name}: " + (_TRUNCATED if at_end else "")
                             + f"invalid YAML: {one_line(str(exc))}") from exc
    if isinstance(data, list) and data and isinstance(data[0], dict) and "request" in data[0]:
        raise InputError(f"{name}: a cassette from vcrpy before 1.0 (no version); re-record it or migrate it "
                         "with python -m vcr.migration")
    if isinstance(data, dict) and isinstance(data.get("log"), dict) and "entries" in data["log"]:
        raise NotACassette(name, "a HAR file (an HTTP Archive, as browsers and mitmproxy's hardump write)")
    if not isinstance(data, dict) or "interactions" not in data:
        kind = "JSON" if text.lstrip().startswith(("{", "[")) else "YAML"
        raise NotACassette(name, f"a {kind} document without a top-level 'interactions'")
    if data.get("version") is None and isinstance(data["interactions"], (list, type(None))):
        raise InputError(f"{name}: {_TRUNCATED}it has {len(data['interactions'] or ())} interactions but no "
                         "'version', which vcrpy writes after them; export or record it again")
    version = data.get("version")
    if version != CASSETTE_FORMAT_VERSION:
        raise InputError(f"{name}: cassette format version {version!r} is not supported "
                         f"(only version {CASSETTE_FORMAT_VERSION})")
    if not isinstance(data["interactions"], list):
        raise InputError(f"{name}: 'interactions' must be a list, not {type(data['interactions']).__name__}")
    return data


_TRUNCATED = "looks truncated (the file ends early): "


class _Bad(ValueError):
    """One interaction is unusable; the message says why."""


def interaction_from_dict(index: int, raw: Any) -> Interaction:
    if not isinstance(raw, dict):
        raise _Bad(f"must be a mapping with 'request' and 'response', not {type(raw).__name__}")
    request, response = _field(raw, "request", dict), _field(raw, "response", dict)
    method = _field(request, "method", str, "request.method")
    uri = _field(request, "uri", str, "request.uri")
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", uri):
        raise _Bad(f"request.uri {uri[:80]!r} is not an absolute URL")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*", method):
        raise _Bad(f"request.method {method[:40]!r} is not an HTTP method")
    status = _field(response, "status", dict, "response.status")
    code = status.get("code")
    if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 999:
        raise _Bad(f"response.status.code must be a number from 100 to 999, not {code!r}")
    message = status.get("message") or ""
    if not isinstance(message, str):
        raise _Bad("response.status.message must be text")
    body = _field(response, "body", dict, "response.body")
    if "string" not in body:
        raise _Bad("response.body has no 'string'")
    headers = _headers(response.get("headers"), "response.headers", "latin-1")
    source = next((v for k, v in headers if k.lower() == SOURCE_HEADER.lower()), None)
    if source == Source.ERROR.value:
        raise _Bad("the proxy had no answer here (X-Stb-Source: error), so there is nothing to replay")
    headers = tuple((k, v) for k, v in headers
                    if k.lower() not in _FRAMING_HEADERS and k.lower() != SOURCE_HEADER.lower())
    response_body = _bytes(body["string"], "response.body.string")
    response_body, headers = decoded_body(response_body, headers)
    return Interaction(
        index,
        Request(method.upper(), uri, _headers(request.get("headers"), "request.headers", "utf-8"),
                _bytes(request.get("body"), "request.body")),
        Response(code, headers, response_body, message),
        source,
    )


def decoded_body(body: bytes, headers: Headers) -> tuple[bytes, Headers]:
    """The body without its Content-Encoding (gzip, deflate), as the store keeps answers;
    an encoding we cannot undo is left in place with its header."""
    encoding = next((v.strip().lower() for k, v in headers if k.lower() == "content-encoding"), None)
    if encoding is None:
        return body, headers
    try:
        if encoding in ("identity", ""):
            decoded = body
        elif encoding in ("gzip", "x-gzip"):
            decoded = gzip.decompress(body)
        elif encoding == "deflate":
            try:
                decoded = zlib.decompress(body)
            except zlib.error:
                decoded = zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate, as some servers send
        else:
            return body, headers
    except (OSError, EOFError, zlib.error):
        return body, headers
    return decoded, tuple((k, v) for k, v in headers if k.lower() != "content-encoding")


def imported_exchange(request: Request, response: Response, *, catalog, rules: KeyRules, now: float,
                      meta: dict | None = None, recorded_source: str | None = None, openapi=None) -> Exchange:
    """The stored form of an outside exchange: keyed exactly as the proxy keys the request
    (API keys where the catalog maps it, operation keys where an OpenAPI spec describes it),
    redacted, with its origin (imported_origin)."""
    call = http_call(request, catalog, rules, openapi)
    stand_in = _stand_in_api(request)
    if stand_in is not None and call.api is None:
        call = replace(call, key=stb_api_key(stand_in[0], stand_in[1], rules), api=stand_in[0])
    secrets = secret_values(request, rules)
    headers, facts = answer_facts(response.headers)
    response = Response(response.status,
                        tuple((k, v) for k, v in headers
                              if k.lower() not in _FRAMING_HEADERS and k.lower() != SOURCE_HEADER.lower()),
                        response.body, response.reason)
    meta = {**facts, **(meta or {})}
    return Exchange(key=call.key, request=redact_request(request, rules), response=redact_response(response, secrets),
                    source=imported_origin(recorded_source), stored_at=now, api=call.api, meta=meta)


def imported_origin(recorded_source: str | None) -> Source:
    """The origin an imported answer keeps: what a cassette says of an answer that was not
    real (simulated, injected, a failed simulation, a replay miss) stays so, and is served
    as such; anything else becomes ``imported``, since a file cannot vouch that it is real."""
    try:
        source = Source(recorded_source) if recorded_source else Source.IMPORTED
    except ValueError:
        return Source.IMPORTED
    return source if source in NOT_REAL else Source.IMPORTED


NOT_REAL = frozenset({Source.SIMULATED, Source.SIMULATED_ERROR, Source.UNAVAILABLE, Source.INJECTED, Source.MISS})


def _stand_in_api(request: Request) -> tuple[ApiRef, dict] | None:
    """The API and arguments of an exported /virtual call whose real URL was unknown: the
    proxy keeps it as ``POST http://virtual.invalid/<category>/<tool>/<api>`` with the
    arguments as a JSON body (api_requests.stored_request), and keys it as that API's call."""
    if request.host != VIRTUAL_HOST:
        return None
    parts = [p for p in urlsplit(request.url).path.split("/") if p]
    try:
        args = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return None
    if len(parts) != 3 or not isinstance(args, dict):
        return None
    return ApiRef(*parts), args


def _headers(raw: Any, where: str, charset: str) -> Headers:
    """Header fields as stored; a bytes value (YAML !!binary) is read as the store keeps that
    side: request headers as UTF-8 with surrogate escapes, response headers as Latin-1."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise _Bad(f"{where} must be a mapping of name to values, not {type(raw).__name__}")
    out = []
    for name, values in raw.items():
        if not isinstance(name, str) or not name:
            raise _Bad(f"{where} has a header name that is not text: {name!r}")
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, bytes):
                value = value.decode(charset, "surrogateescape")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
            if not isinstance(value, str):
                raise _Bad(f"{where}[{name!r}] has a value that is not text: {type(value).__name__}")
            out.append((name, value))
    return tuple(out)


def _bytes(value: Any, where: str) -> bytes:
    """A body as vcrpy may have recorded it: text, bytes, nothing, or a re-read buffer."""
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, io.BytesIO):
        return value.getvalue()
    if not isinstance(value, (list, tuple, dict)) and hasattr(value, "__next__"):
        value = list(value)  # vcrpy's builtins.iter tag: an iterator over chunks
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bytes, str)) for v in value):
        return b"".join(v if isinstance(v, bytes) else v.encode("utf-8") for v in value)
    raise _Bad(f"{where} must be text or bytes, not {type(value).__name__}")


def _field(mapping: dict, name: str, kind: type, where: str | None = None):
    if name not in mapping:
        raise _Bad(f"missing {where or name}")
    value = mapping[name]
    if not isinstance(value, kind):
        raise _Bad(f"{where or name} must be a {'mapping' if kind is dict else kind.__name__}, "
                   f"not {type(value).__name__}")
    return value



