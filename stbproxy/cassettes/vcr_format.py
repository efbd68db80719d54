"""Exchanges -> vcrpy cassettes (format version 1), written with vcrpy's own serializers
so that plain vcrpy replays what we export (reading.py reads them back), and the types
both directions share (Interaction, Problem, LeftOut).

No store, no click, no mitmproxy: the CLI hands exchanges in. Secrets are redacted again
on the way out (the store already holds redacted requests; this is the last line before
bytes leave the machine). An exchange that cannot be written is left out and named
(LeftOut), never allowed to stop the others.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from vcr.serialize import CASSETTE_FORMAT_VERSION
from vcr.serializers import compat, jsonserializer, yamlserializer

from stbproxy.atomic_files import write_atomically
from stbproxy.errors import InputError, StbError
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.models import Exchange, Headers, Request, Response
from stbproxy.provenance import SOURCE_HEADER  # in a cassette: the origin of each recorded answer
from stbproxy.redact import redact_request, redact_response, redact_url, scrub_text, secret_values
from stbproxy.stb.bodies import answer_headers

Format = Literal["yaml", "json"]
FORMATS: tuple[str, ...] = ("yaml", "json")


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
    for name, value in answer_headers(ex.meta):  # a StableToolBench answer's error text, or the whole object
        response = response.with_header(name, value)
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
        if isinstance(request, dict) and isinstance(headers, dict):
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
    return _printable(one_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__))


def _unwritable(value: Any, where: str = "") -> str | None:
    """Where an interaction holds text that no cassette can write (a lone surrogate), if anywhere."""
    if isinstance(value, str):
        if _is_utf8(value):
            return None
        bad = next(c for c in value if "\ud800" <= c <= "\udfff")
        return _printable(f"{where or 'a value'} holds {ascii(bad)[1:-1]}, a lone surrogate that no cassette "
                          "text can hold")
    items: Iterable[tuple[Any, Any]]
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


# -- helpers --------------------------------------------------------------------------------


def _grouped(headers: Headers, written=lambda value: value) -> dict[str, list]:
    """vcrpy's header form: each name (as first seen) with the list of its values, each as
    ``written`` makes it."""
    out: dict[str, list] = {}
    names: dict[str, str] = {}
    for name, value in headers:
        first = names.setdefault(name.lower(), name)
        out.setdefault(first, []).append(written(value))
    return out


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def _list(indexes: list[int]) -> str:
    shown = ", ".join(map(str, indexes[:10]))
    return shown + (f" and {len(indexes) - 10} more" if len(indexes) > 10 else "")
