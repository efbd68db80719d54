"""Canonical arguments of one API call: when two calls pass the same arguments.

The one implementation of the rule, used by the proxy for its store keys
(``stbproxy.keys.api_key``) and by the evaluator to match an agent's calls with a
reference run's (``stbeval.calls``). Argument values are compared as text, so ``1``,
``"1"`` and ``?page=1`` agree (the same call arrives as a query string over HTTP and as
typed JSON over /virtual); names are sorted; secret and volatile fields are left out.
Standard library only.
"""

from __future__ import annotations

import hashlib
import math
from json import JSONEncoder
from typing import Any, Mapping

# The names StableToolBench's calls carry keys in: left out of the evaluator's call
# comparisons by default. The proxy's default secret names are these and more
# (stbproxy.keys.SECRET_FIELDS_DEFAULT: password, token, ...), matched whatever their case;
# the evaluator keeps to these four, so that its comparisons do not change.
SECRET_FIELDS = frozenset({"api_key", "apikey", "access_token", "toolbench_key"})

# Built once: json.dumps with options builds a new encoder on every call.
_SORTED_COMPACT = JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def arg_text(value: Any) -> str:
    """One argument value as text: strings as they are, anything else as compact sorted JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    # Plain numbers as JSON writes them (int.__repr__, float.__repr__), without the
    # encoder's per-call setup: most arguments are strings and numbers, and imports key
    # hundreds of thousands of calls.
    if type(value) is int:
        return int.__repr__(value)
    if type(value) is float and math.isfinite(value):
        return float.__repr__(value)
    return _SORTED_COMPACT.encode(value)


def canonical_arguments(args: Mapping[str, Any], left_out: frozenset[str] = SECRET_FIELDS) -> dict[str, str]:
    """The arguments that identify a call, as text, sorted by name.

    ``left_out`` holds lower-case names (secret and volatile fields) that never count.
    """
    return {name: arg_text(args[name]) for name in sorted(args) if name.lower() not in left_out}


def arguments_digest(args: Mapping[str, Any], left_out: frozenset[str] = SECRET_FIELDS) -> str:
    """32 hex digits that are equal exactly when the canonical arguments are equal."""
    material = _SORTED_COMPACT.encode(canonical_arguments(args, left_out))
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:32]
