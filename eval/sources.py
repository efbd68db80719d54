"""What an answers argument names: a file or folder, or a recording an outer tool holds.

stbeval reads files and never the proxy's store. A tool that embeds stbeval and keeps
recordings of its own (stbproxy's CLI, whose store holds sessions) registers a
resolver: given the text of ``--answers`` (``--candidate``, ``--reference``) that names
no file or folder, it returns that recording as a cassette document
(``{"interactions": [...]}``, as vcrpy's serializer reads it) with notes on anything it
had to leave out; None when the name is none of its business, or an InputError that
says why it cannot be read. The recording is then read like
a cassette that holds many conversations.

A tool may also register an expander: given one such text, it returns the several
source texts it stands for (stbproxy: a run name stands for its trial sessions
``NAME.t1`` .. ``NAME.tN``), each then read as above; ``pass-rate`` takes each as one
trial.
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
Expander = Callable[[str], list[str] | None]
_resolvers: list[Resolver] = []
_expanders: list[Expander] = []


def add_resolver(resolver: Resolver) -> None:
    """Let ``resolver`` answer for names that are not files (see the module docstring)."""
    if resolver not in _resolvers:
        _resolvers.append(resolver)


def add_expander(expander: Expander) -> None:
    """Let ``expander`` turn one source text into several (None: not one of its names)."""
    if expander not in _expanders:
        _expanders.append(expander)


def remove_expander(expander: Expander) -> None:
    if expander in _expanders:
        _expanders.remove(expander)


def expand_sources(texts: Iterable[str]) -> list[str]:
    """The source texts ``texts`` stand for, in order: a path stands for itself, and
    so does a name no expander knows."""
    expanded: list[str] = []
    for text in texts:
        parts = _expand(text)
        if parts is not None and not parts:
            raise InputError(f"{text}: names no trials")
        expanded.extend([text] if parts is None else parts)
    return expanded


def _expand(text: str) -> list[str] | None:
    if Path(text).exists():
        return None  # a file or folder is never a name
    for expander in _expanders:
        parts = expander(text)
        if parts is not None:
            return list(parts)
    return None


def load_source(text: str, *, seed: int = 0, queries: QueryIndex | None = None) -> AnswerSet:
    """The answers a command-line source names: a path, else a registered recording."""
    path = Path(text)
    if path.exists():
        return load_answers(path, seed=seed, queries=queries)
    for resolver in _resolvers:
        resolved = resolver(text)
        if resolved is not None:
            document, notes = resolved
            # a session's GET stream (an MCP client's, carried live) is never kept, as expected: no note
            notes = [note for note in notes if not (" GET " in note and "(never kept)" in note)]
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

