"""Call-level metrics of a run against a reference run: no judge needed.

Per query, the run's tool calls (the ``Finish`` control call left out) are compared with
the reference's, in the spirit of API-Bank's metrics:

- **call accuracy**: the n-th reference call is matched when the run's n-th call is the
  same call; the share of reference calls matched;
- **order-free accuracy**: the share of reference calls the run made at any position
  (each run call matches at most one reference call);
- **ROUGE-L**: F1 of the run's final answer text against the reference's (rouge.py).

Two calls are the same call when they call the same function and pass the same
canonical arguments: stbcore's rule, the one the proxy keys its store with (values
compared as text, names sorted, secret and volatile fields left out). In StableToolBench
answers a function is named ``<api>_for_<tool>``, so within one benchmark the name
identifies the API. A mismatch is explained part by part (``api``, ``argument:<name>``,
``call`` when the run made no call there), the way a replay miss explains itself.
Queries without a usable run or reference answer are listed apart and never scored 0.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from stbcore.arguments import SECRET_FIELDS, arguments_digest, canonical_arguments

from .model import FINISH, Answer, AnswerSet, main_path, parse_finish, step_name
from .rouge import rouge_l
from .sources import load_queries, load_source

ABSENT = "<absent>"
# Reference answers keep each tool message as the text of a Python dict, cut to 100
# characters: when the cut falls inside the arguments, they are lost.
_CUT_SHORT = "cut short in the source"
_NOT_AN_OBJECT = "not a JSON object"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call as compared: the function and its canonical arguments."""

    api: str
    #: Canonical arguments (text values, sorted names); None when they could not be read.
    arguments: dict[str, str] | None
    #: Equal for two calls of the same function exactly when they are the same call.
    identity: str
    #: Why the arguments could not be read ("" when they could).
    unreadable: str = ""

    def same_call(self, other: ToolCall) -> bool:
        return self.api == other.api and self.identity == other.identity

    def as_dict(self) -> dict[str, Any]:
        """The call for reports; unreadable arguments are described, never shown (they may
        hold a secret that was never separated from the rest)."""
        if self.arguments is None:
            return {"api": self.api, "arguments": None, "unreadable": self.unreadable}
        return {"api": self.api, "arguments": self.arguments}


def tool_call(api: str, arguments: Any, left_out: frozenset[str] = SECRET_FIELDS) -> ToolCall:
    """A call from a function name and its arguments (a JSON text or an object)."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = {}  # no arguments at all, as /virtual reads an empty tool_input
    elif isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    if isinstance(arguments, dict):
        return ToolCall(api, canonical_arguments(arguments, left_out), arguments_digest(arguments, left_out))
    return _unreadable(api, arguments if isinstance(arguments, str) else json.dumps(arguments), _NOT_AN_OBJECT)


def _unreadable(api: str, raw: str, why: str) -> ToolCall:
    # Compared by their exact text, so a run still matches itself.
    return ToolCall(api, None, "raw:" + hashlib.sha256(raw.strip().encode("utf-8", "surrogatepass")).hexdigest(), why)


def calls_of(answer: Answer, left_out: frozenset[str] = SECRET_FIELDS) -> list[ToolCall]:
    """The tool calls on the answer's path, in order, ``Finish`` left out."""
    calls = []
    for node in main_path(answer.answer_details):
        if node.get("role") != "tool":
            continue
        message = node.get("message")
        if isinstance(message, dict):
            name = message.get("name")
            if isinstance(name, str) and name != FINISH:
                calls.append(tool_call(name, message.get("arguments"), left_out))
        elif isinstance(message, str):
            call = _call_from_text(node, message, left_out)
            if call is not None and call.api != FINISH:
                calls.append(call)
    return calls


def _call_from_text(node: dict[str, Any], text: str, left_out: frozenset[str]) -> ToolCall | None:
    """A tool message kept as the text of a Python dict (converted reference answers)."""
    parsed = _literal(text)
    if isinstance(parsed, dict) and isinstance(parsed.get("name"), str):
        return tool_call(parsed["name"], parsed.get("arguments"), left_out)
    name = step_name(node)
    if name is None:
        return None
    # Cut short: the arguments are whole when the cut falls after their closing quote.
    start = text.find(_ARGUMENTS_KEY)
    arguments = _leading_string(text[start + len(_ARGUMENTS_KEY):]) if start >= 0 else None
    return _unreadable(name, text, _CUT_SHORT) if arguments is None else tool_call(name, arguments, left_out)


