"""``eval exec``: execution-scored REST tasks, every command sent through the proxy.

For each item of an items file (docs/formats.md), in the file's order: its labels (the
ground-truth curl commands) run first, then the first line of its generation that
begins with ``curl``; each command is read by exec_curl.py (never by a shell), checked
against the hosts its task allows, fitted by its task's profile (exec_profiles.py), given
the key, and sent through the proxy (exec_http.py). What the proxy answers is judged by
the profile (crashed or not) and the prediction's answer is compared with the labels'
(exec_score.py). One command at a time: the APIs of such tasks keep state, and the
order is part of what was recorded.

A replay miss (the proxy's ``X-Stb-Source: miss``) is an explained failure of that
command, never an error of the run; an item none of whose labels has an answer is
unscored (left out of the rates) and says why. Keys come from environment variables and
go only into the requests: every text kept or printed (answers, reasons, errors) has
them taken out, in the forms a server may echo them (as sent, percent-encoded).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import quote, quote_plus

from .errors import InputError
from .exec_curl import CurlRequest, Refused, first_curl_line, parse_curl, with_key
from .exec_http import Reply, Sender
from .exec_profiles import PROFILES, Profile
from .exec_score import CRASHED, DIFFERS, MISSED, NOT_EXECUTABLE, SUCCESS, UNSCORED, Tally, best, items_of
from .runner import Progress

MASK = "[redacted]"
MAX_TEXT = 20_000  # characters of an answer kept in a run's files
# What a command got: an answer to compare, or none (and why).
ANSWERED, FAILED, REFUSED, MISS = "answered", "crashed", "refused", "missed"
_NO_ANSWER_SOURCES = {"error": "the proxy got no answer from the API", "unavailable": "the API could not answer",
                      "simulated-error": "the proxy's simulator failed"}


# -- the items file ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Item:
    id: str
    task: str
    query: str
    generation: str
    labels: tuple[str, ...]


def load_items(path: Path, default_task: str) -> list[Item]:
    """The items of a JSON file (a list, or ``{"items": [...]}``) or a JSON Lines file;
    InputError naming the file, the item and the problem for anything else."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    rows: list[tuple[str, Any]] = []
    stripped = text.lstrip()
    try:
        whole = json.loads(text) if stripped.startswith(("[", "{")) else None
    except ValueError:
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("items"), list):
        whole = whole["items"]
    if isinstance(whole, list):
        rows = [(f"item {i + 1}", row) for i, row in enumerate(whole)]
    elif isinstance(whole, dict) and "id" in whole and len(text.strip().splitlines()) == 1:
        rows = [("line 1", whole)]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((f"line {number}", json.loads(line)))
            except ValueError as exc:
                raise InputError(f"{path}: line {number} is not JSON ({exc}); items are a JSON list or one JSON "
                                 "object per line (docs/formats.md)") from None
    items, seen = [], set()
    for where, row in rows:
        item = _item(row, default_task, f"{path}: {where}")
        if item.id in seen:
            raise InputError(f"{path}: {where}: the id {item.id!r} is given twice")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise InputError(f"{path}: no items")
    return items


def _item(row: Any, default_task: str, where: str) -> Item:
    if not isinstance(row, dict):
        raise InputError(f"{where}: not a JSON object")
    ident = row.get("id")
    if isinstance(ident, bool) or not isinstance(ident, (str, int)) or str(ident) == "":
        raise InputError(f"{where}: 'id' must be a string or an integer")
    task = row.get("task", default_task)
    if task not in PROFILES:
        raise InputError(f"{where}: unknown task {task!r} (one of {', '.join(PROFILES)})")
    generation = row.get("generation", "")
    if not isinstance(generation, str):
        raise InputError(f"{where}: 'generation' must be a string")
    query = row.get("query", "")
    if not isinstance(query, str):
        raise InputError(f"{where}: 'query' must be a string")
    labels = row.get("labels")
    if isinstance(labels, str):
        labels = [labels]
    if not isinstance(labels, list) or not labels or not all(isinstance(x, str) and x.strip() for x in labels):
        raise InputError(f"{where}: 'labels' must be one curl command or a non-empty list of them")
    return Item(str(ident), task, query, generation, tuple(label.strip() for label in labels))


# -- keys ------------------------------------------------------------------------------------------

@dataclass
class Keys:
    """Each task's key: the environment variable named for it, and its value (never kept)."""

    env: dict[str, str | None]  # task -> variable name (None: the task has none)
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, tasks: Iterable[str], overrides: dict[str, str], environ: Mapping[str, str] | None = None) -> Keys:
        environ = os.environ if environ is None else environ
        env = {task: overrides.get(task, PROFILES[task].key_env) for task in tasks}
        values = {task: environ[name] for task, name in env.items() if name and environ.get(name)}
        return cls(env, values)

    def scrub(self, text: str) -> str:
        for form in self._forms():
            if form in text:
                text = text.replace(form, MASK)
        return text

    def _forms(self) -> list[str]:
        forms = {form for key in self.values.values() for form in (key, quote(key, safe=""), quote_plus(key))}
        return sorted(forms, key=len, reverse=True)

    def described(self) -> dict[str, dict[str, Any]]:
        return {task: {"env": name, "set": task in self.values} for task, name in self.env.items()}


