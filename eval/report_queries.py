"""What a report shows of each query of a pass-rate run: ``details/queries.jsonl``, one
line per query with its status per round, the judge's reasons and its trajectory, each
tool step with how the proxy answered it (source and store key) where the answers were
rebuilt from traffic. Values under secret member names (stbcore's SECRET_FIELDS) are
masked in every text kept.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from stbcore.arguments import SECRET_FIELDS

from .model import FINISH, main_path
from .passrate import Outcome

QUERIES_FILE = "queries.jsonl"
MASK = "[redacted]"
_SECRET_NAMES = "|".join(sorted(re.escape(name) for name in SECRET_FIELDS))
# A secret member in text that is not JSON: a Python dict's text, a query string.
_SECRET_IN_TEXT = re.compile(rf"""(?i)(["']?(?:{_SECRET_NAMES})["']?\s*[:=]\s*["']?)([^"'&,\s}}]+)""")


def query_record(group: str, outcome: Outcome, rounds: int) -> dict[str, Any]:
    """What the report shows of one query of a pass-rate run."""
    answer = outcome.answer
    trajectory = steps_of(answer) if answer is not None else []
    return {
        "group": group,
        "id": outcome.qid,
        "query": masked(answer.query) if answer is not None else "",
        "final_answer": masked(answer.final_answer) if answer is not None else "",
        "status": [outcome.status(r).lower() for r in range(rounds)],
        "reasons": [masked(outcome.reasons[r] or "") for r in range(rounds)],
        "steps": len(trajectory),
        "sources": count_sources(step.get("source") for step in trajectory),
        "trajectory": trajectory,
    }


def write_queries(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def steps_of(answer: Any) -> list[dict[str, Any]]:
    """The answer's path as report steps; tool steps carry how each call was answered."""
    calls: Iterator[dict[str, Any]] = iter(getattr(answer, "calls", ()) or ())
    steps = []
    for node in main_path(answer.answer_details):
        role, message = node.get("role", ""), node.get("message")
        if role == "tool":
            steps.append(_tool_step(message, calls))
        elif message:
            steps.append(_step(role, text=masked(_text(message))))
    return steps


def _tool_step(message: Any, calls: Iterator[dict[str, Any]]) -> dict[str, Any]:
    if not isinstance(message, dict):  # a converted file's tool message: the text of a dict
        return _step("tool", text=masked(_text(message)))
    name = str(message.get("name", ""))
    answered: dict[str, Any] = {} if name == FINISH else next(calls, {})
    return _step("tool", tool={"name": name, "arguments": masked(_text(message.get("arguments", "")))},
                 answer=masked(_text(message.get("response", ""))), source=answered.get("source"),
                 key=answered.get("key"))


def _step(role: str, *, text: str = "", tool: dict | None = None, answer: str | None = None,
          source: str | None = None, key: str | None = None) -> dict[str, Any]:
    return {"role": role, "text": text, "tool": tool, "answer": answer, "source": source, "key": key}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def masked(text: str) -> str:
    """``text`` with the values of secret members masked, JSON or not."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return _SECRET_IN_TEXT.sub(lambda m: m.group(1) + MASK, text)
    if not isinstance(value, (dict, list)):
        return text
    cleaned = _mask_json(value)
    return text if cleaned == value else json.dumps(cleaned, ensure_ascii=False)


def _mask_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: MASK if str(k).lower() in SECRET_FIELDS else _mask_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_json(v) for v in value]
    if isinstance(value, str) and value[:1] in "{[":
        return masked(value)  # JSON inside a string (a tool's arguments as the agent wrote them)
    return value


def count_sources(sources: Iterable[str | None]) -> dict[str, int]:
    """Calls by how they were answered; calls whose source is not known are not counted."""
    counts: dict[str, int] = {}
    for source in sources:
        if source:
            counts[source] = counts.get(source, 0) + 1
    return counts
