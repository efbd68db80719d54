"""Why a replay found nothing: the request as it was keyed, and the stored request nearest
to it (same API, then same host and method, then same host, then any) with how the two
differ, part by part (keys.diff). Pure but for reading the store it is given. A call in a
view of the store (a user's) is shown only what that view and the shared part hold: never
another user's requests and their values.
"""

from __future__ import annotations

from stbproxy import keys
from stbproxy.forensics.naming import view_of
from stbproxy.keys import KeyRules
from stbproxy.models import Exchange
from stbproxy.redact import redact_url
from stbproxy.traffic.seam import Call

CLOSEST_SCAN_LIMIT = 5000  # bound the work a replay miss may do to explain itself


def explain_miss(call: Call, store, rules: KeyRules, note: str | None = None) -> dict:
    """The explanation of a replay miss (``note``: what the store says of it, if anything)."""
    incoming = keys.canonical(call.request, rules)
    explanation: dict = {
        "error": "stbproxy replay: no stored answer for this request",
        "request": {"method": incoming.method, "url": redact_url(call.request, rules)},
        "key": call.key,
        "closest": None,
    }
    if note:
        explanation["error"] = f"stbproxy replay: {note}"
        explanation["already_played"] = note
    found = closest(call, store, rules)
    if found is not None:
        stored, differences = found
        explanation["closest"] = {
            "key": stored.key,
            "method": stored.request.method,
            "url": stored.request.url,
            "differences": [{"part": d.part, "stored": d.expected, "got": d.actual} for d in differences],
        }
    return explanation


def closest(call: Call, store, rules: KeyRules) -> tuple[Exchange, list[keys.Difference]] | None:
    """The stored request nearest to this call (same API or host first), with the differences."""
    incoming = keys.canonical(call.request, rules)
    prefixes = [f"http/{incoming.host}/{incoming.method}/", f"http/{incoming.host}/", "http/"]
    if call.api is not None:
        prefixes.insert(0, keys.api_prefix(call.api))
    prefixes[:0] = call.facts.get("near", ())  # where its kind keeps calls like it (MCP: the server's method)
    view = view_of(call.key)
    for prefix in prefixes:
        best: tuple[int, Exchange, list[keys.Difference]] | None = None
        for n, stored in enumerate(store.scan(prefix)):
            if n >= CLOSEST_SCAN_LIMIT:
                break
            if view_of(stored.key) not in (None, view):
                continue
            differences = keys.diff(keys.canonical(stored.request, rules), incoming)
            if best is None or len(differences) < best[0]:
                best = (len(differences), stored, differences)
        if best is not None:
            return best[1], best[2]
    return None
