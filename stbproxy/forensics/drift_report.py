"""``stbproxy drift``: what verify mode found, per API, from the sessions' records. Pure.

Each record of a call made in verify mode holds a ``drift`` object (engine/verify.py): its
verdict (same, status, shape, values; new when nothing was stored; unreachable when the
real API gave no answer), the API it counts under, and for a change the first differing
place with both values shortened (scrubbed of secrets before they were written).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from stbproxy.forensics.drift import SHAPE, STATUS, VALUES

CHANGES = (STATUS, SHAPE, VALUES)
COLUMNS = ("same", STATUS, SHAPE, VALUES, "new", "unreachable")


@dataclass
class ApiDrift:
    api: str
    counts: Counter = field(default_factory=Counter)
    first: dict | None = None  # the first change seen: verdict, path, stored, live, session, seq

    @property
    def changed(self) -> int:
        return sum(self.counts[verdict] for verdict in CHANGES)

    def to_dict(self) -> dict:
        return {"api": self.api, "checked": sum(self.counts.values()), "changed": self.changed,
                "counts": {name: self.counts[name] for name in COLUMNS if self.counts[name]},
                "first_change": self.first}


def drift_by_api(sessions: Iterable[tuple[str, Iterable[Mapping]]]) -> list[ApiDrift]:
    """Per API (in name order), the verdicts of every verified call of ``sessions``."""
    apis: dict[str, ApiDrift] = {}
    for name, records in sessions:
        for record in records:
            found = record.get("drift")
            if not isinstance(found, Mapping):
                continue
            api = str(found.get("api") or "?")
            entry = apis.setdefault(api, ApiDrift(api))
            verdict = str(found.get("verdict") or "?")
            entry.counts[verdict] += 1
            if verdict in CHANGES and entry.first is None:
                entry.first = {"verdict": verdict, "path": found.get("path", ""), "stored": found.get("stored", ""),
                               "live": found.get("live", ""), "origin": found.get("origin", ""), "session": name,
                               "seq": record.get("seq")}
    return [apis[api] for api in sorted(apis)]


def render(rows: list[ApiDrift]) -> str:
    """The table ``stbproxy drift`` prints, and one line per changed API saying where and how."""
    if not rows:
        return "no verified calls: run 'stbproxy serve --mode verify' and the agent first\n"
    width = max(len("api"), *(len(row.api) for row in rows))
    lines = [f"{'api':<{width}}  " + "  ".join(f"{name:>11}" for name in COLUMNS)]
    for row in rows:
        lines.append(f"{row.api:<{width}}  " + "  ".join(f"{row.counts[name]:>11}" for name in COLUMNS))
    changed = [(row.api, row.first) for row in rows if row.first]
    if changed:
        lines.append("")
    for api, first in changed:
        where = first["path"] or ("the status" if first["verdict"] == STATUS else "the body")
        # A stored answer that was not real (simulated, imported) is expected to differ: said so.
        origin = f", the stored answer {first['origin']}" if first["origin"] not in ("", "upstream") else ""
        lines.append(f"{api}: {first['verdict']} changed at {where}: stored {first['stored']}, "
                     f"now {first['live']} (session {first['session']}, call {first['seq']}{origin})")
    total = sum(row.changed for row in rows)
    checked = sum(sum(row.counts.values()) for row in rows)
    lines.append(f"{total} of {checked} verified calls changed, in {len(changed)} of {len(rows)} APIs")
    return "\n".join(lines) + "\n"
