"""What changes on every call of an API and says nothing about its answer: timestamps and
request ids. The proxy's verify mode leaves them out of its comparisons by default
(stbproxy/forensics/drift.py), and so does a report that compares two runs' answers."""

from __future__ import annotations

import json
import re
from typing import Any

TIME_MEMBERS = ("timestamp", "ts", "time", "date", "datetime", "created", "created_at", "createdAt",
                "updated", "updated_at", "updatedAt", "last_updated", "server_time", "generated_at", "expires_at")
REQUEST_ID_MEMBERS = ("request_id", "requestId", "trace_id", "traceId", "correlation_id", "nonce")
VOLATILE_MEMBERS = frozenset((*TIME_MEMBERS, *REQUEST_ID_MEMBERS))
ISO_TIME = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$"
_ISO_TIME = re.compile(ISO_TIME)


def steady(value: Any) -> Any:
    """``value`` without its volatile members, and with ISO times made alike."""
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items() if k not in VOLATILE_MEMBERS}
    if isinstance(value, list):
        return [steady(v) for v in value]
    if isinstance(value, str) and _ISO_TIME.match(value):
        return "<time>"
    return value


def same_answer(a: str | None, b: str | None) -> bool:
    """Whether two answer texts say the same, volatile parts aside (JSON), or are equal."""
    if a == b:
        return True
    if a is None or b is None:
        return False
    try:
        return bool(steady(json.loads(a)) == steady(json.loads(b)))
    except (ValueError, RecursionError):
        return False
