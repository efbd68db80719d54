"""Exchanges <-> vcrpy cassettes (format version 1), written and read with vcrpy's own
serializers so that plain vcrpy replays what we export and we read what vcrpy records.

No store, no click, no mitmproxy: the CLI hands exchanges in and takes interactions out.
Secrets are redacted again on the way out (the store already holds redacted requests;
this is the last line before bytes leave the machine), and YAML is read with vcrpy's safe
loader, which refuses ``!!python/object`` and friends instead of constructing them.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Literal
from urllib.parse import urlsplit

import yaml
from vcr.serialize import CASSETTE_FORMAT_VERSION
from vcr.serializers import compat, jsonserializer, yamlserializer

from stbproxy.atomic_files import write_atomically
from stbproxy.errors import InputError, StbError
from stbproxy.keys import DEFAULT_RULES, KeyRules, api_key
from stbproxy.models import ApiRef, Exchange, Headers, Request, Response, Source
from stbproxy.provenance import SOURCE_HEADER  # in a cassette: the origin of each recorded answer
from stbproxy.redact import redact_request, redact_response, redact_url, scrub_text, secret_values
from stbproxy.stb.api_requests import VIRTUAL_HOST
from stbproxy.stb.traffic import http_call

Format = Literal["yaml", "json"]
FORMATS: tuple[str, ...] = ("yaml", "json")
# Framing that belongs to one transfer, not to the answer: the store keeps none of it.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive",
                              "proxy-connection", "trailer", "upgrade"})
_FLOW_FILE = re.compile(rb"^\d{1,12}:")  # a mitmproxy flow file is a stream of tnetstrings


@dataclass(frozen=True)
class Interaction:
    """One request/answer pair read from a cassette or a flow file."""

    index: int  # position in its file, from 0
    request: Request
    response: Response
    source: str | None = None  # the X-Stb-Source the cassette carried, if any


@dataclass(frozen=True)
class Problem:
    """One interaction that could not be used, and why."""

    index: int
    reason: str

    def __str__(self) -> str:
        return f"interaction {self.index}: {self.reason}"


@dataclass(frozen=True)
class LeftOut:
    """One exchange that could not be put in a cassette, and why; neither text holds a secret."""

    index: int  # its position among the exchanges exported, from 0
    what: str  # the method and redacted URL, and its store key
    reason: str

    def __str__(self) -> str:
        return f"{self.what}: {self.reason}"


# -- export ---------------------------------------------------------------------------------


def exchanges_to_cassette(exchanges: Iterable[Exchange], rules: KeyRules = DEFAULT_RULES,
                          left_out: list[LeftOut] | None = None) -> dict:
    """The cassette document (``{"interactions": [...], "version": 1}``), as vcrpy writes it.

    An exchange that cannot be converted is named in ``left_out`` and the others are kept;
    without ``left_out`` it raises StbError naming it (never a silent partial document)."""
    exchanges = list(exchanges)
    found: list[LeftOut] = []
    converted = _converted(exchanges, rules, found)
    _refuse_partial(found, left_out)
    return _document([interaction for _index, interaction in converted])


def serialize(cassette: dict, fmt: Format) -> str:
    """The cassette as text, by vcrpy's serializer for ``fmt``."""
    if fmt == "yaml":
        return yamlserializer.serialize(_yaml_ready(cassette))
    if fmt == "json":
        binary = [i for i, it in enumerate(cassette["interactions"]) if _holds_bytes(it)]
        if binary:
            # vcrpy's JSON serializer cannot hold bytes either; say which ones, and what works.
            raise StbError(f"interaction(s) {_list(binary)} have binary (non-UTF-8) bodies, which a JSON cassette "
                           "cannot hold; use --format yaml (binary bodies become !!binary)")
        return jsonserializer.serialize(cassette)
    raise StbError(f"unknown cassette format {fmt!r} (one of {', '.join(FORMATS)})")


