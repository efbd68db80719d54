"""Every form an upstream may echo a secret in, computed here independently of redact (percent
encodings, ``+`` for a space, JSON escapes, the raw bytes), the forms of secrets found in a text,
and a multipart body built for the tests."""

from __future__ import annotations

import html
import json
import re
from urllib.parse import quote, quote_plus

JSON = ("Content-Type", "application/json")
FORM = ("Content-Type", "application/x-www-form-urlencoded")


# -- every form of a value, as the tests compute them (independently of redact) ---------------


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def _json_inner(value: str, ensure_ascii: bool = True) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii)[1:-1]


def _utf16(value: str) -> list[int]:
    data = value.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def echo_forms(value: str) -> dict[str, str]:
    """The forms an upstream may write ``value`` in, by name."""
    forms = {
        "decoded": value,
        "pct": quote(value, safe=""),
        "pct-lower": _lower_hex(quote(value, safe="")),
        "pct-slash": quote(value, safe="/"),  # Python's default: "/" kept
        "plus": quote_plus(value, safe=""),
        "plus-lower": _lower_hex(quote_plus(value, safe="")),
        "json": _json_inner(value),
        "json-utf8": _json_inner(value, ensure_ascii=False),
        "json-slash": _json_inner(value).replace("/", "\\/"),  # PHP's json_encode
        "json-u": "".join(f"\\u{unit:04x}" for unit in _utf16(value)),
        "json-U": "".join(f"\\u{unit:04X}" for unit in _utf16(value)),
        "pct-all": "".join(f"%{b:02X}" for b in value.encode()),
        "html": html.escape(value).replace("/", "&#x2F;"),
        "html-dec": "".join(f"&#{ord(c)};" for c in value),  # letters and digits too (issue 38, item 5)
        "html-hex": "".join(f"&#x{ord(c):x};" for c in value),
        "json-twice": _json_inner(_json_inner(value)),  # a JSON text quoted in another
    }
    return forms


def forbidden(secret: str, *raw: str) -> set[str]:
    """Every form of ``secret`` that must never be kept, with the raw texts it was sent as."""
    return {form for form in [*echo_forms(secret).values(), *raw] if len(form) >= 4}


def leaks(text: str | bytes, secrets: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(secret, form) for each form of each secret found in ``text``."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    return [(secret, form) for secret, forms in secrets.items() for form in forms if form in text]


def multipart(fields: list[tuple[str, str | bytes, str | None]], boundary: str = "b0undary-XyZ") -> tuple[str, bytes]:
    lines = []
    for name, value, filename in fields:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        lines.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
                     + (value if isinstance(value, bytes) else value.encode()) + b"\r\n")
    return f"multipart/form-data; boundary={boundary}", b"".join(lines) + f"--{boundary}--\r\n".encode()
