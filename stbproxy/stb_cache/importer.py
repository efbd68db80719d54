"""Reading StableToolBench's response cache into stbproxy entries.

Layout: ``<cache>/<category_key>/<tool_key>/<api_key>.json``, each file one JSON object
mapping ``str(args_dict)`` (a Python literal, not JSON: key order and value types are
the client's) to ``{"error": ..., "response": ...}``. Every entry is kept, a cached
failure too, since StableToolBench's server serves whatever its cache holds (with
``skip_failures``, failed answers are left out and asked for again). Under exact keys (the
default) an entry is keyed by the cache's own key text, which is what StableToolBench's
server looks a call up by; under canonical keys (keys.stb_api_key) by its arguments
compared as text, so ``{'b': 1, 'a': 2}`` and ``{'a': 2, 'b': '1'}`` meet. Argument names
are ToolBench's standardized ones (``is_id``, ``playerid``), which is also how the proxy
keys calls that arrive with the documented names. An answer object that is more than
``{"error", "response"}`` is kept whole (bodies.answer_parts), and served as it is cached.
Problems are reported per entry and never stop the import.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import signal
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Callable, ContextManager, Generator, Iterator

from stbproxy import keys
from stbproxy.errors import InputError
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.models import ApiRef, Exchange, Source
from stbproxy.redact import redact_request
from stbproxy.stb import validity
from stbproxy.stb.api_requests import VIRTUAL_HOST, stand_in_body, stand_in_request, stored_request
from stbproxy.stb.bodies import answer_parts, api_body_parts, is_plain_answer
from stbproxy.stb.catalog import ApiDoc, Catalog
from stbproxy.stb.traffic import keyed_back
from stbproxy.store.record_format import RecordTemplate, encode_exchange


@dataclass(frozen=True)
class Problem:
    file: str
    reason: str
    entry: str = ""  # the offending cache key, shortened

    def __str__(self) -> str:
        where = f"{self.file} [{self.entry}]" if self.entry else self.file
        return f"{where}: {self.reason}"


# A cache may hold problems in proportion to its size (0.7 % of entries in bench_import's
# generator: 70,000 at 10 million); a report shows the first ones and counts the rest.
PROBLEMS_KEPT = 50


@dataclass
class ImportSummary:
    files: int = 0
    files_done: int = 0  # files whose entries are written (an import stopped by Ctrl-C did not do all)
    entries: int = 0
    imported: int = 0
    duplicates: int = 0  # already stored, or the same canonical call twice in the cache
    failures: int = 0  # failed answers (check_result rejects them): kept, unless skip_failures
    skipped: int = 0  # ... of which left out (skip_failures)
    shared_sent: int = 0  # records offered to the shared tier (import --shared) ...
    shared_added: int = 0  # ... and those it did not hold yet
    unparseable: int = 0  # entries and files that could not be read ...
    problems: list[Problem] = field(default_factory=list)  # ... the first PROBLEMS_KEPT of them

    def problem(self, problem: Problem) -> None:
        self.unparseable += 1
        if len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(problem)

    def add_problems(self, count: int, first: list[Problem]) -> None:
        """Another summary's problems: ``count`` in all, of which ``first`` were kept."""
        self.unparseable += count
        self.problems.extend(first[:PROBLEMS_KEPT - len(self.problems)])


def cache_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise InputError(f"not a StableToolBench cache folder: {root}")
    return sorted(root.glob("*/*/*.json"))


@dataclass(frozen=True, slots=True)
class CachedEntry:
    text: str  # the cache's own key: str() of the arguments, as the client's call gave them
    args: dict
    value: dict  # the cached answer object
    failure: validity.FailureKind | None  # None: an answer check_result accepts


def read_cache_file(path: Path, root: Path, *, catalog: Catalog | None = None, rules: KeyRules = DEFAULT_RULES,
                    skip_failures: bool = False, now: float = 0.0, summary: ImportSummary) -> Iterator[Exchange]:
    """The entries of one cache file as Exchanges; problems go to ``summary``."""
    ref = api_of(path)
    doc = catalog.get(ref) if catalog is not None else None
    for entry in accepted_entries(path, root, skip_failures=skip_failures, summary=summary):
        yield entry_exchange(ref, doc, entry, rules=rules, now=now, catalog=catalog)


def api_of(path: Path) -> ApiRef:
    return ApiRef(path.parent.parent.name, path.parent.name, path.stem)


