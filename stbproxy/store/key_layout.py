"""The embedded store's keys: which prefix holds what, and a session record's key and bytes.

Keys are readable byte strings (see keys.py): ``http/...``, ``api/...``, ``mcp/...`` and
``openapi/...`` hold cache entries, ``log/...`` exchanges that are kept for the record but
never served (passthrough traffic), ``meta/<name>`` small JSON documents,
``session/<name>/<seq>`` the records of a session's log, ``seq`` twelve digits so that key
order is log order. The shared tier keeps entries and logged exchanges under the same keys.
"""

from __future__ import annotations

import json
from typing import Any

# plain HTTP, catalog-routed APIs, MCP servers, operations of OpenAPI specs
ENTRY_PREFIXES = ("http/", "api/", "mcp/", "openapi/")
LOG_PREFIX = "log/"
META_PREFIX = "meta/"
SESSION_PREFIX = "session/"
_SESSION_JSON = json.JSONEncoder(separators=(",", ":"))  # ASCII: odd URLs round-trip


def meta_key(name: str) -> bytes:
    return (META_PREFIX + name).encode()


def session_log_prefix(name: str) -> bytes:
    """The prefix of every record of session ``name``'s log."""
    return f"{SESSION_PREFIX}{name}/".encode()


def session_key(name: str, seq: int) -> bytes:
    return f"{SESSION_PREFIX}{name}/{seq:012d}".encode()


def encode_session_record(record: dict[str, Any]) -> bytes:
    return _SESSION_JSON.encode(record).encode()
