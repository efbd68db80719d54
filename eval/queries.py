"""Which query a recorded conversation worked on: its user task matched to query files.

StableToolBench's query files list ``{query, query_id, ...}``. A conversation gets a
query's id when its user task has the query's text, compared with whitespace collapsed.
ToolBench's agents send the task as ``"\\n<query>\\nBegin!\\n"``, so a trailing
``Begin!`` is not part of the task. An agent that wraps the task in a template of its
own still matches when exactly one query's text appears whole in the task. Anything
else is no match, with the reason: ids are never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

_TOOLBENCH_TRAILER = re.compile(r"\s*Begin!\s*$")
FIRST_WORDS = 8


@dataclass(frozen=True, slots=True)
class Query:
    query_id: str
    text: str
    group: str | None  # G1_instruction, ... when its file is named by group


def normalize(text: str) -> str:
    return " ".join(text.split())


def task_text(user_message: str) -> str:
    """The task a user message states: ToolBench's trailing ``Begin!`` left out."""
    return _TOOLBENCH_TRAILER.sub("", user_message).strip()


def first_words(text: str, n: int = FIRST_WORDS) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


class QueryIndex:
    """Queries by their normalized text."""

    def __init__(self, queries: Iterable[Query]) -> None:
        self.by_text: dict[str, list[Query]] = {}
        for query in queries:
            key = normalize(query.text)
            if key and query not in self.by_text.get(key, []):
                self.by_text.setdefault(key, []).append(query)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_text.values())

    def match(self, user_message: str) -> Query | str:
        """The query a conversation's first user message states, or why there is none."""
        whole = normalize(user_message)
        task = normalize(task_text(user_message))
        found = self.by_text.get(task) or self.by_text.get(whole)
        if not found:
            inside = [key for key in self.by_text if key in whole]
            # A query text inside another matching one is part of it, not a second match.
            inside = [key for key in inside if not any(key != other and key in other for other in inside)]
            if len(inside) > 1:
                return f"its task holds the text of {len(inside)} queries"
            found = self.by_text.get(inside[0]) if inside else None
        if not found:
            return "matches no query"
        if len(found) > 1:
            named = ", ".join(f"{q.query_id} ({q.group})" if q.group else q.query_id for q in found)
            return f"matches several queries: {named}"
        return found[0]