def write_cassette(path: str | os.PathLike, exchanges: Iterable[Exchange], fmt: Format = "yaml",
                   rules: KeyRules = DEFAULT_RULES, left_out: list[LeftOut] | None = None) -> int:
    """Write the cassette atomically (a temp file beside ``path``, then os.replace);
    returns how many interactions it holds. Nothing but ``path`` is left behind.

    One exchange never breaks the others: one that cannot be converted or written is
    appended to ``left_out`` (method, redacted URL and reason) and the rest are written.
    Without ``left_out``, such an exchange raises StbError and nothing is written."""
    path = Path(path)
    exchanges = list(exchanges)
    found: list[LeftOut] = []
    converted = _converted(exchanges, rules, found)
    text, written = _serialized(converted, fmt, exchanges, rules, found)
    _refuse_partial(found, left_out)
    if not path.parent.is_dir():
        raise InputError(f"cannot write {path}: the directory {path.parent} does not exist")
    write_atomically(path, text)
    if left_out is not None:
        left_out.extend(found)
    return written


def format_for(path: str | os.PathLike, fmt: str | None = None) -> Format:
    """The chosen format, else the one the file name says (``.json``), else YAML."""
    if fmt:
        return fmt  # type: ignore[return-value]
    return "json" if str(path).lower().endswith(".json") else "yaml"


def _converted(exchanges: list[Exchange], rules: KeyRules, found: list[LeftOut]) -> list[tuple[int, dict]]:
    """(position, interaction) per exchange that converts; a LeftOut in ``found`` per one that does not."""
    out = []
    for index, exchange in enumerate(exchanges):
        try:
            out.append((index, _interaction(exchange, rules)))
        except Exception as exc:  # whatever one entry holds, the others are still exported
            found.append(LeftOut(index, _described(exchange, rules), _failure(exc, exchange, rules)))
    return out


def _interaction(ex: Exchange, rules: KeyRules) -> dict:
    secrets = secret_values(ex.request, rules)
    request = redact_request(ex.request, rules)
    response = redact_response(ex.response, secrets | secret_values(request, rules))
    response = response.with_header(SOURCE_HEADER, ex.source.value)
    return {
        # compat.convert_to_unicode: what vcr.serialize.serialize does to each side,
        # so a body that is UTF-8 becomes readable text and anything else stays bytes.
        "request": compat.convert_to_unicode({
            "body": request.body or None,
            "headers": _grouped(request.headers),  # as stored: see _yaml_ready
            "method": request.method,
            "uri": _uri_text(request.url),
        }),
        "response": compat.convert_to_unicode({
            "body": {"string": response.body},
            "headers": _grouped(response.headers, _response_header_value),
            "status": {"code": response.status, "message": response.reason or _reason(response.status)},
        }),
    }


def _serialized(converted: list[tuple[int, dict]], fmt: Format, exchanges: list[Exchange], rules: KeyRules,
                found: list[LeftOut]) -> tuple[str, int]:
    """The cassette text and how many interactions it holds. Should the whole document not
    serialize, each interaction is tried alone: those that fail go to ``found``, the rest
    are written. (A JSON cassette asked to hold bytes is refused whole: serialize says why.)"""
    try:
        return serialize(_document([interaction for _index, interaction in converted]), fmt), len(converted)
    except StbError:
        raise
    except Exception:
        pass  # one interaction (at least) cannot be written: find which, and write the others
    kept = []
    for index, interaction in converted:
        try:
            serialize(_document([interaction]), fmt)
        except StbError:
            raise
        except Exception as exc:
            # YAML text holds no lone surrogate: name the field that has one (after _yaml_ready
            # has made request header values bytes), else say what failed.
            unwritable = None
            if fmt == "yaml":
                unwritable = _unwritable(_yaml_ready(_document([interaction]))["interactions"][0])
            found.append(LeftOut(index, _described(exchanges[index], rules),
                                 unwritable or _failure(exc, exchanges[index], rules)))
        else:
            kept.append(interaction)
    found.sort(key=lambda item: item.index)
    return serialize(_document(kept), fmt), len(kept)


def _document(interactions: list[dict]) -> dict:
    return {"interactions": interactions, "version": CASSETTE_FORMAT_VERSION}


def _refuse_partial(found: list[LeftOut], left_out: list[LeftOut] | None) -> None:
    """A caller that gave no ``left_out`` list gets every exchange or an error, never a part."""
    if found and left_out is None:
        shown = "; ".join(map(str, found[:3])) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
        raise StbError(f"{len(found)} exchange(s) cannot be exported: {shown}")