def accepted_entries(path: Path, root: Path, *, skip_failures: bool,
                     summary: ImportSummary) -> Iterator[CachedEntry]:
    """The entries of one cache file worth importing; the counts and problems go to ``summary``."""
    name = str(path.relative_to(root))
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        summary.problem(Problem(name, f"not a readable JSON file: {exc}"))
        return
    if not isinstance(document, dict):
        summary.problem(Problem(name, f"expected a JSON object of cached calls, found {type(document).__name__}"))
        return
    summary.entries += len(document)
    for raw_key, value in document.items():
        args = parse_args(raw_key)
        if not isinstance(args, dict):
            summary.problem(Problem(name, "cache key is not a Python dict literal", _short(raw_key)))
            continue
        if not isinstance(value, dict):  # an object without the two members is served as cached, whole
            summary.problem(Problem(name, "cached value is not an answer object", _short(raw_key)))
            continue
        failure = None
        if not validity.check_result(value):
            failure = validity.judge_object(value).failure
            summary.failures += 1
            if skip_failures:
                summary.skipped += 1
                continue
        yield CachedEntry(raw_key, args, value, failure)


def entry_key(ref: ApiRef, doc: ApiDoc | None, entry: CachedEntry, rules: KeyRules = DEFAULT_RULES) -> str:
    """The key of a cached entry: its own text under exact keys (rebuilt only when a secret
    or volatile argument must be left out of it), else its canonical arguments, where a
    documented spelling among them is keyed as the proxy keys it."""
    if rules.stb_keys == keys.EXACT:
        hidden = _hidden_names(entry.args, rules)
        return keys.exact_api_key(ref, keys.exact_arguments_text(entry.args, rules) if hidden else entry.text)
    return keys.api_key(ref, doc.key_args(entry.args) if doc is not None else entry.args, rules)


def _hidden_names(args: dict, rules: KeyRules) -> bool:
    """Whether the arguments hold a secret or volatile one (never keyed, never stored)."""
    return any(type(name) is str and name in rules.unkeyed_fields for name in args)


def entry_exchange(ref: ApiRef, doc: ApiDoc | None, entry: CachedEntry, *, rules: KeyRules = DEFAULT_RULES,
                   now: float, catalog: Catalog | None = None) -> Exchange:
    """One accepted cache entry as the Exchange it is stored as; ``catalog``, which holds
    ``doc``, reads its real request back."""
    response, meta = answer_parts(entry.value)
    meta["origin"] = "stb-cache"
    if entry.failure is not None:
        meta["failure"] = entry.failure.value
    key = entry_key(ref, doc, entry, rules)
    request = stored_request(ref, doc, entry.args)
    if request.host != VIRTUAL_HOST and rules.stb_keys == keys.EXACT and not keyed_back(catalog, request, key, rules):
        request = stand_in_request(ref, entry.args)  # the arguments as cached, so that a cassette keys them so
    return Exchange(
        key=key,
        request=redact_request(request, rules) if _hidden_names(entry.args, rules) else request,
        response=response,
        source=Source.IMPORTED,
        stored_at=now,
        api=ref,
        meta=meta,
    )


# The common cache key is a flat dict of plain scalars: {'city': 'Paris', 'days': 3}.
# Matching it with one regular expression is ~3x cheaper than compiling it with
# ast.literal_eval; anything else (escapes, quotes inside strings, nesting) falls back.
_STR = r"'[^'\\\n]*'"
_SCALAR = rf"(?:{_STR}|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|True|False|None)"
_FLAT_DICT = re.compile(rf"\{{(?:{_STR}: {_SCALAR}(?:, {_STR}: {_SCALAR})*)?\}}")
_PAIR = re.compile(rf"({_STR}): ({_SCALAR})")
_CONSTANTS = {"True": True, "False": False, "None": None}


def _scalar(text: str):
    """A number or constant of a flat literal (parse_args takes strings as they are)."""
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    return float(text) if any(c in text for c in ".eE") else int(text)


def parse_args(raw_key: str):
    """``str(args_dict)`` back into a dict; None when it is not a plain literal."""
    if raw_key.strip() in ("", "{}"):
        return {}
    if _FLAT_DICT.fullmatch(raw_key):
        return {key[1:-1]: value[1:-1] if value[0] == "'" else _scalar(value)
                for key, value in _PAIR.findall(raw_key)}
    try:
        return ast.literal_eval(raw_key)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        try:  # some dumps used JSON keys
            return json.loads(raw_key)
        except ValueError:
            return None


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


# -- encoding files, in parallel -------------------------------------------------------------
# Files are independent, so the costly part (parse, validate, key, encode) runs in worker
# processes, one per core; the importing process only checks for duplicates and writes.


@dataclass
class EncodedFile:
    records: list[tuple[str, bytes]]  # (key, encoded record), ready for Store.put_encoded_many
    entries: int
    failures: int
    skipped: int
    unparseable: int
    problems: list[Problem]  # the first of them


