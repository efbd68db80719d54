"""The embedded store's keys: which prefix holds what, and a session record's key and bytes.

Keys are readable byte strings (see keys.py): ``http/...``, ``api/...``, ``mcp/...`` and
``openapi/...`` hold cache entries, ``log/...`` exchanges that are kept for the record but
never served (passthrough traffic), ``meta/<name>`` small JSON documents,
``session/<name>/<seq>`` the records of a session's log, ``seq`` twelve digits so that key
order is log order. The shared tier keeps entries and logged exchanges under the same keys.
"""

from __future__ import annotations

import json
from json import encoder as json_encoder
from typing import Any, Callable

# plain HTTP, catalog-routed APIs, MCP servers, operations of OpenAPI specs
ENTRY_PREFIXES = ("http/", "api/", "mcp/", "openapi/")
LOG_PREFIX = "log/"
META_PREFIX = "meta/"
SESSION_PREFIX = "session/"
_SESSION_JSON = json.JSONEncoder(separators=(",", ":"))  # ASCII: odd URLs round-trip


def _prebuilt(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` without making its C encoder again on each call, as the standard
    library's encode does (a session record is written on every request, hits included);
    the same text, checked at import."""
    make = getattr(json_encoder, "c_make_encoder", None)  # undocumented, so only if present and it agrees
    if make is None:  # a Python without the C accelerator
        return encoder.encode
    chunks = make(None, encoder.default, json_encoder.encode_basestring_ascii, None, encoder.key_separator,
                  encoder.item_separator, False, False, True)

    def encode(document: Any) -> str:
        return "".join(chunks(document, 0))

    sample = {"time": 1.5, "url": "/caf\u00e9?q=\"x\"", "status": 200, "error": None, "tool": ["a", True]}
    return encode if encode(sample) == encoder.encode(sample) else encoder.encode


_encode_session_json = _prebuilt(_SESSION_JSON)


def meta_key(name: str) -> bytes:
    return (META_PREFIX + name).encode()


def session_log_prefix(name: str) -> bytes:
    """The prefix of every record of session ``name``'s log."""
    return f"{SESSION_PREFIX}{name}/".encode()


def session_key(name: str, seq: int) -> bytes:
    return f"{SESSION_PREFIX}{name}/{seq:012d}".encode()


def encode_session_record(record: dict[str, Any]) -> bytes:
    return _encode_session_json(record).encode()