# -- one command ---------------------------------------------------------------------------------

@dataclass
class Executed:
    """What one command got. ``command`` is the line as written (the key never in it)."""

    command: str | None
    status: str  # ANSWERED, FAILED, REFUSED or MISS
    reason: str = ""
    http_status: int | None = None
    source: str | None = None  # the proxy's X-Stb-Source
    origin: str | None = None  # its X-Stb-Origin
    text: str = ""  # the answer as curl would print it, the keys taken out, cut to MAX_TEXT
    items: dict[str, Any] | None = None  # what is compared, when ANSWERED

    def record(self) -> dict[str, Any]:
        return {"command": self.command, "status": self.status, "reason": self.reason,
                "http_status": self.http_status, "source": self.source, "origin": self.origin,
                "answer": self.text}


class Allowed:
    """The hosts a task's commands may reach: the profile's and ``--allow-host``'s.
    ``host`` allows any port of it, ``host:port`` that port."""

    def __init__(self, profile: Profile, extra: Iterable[str]) -> None:
        self.profile = profile
        self.hosts = tuple(dict.fromkeys(h.lower().strip() for h in (*profile.hosts, *extra) if h.strip()))

    def __call__(self, host: str) -> str | None:
        """None when ``host`` is allowed, else why not."""
        if host in self.hosts or host.rsplit(":", 1)[0] in self.hosts:
            return None
        listed = ", ".join(self.hosts) if self.hosts else "none; name them with --allow-host"
        return f"the host {host} is not allowed for the task {self.profile.name} (allowed: {listed})"


def execute(line: str | None, profile: Profile, allowed: Allowed, keys: Keys, sender: Sender) -> Executed:
    """Run one command line (None: the generation had none) through the proxy."""
    if line is None:
        return Executed(None, REFUSED, "no line of the generation begins with curl")
    shown = keys.scrub(line)
    try:
        request = parse_curl(line)
    except Refused as exc:
        return Executed(shown, REFUSED, keys.scrub(str(exc)))
    why = allowed(request.host)
    if why:
        return Executed(shown, REFUSED, why)
    key = keys.values.get(profile.name)
    request = with_key(profile.prepare(request), key)
    for header in profile.key_headers:
        request = request.with_header(header, key)
    return judge(shown, request, sender.send(request, allowed), profile, keys)


def judge(shown: str, request: CurlRequest, reply: Reply, profile: Profile, keys: Keys) -> Executed:
    """What a command's reply counts as, by the proxy's headers, curl's options and the profile."""
    source, origin = reply.headers.get("x-stb-source"), reply.headers.get("x-stb-origin")
    done = Executed(shown, FAILED, http_status=reply.status, source=source, origin=origin,
                    text=_cut(keys.scrub(_decoded(reply.body))))
    if reply.error:
        done.reason = keys.scrub(reply.error)
    elif source == "miss":
        done.status, done.reason = MISS, keys.scrub(_miss_reason(reply.body))
    elif source in _NO_ANSWER_SOURCES:
        done.reason = f"{_NO_ANSWER_SOURCES[source]} (X-Stb-Source: {source}, HTTP {reply.status})"
    elif request.fail_on_error and (reply.status or 0) >= 400:
        done.reason = f"curl -f fails on HTTP {reply.status}"
    elif request.include_headers:
        done.reason = "not JSON: -i and -I print the answer's head before its body"
    else:
        try:
            answer = json.loads(reply.body)
        except (ValueError, UnicodeDecodeError):
            done.reason = f"not JSON (HTTP {reply.status}, {len(reply.body)} bytes)"
            return done
        failure = profile.failure(answer)
        if failure:
            done.reason = keys.scrub(failure)
        else:
            done.status, done.items = ANSWERED, json.loads(keys.scrub(json.dumps(items_of(answer, profile.dropped))))
    return done


def _decoded(body: bytes) -> str:
    return body.decode("utf-8", errors="replace")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... ({len(text) - MAX_TEXT} more characters)"


def _miss_reason(body: bytes) -> str:
    """The proxy's explanation of a replay miss, in one line."""
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    closest = document.get("closest") if isinstance(document, dict) else None
    if not isinstance(closest, dict):
        return "replay miss: no stored answer for this request, and no stored request like it"
    differences = [d for d in closest.get("differences") or [] if isinstance(d, dict)]
    parts = [f"{d.get('part')} (stored {_short(d.get('stored'))}, got {_short(d.get('got'))})" for d in differences[:3]]
    more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
    return ("replay miss: no stored answer for this request; the closest stored one differs in "
            + (", ".join(parts) + more if parts else "its key"))


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return repr(text if len(text) <= 60 else text[:57] + "...")


