"""A value as JSON inside an HTML page's ``<script type="application/json">`` block,
where nothing in it can close the block."""

from __future__ import annotations

import json
import math
import re
from typing import Any

_JSON_UNSAFE = re.compile("[<>&\u2028\u2029\ud800-\udfff]")


def embed_json(value: Any) -> str:
    """JSON for a ``<script type="application/json">`` block: nothing in it can end the
    block or the page's parse (``<``, ``>``, ``&``, U+2028, U+2029 and lone surrogates as
    ``\\uXXXX``); numbers that JSON cannot carry (NaN, infinities) become null."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:
        text = json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"), default=str)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