# Header values and URLs as stored: request header values are the client's bytes read as UTF-8
# with surrogate escapes (a byte that is not UTF-8 becomes a lone surrogate, U+DC80-U+DCFF),
# response header values are the upstream's bytes read as Latin-1 (one character a byte).
# Text with a lone surrogate is written as the bytes it stands for. A request header value is
# written as bytes in YAML (!!binary, as vcrpy writes a bytes header value: YAML text cannot
# hold a surrogate) and as its \udcXX escapes in JSON (which holds no bytes); either is read
# back as the stored text. A response header value becomes the Latin-1 text of those bytes
# (vcrpy plays response headers as text), which the proxy sends as those bytes. A URL gets
# each such byte percent-encoded. Text that is UTF-8 already is written as it is.


def _yaml_ready(cassette: dict) -> dict:
    """The cassette with each request header value that YAML text cannot hold as bytes;
    the same document when there is none (as for all UTF-8 traffic)."""
    interactions = cassette.get("interactions")
    if not isinstance(interactions, list):
        return cassette
    ready = []
    for interaction in interactions:
        request = interaction.get("request") if isinstance(interaction, dict) else None
        headers = request.get("headers") if isinstance(request, dict) else None
        if isinstance(headers, dict):
            written = {name: _yaml_values(values) for name, values in headers.items()}
            if written != headers:
                interaction = {**interaction, "request": {**request, "headers": written}}
        ready.append(interaction)
    return {**cassette, "interactions": ready}


def _yaml_values(values: Any) -> Any:
    if isinstance(values, list):
        return [_request_header_value(v) if isinstance(v, str) else v for v in values]
    return _request_header_value(values) if isinstance(values, str) else values


def _request_header_value(value: str) -> str | bytes:
    return value if _is_utf8(value) else _as_bytes(value)


def _response_header_value(value: str) -> str:
    return value if _is_utf8(value) else _as_bytes(value).decode("latin-1")


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _uri_text(url: str) -> str:
    """The URL, with each byte that was not UTF-8 percent-encoded (``%FF``): the only way
    a URI may carry it, and text that YAML and JSON both hold."""
    if _is_utf8(url):
        return url
    return _ESCAPED_BYTE.sub(lambda m: f"%{ord(m.group()) - 0xDC00:02X}", url)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _as_bytes(text: str) -> bytes:
    """The bytes a surrogate-escaped text stands for (as the proxy sends a header upstream)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no byte decodes to: it cannot have come off the wire
        return text.encode("utf-8", "replace")


def _holds_bytes(value: Any) -> bool:
    if isinstance(value, bytes):
        return True
    if isinstance(value, dict):
        return any(_holds_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_bytes(v) for v in value)
    return False


def _described(ex: Exchange, rules: KeyRules) -> str:
    """The exchange as one safe line: method, redacted URL, store key."""
    try:
        named = f"{ex.request.method} {redact_url(ex.request, rules)} (key {ex.key})"
    except Exception:  # a request too odd to redact: the store key alone names it
        named = f"key {getattr(ex, 'key', '?')}"
    return _printable(named)


def _failure(exc: BaseException, ex: Exchange, rules: KeyRules) -> str:
    """Why an exchange could not be exported, with its secrets scrubbed."""
    message = str(exc)
    try:
        message = scrub_text(message, secret_values(ex.request, rules))
    except Exception:
        message = ""  # unscrubbable: the error's kind alone is said
    return _printable(_one_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__))


def _unwritable(value: Any, where: str = "") -> str | None:
    """Where an interaction holds text that no cassette can write (a lone surrogate), if anywhere."""
    if isinstance(value, str):
        if _is_utf8(value):
            return None
        bad = next(c for c in value if "\ud800" <= c <= "\udfff")
        return _printable(f"{where or 'a value'} holds {ascii(bad)[1:-1]}, a lone surrogate that no cassette "
                          "text can hold")
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        if isinstance(key, str) and not _is_utf8(key):
            return f"a name in {where or 'the interaction'} holds a lone surrogate that no cassette text can hold"
        inner = (f"{where}[{key!r}]" if isinstance(key, int) or where.endswith("headers")
                 else f"{where}.{key}" if where else str(key))
        found = _unwritable(item, inner)
        if found:
            return found
    return None


def _printable(text: str) -> str:
    """One terminal-safe line: controls and lone surrogates as backslash escapes."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


