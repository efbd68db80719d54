"""A regression check for tests: does a fresh run still make the calls the golden run made?

    from stbeval.callcheck import assert_call_accuracy

    def test_agent_keeps_its_calls(tmp_path):
        run_my_agent(out=tmp_path / "answers")
        assert_call_accuracy(tmp_path / "answers", "golden/run-42.yaml", minimum=90.0)

Either side is anything ``stbproxy eval`` reads (answer files, raw answers, cassettes,
a folder of them) or answers already loaded. An AssertionError lists every mismatched
call with the parts that differ, so pytest shows them in the failure.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable, Union

from .calls import CallsResult, Missing, compare_runs, left_out_fields, load_side
from .model import Answer, AnswerSet

Side = Union[str, Path, Answer, AnswerSet]
MAX_LISTED = 20  # mismatched calls in the failure message


def assert_call_accuracy(run: Side, golden: Side, *, minimum: float = 100.0, order_free: bool = False,
                         ids: dict[str, list[str]] | None = None, volatile_fields: Iterable[str] = (),
                         allow_missing: bool = False) -> CallsResult:
    """Fail unless ``run`` matches at least ``minimum`` % of ``golden``'s calls.

    Calls are matched by position (``order_free=True``: in any order), by function and
    canonical arguments, as ``stbproxy eval calls`` does. ``ids`` (query ids by group)
    defaults to every query of ``golden``; when each side holds a single answer, the two
    are compared whatever their ids (two cassettes named differently). A golden query the
    run does not answer fails the check too, unless ``allow_missing``. Returns the
    comparison, for further assertions.
    """
    mine, theirs = _answers(run), _answers(golden)
    if ids is None:
        ids = {group or "": list(items) for group, items in theirs.by_group.items()}
        mine = _paired(mine, theirs)
    result = compare_runs(mine, theirs, ids, left_out=left_out_fields(volatile_fields))
    overall = result.overall
    accuracy = overall.order_free_accuracy if order_free else overall.accuracy
    failures = []
    if accuracy is not None and accuracy < minimum:
        how = "in any order" if order_free else "in order"
        matched = overall.order_free if order_free else overall.matched
        failures.append(f"call accuracy {accuracy:.1f}% is below the minimum {minimum:.1f}% "
                        f"({matched} of {overall.reference_calls} golden calls matched {how})")
        failures.extend(_mismatches(result, order_free))
    if overall.no_reference:
        failures.append("golden queries without a usable answer: " + _names(overall.no_reference))
    if overall.no_run and not allow_missing:
        failures.append("golden queries the run does not answer: " + _names(overall.no_run))
    if failures:
        raise AssertionError("\n".join(failures))
    return result


def _answers(side: Side) -> AnswerSet:
    if isinstance(side, AnswerSet):
        return side
    if isinstance(side, Answer):
        loaded = AnswerSet()
        loaded.add(None, side)
        return loaded
    return load_side(side)


def _paired(run: AnswerSet, golden: AnswerSet) -> AnswerSet:
    """One answer against one answer: the run's takes the golden one's id and group."""
    if run.count() != 1 or golden.count() != 1:
        return run
    group, golden_items = next(iter(golden.by_group.items()))
    answer = next(item for items in run.by_group.values() for item in items.values())
    paired = AnswerSet(problems=list(run.problems))
    paired.add(group, dataclasses.replace(answer, query_id=next(iter(golden_items))))
    return paired


def _mismatches(result: CallsResult, order_free: bool) -> list[str]:
    """One block of lines per mismatched golden call: where it is, then each differing part."""
    blocks: list[list[str]] = []
    for q in (q for g in result.groups for q in g.results):
        if order_free:
            for miss in q.unmatched:
                closest = f"; closest: {miss.closest.api}" if miss.closest else ""
                blocks.append([f"{_query(q.group, q.query_id)}: {miss.reference.api} made nowhere{closest}",
                               *_parts(miss.differences)])
        else:
            blocks.extend([f"{_query(q.group, q.query_id)}, call {i + 1} {q.reference[i].api}:", *_parts(diffs)]
                          for i, diffs in enumerate(q.positions) if diffs)
    lines = [line for block in blocks[:MAX_LISTED] for line in block]
    if len(blocks) > MAX_LISTED:
        lines.append(f"... and {len(blocks) - MAX_LISTED} more mismatched calls (`stbproxy eval calls` lists them all)")
    return lines


def _parts(diffs: list[dict[str, str]]) -> list[str]:
    return ["    no call at this position" if d["part"] == "call"
            else f"    {d['part']}: golden {d['reference']!r}, got {d['got']!r}" for d in diffs]


def _names(missing: list[Missing]) -> str:
    return ", ".join(f"{_query(m.group, m.query_id)} ({m.reason})" for m in missing)


def _query(group: str, qid: str) -> str:
    return f"query {qid} ({group})" if group else f"query {qid}"