_ARGUMENTS_KEY = "'arguments': "


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)  # literals only: nothing in the text is run
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _leading_string(text: str) -> str | None:
    """The Python string literal ``text`` starts with, when it is complete."""
    try:
        first = next(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, StopIteration):
        return None
    value = _literal(first.string) if first.type == tokenize.STRING else None
    return value if isinstance(value, str) else None


# --- comparing ------------------------------------------------------------------------

def differences(reference: ToolCall, got: ToolCall | None) -> list[dict[str, str]]:
    """The parts in which ``got`` differs from ``reference``; empty when they are the same call."""
    if got is None:
        return [{"part": "call", "reference": reference.api, "got": ABSENT}]
    if reference.api != got.api:
        return [{"part": "api", "reference": reference.api, "got": got.api}]
    if reference.arguments is None or got.arguments is None:
        if reference.identity == got.identity:
            return []
        return [{"part": "arguments", "reference": _described(reference), "got": _described(got)}]
    names = sorted(reference.arguments.keys() | got.arguments.keys())
    return [{"part": f"argument:{name}", "reference": reference.arguments.get(name, ABSENT),
             "got": got.arguments.get(name, ABSENT)}
            for name in names if reference.arguments.get(name) != got.arguments.get(name)]


def _described(call: ToolCall) -> str:
    if call.arguments is None:
        return f"<arguments {call.unreadable}>"
    return json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True, slots=True)
class Unmatched:
    """A reference call the run made nowhere, with the closest call the run had left."""

    reference: ToolCall
    closest: ToolCall | None
    differences: list[dict[str, str]]


@dataclass
class QueryCalls:
    """One query's comparison."""

    group: str
    query_id: str
    reference: list[ToolCall]
    run: list[ToolCall]
    #: Per reference call, how the run's call at the same position differs ([] = matched).
    positions: list[list[dict[str, str]]]
    order_free: int
    unmatched: list[Unmatched]
    #: Run calls that matched no reference call in any order.
    unmatched_run: list[ToolCall]
    #: ROUGE-L F1 of the final answers (0..1); None when the reference has no answer text.
    rouge_l: float | None

    @property
    def matched(self) -> int:
        return sum(not d for d in self.positions)

    @property
    def all_matched(self) -> bool:
        return self.matched == len(self.reference)

    @property
    def accuracy(self) -> float | None:
        return _percent(self.matched, len(self.reference))

    @property
    def order_free_accuracy(self) -> float | None:
        return _percent(self.order_free, len(self.reference))


def compare_answers(group: str, run: Answer, reference: Answer,
                    left_out: frozenset[str] = SECRET_FIELDS) -> QueryCalls:
    mine, theirs = calls_of(run, left_out), calls_of(reference, left_out)
    positions = [differences(ref, mine[i] if i < len(mine) else None) for i, ref in enumerate(theirs)]
    unused = list(mine)
    missed = []
    for ref in theirs:
        found = next((i for i, call in enumerate(unused) if call.same_call(ref)), None)
        if found is None:
            missed.append(ref)
        else:
            del unused[found]
    unmatched = [_closest(ref, unused) for ref in missed]
    return QueryCalls(group, reference.query_id, theirs, mine, positions, len(theirs) - len(missed),
                      unmatched, unused, _rouge(run, reference))


def _closest(reference: ToolCall, candidates: list[ToolCall]) -> Unmatched:
    """The candidate of the same function with the fewest differing parts, else the first one."""
    if not candidates:
        return Unmatched(reference, None, differences(reference, None))
    best = min(candidates, key=lambda c: (c.api != reference.api, len(differences(reference, c))))
    return Unmatched(reference, best, differences(reference, best))


def _rouge(run: Answer, reference: Answer) -> float | None:
    reference_text = parse_finish(reference.final_answer)[1]
    if not reference_text.strip():
        return None  # ROUGE-L against nothing is undefined (recall 0/0): not scored
    return rouge_l(reference_text, parse_finish(run.final_answer)[1])