# -- import ---------------------------------------------------------------------------------


def is_flow_file(head: bytes) -> bool:
    """Whether the first bytes of a file look like a mitmproxy flow file (``mitmdump -w``)."""
    return bool(_FLOW_FILE.match(head))


def read_cassette(path: str | os.PathLike) -> tuple[list[Interaction], list[Problem]]:
    """The usable interactions of a YAML or JSON cassette and a problem per unusable one.

    Unreadable text, unsafe YAML tags, or a document that is not a version 1 cassette
    raise InputError naming the file; one bad interaction never stops the others.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a cassette (not UTF-8 text: {exc.reason} at byte {exc.start})") from exc
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
            raise InputError(f"{name}: invalid JSON: {exc}") from exc
    else:
        try:
            # vcrpy's loader is a SafeLoader: tags such as !!python/object/apply are refused
            # (ConstructorError), never executed; only a few inert tags vcrpy writes are read.
            data = yamlserializer.deserialize(text)
        except yaml.constructor.ConstructorError as exc:
            raise InputError(f"{name}: refused an unsafe or unknown YAML tag "
                             f"({_one_line(exc.problem or str(exc))}{_where(exc)}); nothing was constructed") from exc
        except yaml.YAMLError as exc:
            raise InputError(f"{name}: invalid YAML: {_one_line(str(exc))}") from exc
    if isinstance(data, list) and data and isinstance(data[0], dict) and "request" in data[0]:
        raise InputError(f"{name}: a cassette from vcrpy before 1.0 (no version); re-record it or migrate it "
                         "with python -m vcr.migration")
    if not isinstance(data, dict) or "interactions" not in data:
        raise InputError(f"{name}: not a vcrpy cassette (no top-level 'interactions')")
    version = data.get("version")
    if version != CASSETTE_FORMAT_VERSION:
        raise InputError(f"{name}: cassette format version {version!r} is not supported "
                         f"(only version {CASSETTE_FORMAT_VERSION})")
    if not isinstance(data["interactions"], list):
        raise InputError(f"{name}: 'interactions' must be a list, not {type(data['interactions']).__name__}")
    return data


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
                      meta: dict | None = None, recorded_source: str | None = None) -> Exchange:
    """The stored form of an outside exchange: keyed exactly as the proxy keys the request
    (API keys where the catalog maps it), redacted, with its origin (imported_origin)."""
    call = http_call(request, catalog, rules)
    stand_in = _stand_in_api(request)
    if stand_in is not None and call.api is None:
        call = replace(call, key=api_key(stand_in[0], stand_in[1], rules), api=stand_in[0])
    secrets = secret_values(request, rules)
    response = Response(response.status,
                        tuple((k, v) for k, v in response.headers
                              if k.lower() not in _FRAMING_HEADERS and k.lower() != SOURCE_HEADER.lower()),
                        response.body, response.reason)
    return Exchange(key=call.key, request=redact_request(request, rules), response=redact_response(response, secrets),
                    source=imported_origin(recorded_source), stored_at=now, api=call.api, meta=meta or {})


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


# -- helpers --------------------------------------------------------------------------------


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


def _grouped(headers: Headers, written=lambda value: value) -> dict[str, list]:
    """vcrpy's header form: each name (as first seen) with the list of its values, each as
    ``written`` makes it."""
    out: dict[str, list] = {}
    names: dict[str, str] = {}
    for name, value in headers:
        first = names.setdefault(name.lower(), name)
        out.setdefault(first, []).append(written(value))
    return out


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


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def _where(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    return f" at line {mark.line + 1}" if mark else ""


def _list(indexes: list[int]) -> str:
    shown = ", ".join(map(str, indexes[:10]))
    return shown + (f" and {len(indexes) - 10} more" if len(indexes) > 10 else "")