# -- a run ---------------------------------------------------------------------------------------

@dataclass
class ItemResult:
    item: Item
    labels: list[Executed]
    prediction: Executed | None  # None in a labels-only run
    status: str = UNSCORED
    reason: str = ""
    precision: float = 0.0
    recall: float = 0.0
    f1: float = 0.0
    best_label: int | None = None  # 0-based
    differing: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """Everything a report shows of the item (keys already taken out)."""
        prediction = self.prediction
        chosen = self.labels[self.best_label] if self.best_label is not None else None
        differing = []
        if prediction is not None and prediction.items is not None and chosen is not None and chosen.items is not None:
            for name in self.differing:
                differing.append({"item": name, "prediction": _value_text(prediction.items, name),
                                  "label": _value_text(chosen.items, name)})
        return {"id": self.item.id, "task": self.item.task, "query": self.item.query, "status": self.status,
                "reason": self.reason, "precision": self.precision, "recall": self.recall, "f1": self.f1,
                "best_label": None if self.best_label is None else self.best_label + 1,
                "prediction": prediction.record() if prediction is not None else None,
                "labels": [label.record() for label in self.labels], "differing": differing}


def _value_text(items: dict[str, Any], name: str) -> str | None:
    if name not in items:
        return None
    text = json.dumps(items[name], ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 2000 else text[:2000] + "..."


@dataclass
class ExecRun:
    results: list[ItemResult]
    keys: Keys
    labels_only: bool

    def tallies(self) -> tuple[list[Tally], Tally]:
        tasks: dict[str, Tally] = {}
        overall = Tally("Overall")
        for result in self.results:
            tally = tasks.setdefault(result.item.task, Tally(result.item.task))
            for one in (tally, overall):
                one.add(result.status, result.precision, result.recall, result.f1)
        return list(tasks.values()), overall

    def sources(self) -> dict[str, dict[str, int]]:
        """How the proxy answered, counted for the predictions and for the labels."""
        predictions = Counter(r.prediction.source for r in self.results
                              if r.prediction is not None and r.prediction.source)
        labels = Counter(label.source for r in self.results for label in r.labels if label.source)
        return {"predictions": dict(sorted(predictions.items())), "labels": dict(sorted(labels.items()))}


def score(result: ItemResult) -> None:
    """The item's status and scores from its commands' answers."""
    answers = [label.items if label.status == ANSWERED else None for label in result.labels]
    if all(answer is None for answer in answers):
        reasons = "; ".join(f"label {i + 1}: {label.status}, {label.reason}" for i, label in enumerate(result.labels))
        result.status, result.reason = UNSCORED, f"no label has an answer ({reasons})"
        return
    prediction = result.prediction
    assert prediction is not None
    if prediction.status != ANSWERED:
        result.status = {REFUSED: NOT_EXECUTABLE, MISS: MISSED}.get(prediction.status, CRASHED)
        result.reason = prediction.reason
        result.best_label = next(i for i, answer in enumerate(answers) if answer is not None)
        return
    index, comparison = best(prediction.items or {}, answers)
    assert comparison is not None and index is not None
    result.best_label = index
    result.precision, result.recall, result.f1 = comparison.precision, comparison.recall, comparison.f1
    result.differing = comparison.differing
    if comparison.f1 == 1.0:
        result.status = SUCCESS
    else:
        result.status = DIFFERS
        shown = ", ".join(comparison.differing[:5]) + (" ..." if len(comparison.differing) > 5 else "")
        result.reason = f"{comparison.equal} equal items; differ: {shown}"


def run(items: list[Item], sender: Sender, keys: Keys, extra_hosts: Iterable[str] = (), *, labels_only: bool = False,
        progress: Progress | None = None, warn: Callable[[str], None] = lambda _m: None) -> ExecRun:
    progress = progress or Progress()
    progress.start(len(items))
    extra = tuple(extra_hosts)
    allowed = {task: Allowed(PROFILES[task], extra) for task in {item.task for item in items}}
    results = []
    for item in items:
        profile = PROFILES[item.task]
        labels = [execute(label, profile, allowed[item.task], keys, sender) for label in item.labels]
        for number, label in enumerate(labels, 1):
            if label.status != ANSWERED:
                warn(f"item {item.id}: label {number} has no answer: {label.status}, {label.reason}")
            elif label.origin == "simulated":
                warn(f"item {item.id}: label {number}'s answer was made up by the proxy's simulator "
                     "(X-Stb-Origin: simulated)")
        prediction = None
        if not labels_only:
            prediction = execute(first_curl_line(item.generation), profile, allowed[item.task], keys, sender)
            if prediction.origin == "simulated":
                warn(f"item {item.id}: the prediction's answer was made up by the proxy's simulator "
                     "(X-Stb-Origin: simulated)")
        result = ItemResult(item, labels, prediction)
        if not labels_only:
            score(result)
        results.append(result)
        progress.step()
    return ExecRun(results, keys, labels_only)