# --- groups and runs ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Missing:
    """A query that cannot be scored: no usable answer on one side, and why."""

    group: str
    query_id: str
    reason: str


@dataclass
class GroupCalls:
    """The figures of one group (or of all of them)."""

    group: str
    queries: int
    results: list[QueryCalls] = field(default_factory=list)
    no_run: list[Missing] = field(default_factory=list)
    no_reference: list[Missing] = field(default_factory=list)

    @property
    def reference_calls(self) -> int:
        return sum(len(r.reference) for r in self.results)

    @property
    def run_calls(self) -> int:
        return sum(len(r.run) for r in self.results)

    @property
    def matched(self) -> int:
        return sum(r.matched for r in self.results)

    @property
    def order_free(self) -> int:
        return sum(r.order_free for r in self.results)

    @property
    def accuracy(self) -> float | None:
        """% of the reference calls matched in order; None when the reference made none."""
        return _percent(self.matched, self.reference_calls)

    @property
    def order_free_accuracy(self) -> float | None:
        return _percent(self.order_free, self.reference_calls)

    @property
    def rouge_scored(self) -> list[float]:
        return [r.rouge_l for r in self.results if r.rouge_l is not None]

    @property
    def rouge_l(self) -> float | None:
        """Mean ROUGE-L F1 x100 over the queries whose reference has an answer text."""
        scores = self.rouge_scored
        return 100 * sum(scores) / len(scores) if scores else None

    @property
    def mismatched(self) -> list[QueryCalls]:
        return [r for r in self.results if not r.all_matched]


def _percent(part: int, whole: int) -> float | None:
    return 100 * part / whole if whole else None


@dataclass
class CallsResult:
    run: str
    reference: str
    groups: list[GroupCalls]
    overall: GroupCalls
    left_out: frozenset[str]
    problems: list[str]


def compare_runs(run: AnswerSet, reference: AnswerSet, ids: dict[str, list[str]], *, run_name: str = "run",
                 reference_name: str = "reference", left_out: frozenset[str] = SECRET_FIELDS) -> CallsResult:
    """Compare every query of ``ids`` (query ids by group) between two loaded runs."""
    only_group = len(ids) == 1
    groups = []
    for group, qids in ids.items():
        mine = run.for_group(group, only_group=only_group)
        theirs = reference.for_group(group, only_group=only_group)
        scored = GroupCalls(group, len(qids))
        for qid in qids:
            ours, golden = mine.get(qid), theirs.get(qid)
            if not isinstance(golden, Answer):
                scored.no_reference.append(Missing(group, qid, _why_missing(golden)))
            if not isinstance(ours, Answer):
                scored.no_run.append(Missing(group, qid, _why_missing(ours)))
            if isinstance(ours, Answer) and isinstance(golden, Answer):
                scored.results.append(compare_answers(group, ours, golden, left_out))
        groups.append(scored)
    overall = GroupCalls("Overall", sum(g.queries for g in groups),
                         [r for g in groups for r in g.results],
                         [m for g in groups for m in g.no_run], [m for g in groups for m in g.no_reference])
    problems = [*(f"run: {p}" for p in run.problems), *(f"reference: {p}" for p in reference.problems)]
    return CallsResult(run_name, reference_name, groups, overall, left_out, problems)


def _why_missing(item: Any) -> str:
    return "no answer" if item is None else item.reason


def left_out_fields(volatile: Iterable[str] = ()) -> frozenset[str]:
    """The argument names never compared: the default secret fields plus ``volatile``."""
    return SECRET_FIELDS | frozenset(name.lower() for name in volatile)


def load_side(source: str | Path, *, seed: int = 0, queries: Iterable[str | Path] = ()) -> AnswerSet:
    """Anything ``eval`` reads: a file or folder, or a recording the embedding tool
    resolves (a session of stbproxy's store). ``queries`` (StableToolBench query files)
    name the conversations of cassettes and sessions that hold many of them."""
    index, problems = load_queries(queries)
    answers = load_source(str(source), seed=seed, queries=index)
    answers.problems[:0] = problems
    return answers
