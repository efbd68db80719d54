"""What an answers argument names: a file or folder, or a recording an outer tool holds.

stbeval reads files and never the proxy's store. A tool that embeds stbeval and keeps
recordings of its own (stbproxy's CLI, whose store holds sessions) registers a
resolver: given the text of ``--answers`` (``--candidate``, ``--reference``) that names
no file or folder, it returns that recording as a cassette document
(``{"interactions": [...]}``, as vcrpy's serializer reads it) with notes on anything it
had to leave out; None when the name is none of its business, or an InputError that
says why it cannot be read. The recording is then read like
a cassette that holds many conversations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from .answers import GROUP_RE, add_named, load_answers
from .cassettes import load_document
from .errors import InputError
from .model import AnswerSet
from .queries import Query, QueryIndex
from .solvable import load_tasks

Resolved = tuple[dict[str, Any], list[str]]  # (cassette document, notes)
Resolver = Callable[[str], Resolved | None]
_resolvers: list[Resolver] = []


def add_resolver(resolver: Resolver) -> None:
    """Let ``resolver`` answer for names that are not files (see the module docstring)."""
    if resolver not in _resolvers:
        _resolvers.append(resolver)


def load_source(text: str, *, seed: int = 0, queries: QueryIndex | None = None) -> AnswerSet:
    """The answers a command-line source names: a path, else a registered recording."""
    path = Path(text)
    if path.exists():
        return load_answers(path, seed=seed, queries=queries)
    for resolver in _resolvers:
        resolved = resolver(text)
        if resolved is not None:
            document, notes = resolved
            answers = AnswerSet(problems=list(notes))
            add_named(answers, None, *load_document(document, f"session {text}", queries))
            return answers
    what = "no such answers file or folder" + (" nor a recorded session" if _resolvers else "")
    raise InputError(f"{text}: {what}")


def load_queries(paths: Iterable[str | Path]) -> tuple[QueryIndex | None, list[str]]:
    """Queries from StableToolBench query files (or folders of them, or converted
    answers), and the problems met; None when no path is given."""
    paths = list(paths)
    if not paths:
        return None, []
    queries: list[Query] = []
    problems: list[str] = []
    for path in paths:
        tasks, more = load_tasks(path)
        problems.extend(more)
        queries.extend(Query(t.qid, t.query, t.group if GROUP_RE.match(t.group) else None) for t in tasks)
    if not queries:
        raise InputError(f"{', '.join(map(str, paths))}: no queries (expected lists of {{query, query_id}})")
    return QueryIndex(queries), problems

