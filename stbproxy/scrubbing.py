"""Known secret values out of any text, in every form they may be written in (redact.py
finds the values; keys and redact scrub with these functions).

A value is scrubbed in every form it may be echoed in, not only as it was decoded: each
character may appear as itself, percent-encoded (upper or lower hex, a space as ``+``,
escaped twice as ``%25XX``), JSON-escaped (``\\"``, ``\\\\``, ``\\/``, ``\\n``, ``\\uXXXX`` in
either case, surrogate pairs; escaped again, as a JSON text quoted in another) or as an
HTML character reference (decimal, hex or named), in any mix. One regular expression per
secret does it, built once and cached, whose first characters let the scanner skip ahead
(see _secret_pattern).

Only values that can be told from data are hunted so: one shorter than MIN_SECRET_CHARS,
one character repeated, or a placeholder (``password``, ``changeme``) would be found in
ordinary answers and corrupt them (see hunted).
"""

from __future__ import annotations

import html.entities
import re
from functools import lru_cache
from typing import Any

REDACTED = "REDACTED"
# A value shorter than this is not hunted in what is kept (an answer, a path, a key): it
# could not be told from ordinary data ("Milo", "1234") and scrubbing it would corrupt that
# data. Where it is named (a secret header, a secret field) it is REDACTED all the same.
MIN_SECRET_CHARS = 8
# Values too common to be told from data either, whatever their length (compared lower-cased).
PLACEHOLDERS = frozenset({"password", "passwd", "changeme", "undefined", "anonymous", "12345678", "123456789",
                          "1234567890", "redacted"})


def hunted(value: str) -> bool:
    """Whether a secret value is scrubbed wherever it appears: long enough, and neither one
    character repeated nor a placeholder (see MIN_SECRET_CHARS)."""
    return len(value) >= MIN_SECRET_CHARS and value.lower() not in PLACEHOLDERS and bool(value.strip(value[0]))


def scrub(data: bytes, secrets: frozenset[str]) -> bytes:
    """``data`` with every secret, in every form it may be echoed in, replaced by REDACTED."""
    if not secrets or not data:
        return data
    # Bytes are scanned as text: each byte that is not UTF-8 stands for itself
    # (surrogateescape) and comes back unchanged.
    text = data.decode("utf-8", "surrogateescape")
    found = 0
    for pattern in _scrubbers(secrets):
        text, count = pattern.subn(REDACTED, text)
        found += count
    return text.encode("utf-8", "surrogateescape") if found else data


def scrub_text(text: str, secrets: frozenset[str]) -> str:
    if not secrets or not text:
        return text
    for pattern in _scrubbers(secrets):
        text = pattern.sub(REDACTED, text)
    return text


def holds_secret(text: str, secrets: frozenset[str]) -> bool:
    """Whether ``text`` holds any of ``secrets`` in any form (scans only, nothing built)."""
    return bool(secrets and text) and any(pattern.search(text) for pattern in _scrubbers(secrets))


def scrub_value(value: Any, secrets: frozenset[str]) -> Any:
    """A JSON-like value (an entry's meta: error texts, reasons) with every secret scrubbed
    from its strings, keys included."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, dict):
        return {scrub_text(str(k), secrets): scrub_value(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_value(v, secrets) for v in value]
    return value


# -- the patterns ---------------------------------------------------------------------------


def _in_scrub_order(secrets: frozenset[str]) -> list[str]:
    # Longest first, so "Bearer sk-1" goes whole before "sk-1"; sorted, so that the
    # result does not depend on set iteration order (and a rerun stores the same bytes).
    return sorted(secrets, key=lambda s: (-len(s), s))


@lru_cache(maxsize=128)
def _scrubbers(secrets: frozenset[str]) -> tuple[re.Pattern[str], ...]:
    """The patterns of a set of secrets, applied in turn, longest secret first."""
    return tuple(_secret_pattern(secret) for secret in _in_scrub_order(secrets))


@lru_cache(maxsize=1024)
def _secret_pattern(secret: str) -> re.Pattern[str]:
    """One secret in every form: a group per character, of that character's forms.

    The first group's forms each begin with one literal character, so the regex engine
    scans only where one of those characters is (its charset prefix), which keeps a large
    body fast to scrub. One pattern per secret, cached on its own, keeps the building
    (in Python: milliseconds per secret) to once per secret, whatever set it comes in."""
    return re.compile("".join(_char_pattern(c) for c in secret))


def _char_pattern(c: str) -> str:
    forms = _char_forms(c)
    return forms[0] if len(forms) == 1 else "(?:" + "|".join(forms) + ")"


# One backslash or more, written so that the pattern starts with a literal one (see _secret_pattern).
_BACKSLASHES = r"\\(?:\\)*"
_JSON_SHORT = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}


def _html_names() -> dict[str, tuple[str, ...]]:
    """HTML's named character references of each character (``&sol;``, ``&eacute;``)."""
    names: dict[str, list[str]] = {}
    for name, text in html.entities.html5.items():
        if len(text) == 1 and name.endswith(";"):
            names.setdefault(text, []).append(name)
    return {c: tuple(sorted(found)) for c, found in names.items()}


_HTML_NAMED = _html_names()


@lru_cache(maxsize=4096)
def _char_forms(c: str) -> tuple[str, ...]:
    """The patterns of one character as an upstream may write it, each starting with a
    literal character: itself, percent-encoded (or twice), JSON-escaped (the backslash of
    the escape escaped again, any number of times: a JSON text quoted in another), an HTML
    reference (decimal, hex or named, letters and digits included)."""
    code = ord(c)
    utf8 = c.encode("utf-8", "surrogatepass")
    forms = [re.escape(c)]
    if 0xD800 <= code <= 0xDFFF:  # a lone surrogate (from a JSON escape): its bytes as scrub reads them
        forms.append(re.escape(utf8.decode("utf-8", "surrogateescape")))
    forms.append("".join("%(?:25)?" + _hex(byte, 2) for byte in utf8))
    if c == " ":
        forms.append(r"\+")
    if code > 0xFFFF:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(_BACKSLASHES + "u" + _hex(high, 4) + _BACKSLASHES + "u" + _hex(low, 4))
    else:
        forms.append(_BACKSLASHES + "u" + _hex(code, 4))
    if c in _JSON_SHORT:
        forms.append(_BACKSLASHES + re.escape(_JSON_SHORT[c]))
    forms.append(f"&#(?:0*{code}|[xX]0*{_hex(code, 1)});")
    forms.extend(f"&{re.escape(name)}" for name in _HTML_NAMED.get(c, ()))
    return tuple(forms)


def _hex(number: int, width: int) -> str:
    """Hex digits of ``number`` (at least ``width``) as a pattern that takes either case."""
    return "".join(f"[{d.lower()}{d}]" if d.isalpha() else d for d in f"{number:0{width}X}")