def encode_file(path: Path, root: Path, *, catalog: Catalog | None, rules: KeyRules = DEFAULT_RULES,
                skip_failures: bool = False, now: float) -> EncodedFile:
    summary = ImportSummary()
    ref = api_of(path)
    doc = catalog.get(ref) if catalog is not None else None
    entries = accepted_entries(path, root, skip_failures=skip_failures, summary=summary)
    if doc is None:
        records = list(_stand_in_records(ref, entries, rules, now))
    else:
        records = [(e.key, encode_exchange(e)) for e in (entry_exchange(ref, doc, entry, rules=rules, now=now,
                                                                        catalog=catalog) for entry in entries)]
    return EncodedFile(records, summary.entries, summary.failures, summary.skipped, summary.unparseable,
                       summary.problems)


def _stand_in_records(ref: ApiRef, entries: Iterator[CachedEntry], rules: KeyRules,
                      now: float) -> Iterator[tuple[str, bytes]]:
    """The records of an API the catalog does not know. Its entries' Exchanges differ only
    in the request body (the arguments), the answer's body, its content type (text or
    JSON), the cached error and its failure kind, so each record is made from a template
    of the first entry of its kind with the two bodies put in: the bytes of
    encode_exchange(entry_exchange()) at a fraction of the cost (no Exchange, no JSON head
    per entry). An answer kept whole, or arguments with a secret to leave out, take the
    plain way."""
    templates: dict[tuple, RecordTemplate] = {}
    for entry in entries:
        if not is_plain_answer(entry.value) or _hidden_names(entry.args, rules):
            exchange = entry_exchange(ref, None, entry, rules=rules, now=now)
            yield exchange.key, encode_exchange(exchange)
            continue
        headers, body = api_body_parts(entry.value["response"])
        kind = (headers, entry.value["error"], entry.failure)
        template = templates.get(kind)
        if template is None:
            template = templates[kind] = RecordTemplate(entry_exchange(ref, None, entry, rules=rules, now=now))
        yield entry_key(ref, None, entry, rules), template.record(stand_in_body(entry.args), body)


_WORKER: dict = {}


def _start_worker(root: str, catalog_file: str | None, rules: KeyRules, skip_failures: bool, now: float) -> None:
    # Ctrl-C is the importing process's to handle (it stops between two files); a worker
    # that took it too would die with a traceback and break the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER.update(root=Path(root), catalog=Catalog.load(catalog_file) if catalog_file else None,
                   rules=rules, skip_failures=skip_failures, now=now)


def _encode_in_worker(paths: list[str]) -> list[EncodedFile]:
    return [encode_file(Path(path), _WORKER["root"], catalog=_WORKER["catalog"], rules=_WORKER["rules"],
                        skip_failures=_WORKER["skip_failures"], now=_WORKER["now"]) for path in paths]


FILES_PER_TASK = 8
TASKS_AHEAD = 4  # per worker: enough to keep the workers busy, few enough to bound memory


def encoded_files(files: list[Path], root: Path, *, catalog_file: Path | None, rules: KeyRules = DEFAULT_RULES,
                  skip_failures: bool = False, now: float, jobs: int | None = None,
                  shield: Callable[[], ContextManager] = contextlib.nullcontext) -> Generator[EncodedFile, None, None]:
    """Every file encoded, in order; ``jobs`` worker processes (default: one per core).
    Workers run at most TASKS_AHEAD tasks ahead of the caller, so a caller slower than
    them (a busy store or shared tier) holds a few hundred files' records, not all.
    ``shield`` wraps the pool's shutdown and must keep a KeyboardInterrupt out of it: on
    Python 3.11 one that lands in its thread join leaves a thread that can never be
    joined, and the process hangs at exit."""
    jobs = jobs or os.cpu_count() or 1
    if jobs <= 1 or len(files) < 2 * jobs:
        catalog = Catalog.load(catalog_file) if catalog_file else None
        for path in files:
            yield encode_file(path, root, catalog=catalog, rules=rules, skip_failures=skip_failures, now=now)
        return
    tasks = ([str(p) for p in files[i:i + FILES_PER_TASK]] for i in range(0, len(files), FILES_PER_TASK))
    pool = ProcessPoolExecutor(jobs, initializer=_start_worker,
                               initargs=(str(root), str(catalog_file) if catalog_file else None, rules, skip_failures,
                                         now))
    try:
        pending = deque(pool.submit(_encode_in_worker, task) for task in islice(tasks, TASKS_AHEAD * jobs))
        while pending:
            done = pending.popleft().result()
            pending.extend(pool.submit(_encode_in_worker, task) for task in islice(tasks, 1))
            yield from done
    finally:  # a caller that stops early (Ctrl-C) waits for no more than the tasks already running
        with shield():
            pool.shutdown(wait=True, cancel_futures=True)
