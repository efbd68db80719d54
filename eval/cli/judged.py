"""The commands that ask a judge: ``pass-rate`` (SoPR, with pass@k and pass^k over
trials), ``win-rate`` (SoWR) and ``solvable``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .. import report, trials
from ..answers import load_ids
from ..judge import Judge
from ..model import AnswerSet
from ..passrate import MISSING_POLICIES, pass_rate, pass_rate_trials
from ..solvable import load_tasks, solvable, write_ids
from ..sources import expand_sources
from ..winrate import win_rate
from .common import (
    METHOD_HELP,
    SOURCE_HELP,
    Bar,
    Warnings,
    eval_group,
    handle_errors,
    judge_info,
    judge_options,
    judge_setup,
    load_sources,
    method_name,
    name_traffic_method,
    queries_option,
    run_judged,
    trials_name,
)

PASS_RATE_EXAMPLE = """\b
Example:
  export OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=sk-...
  stbproxy eval pass-rate --answers converted/chatgpt_cot \\
      --ids solvable_queries/test_query_ids --out runs/cot --rounds 3 \\
      --judge-model gpt-4-turbo

\b
Repeated trials (pass@k and pass^k), one --answers per trial:
  stbproxy eval pass-rate --answers runs/agent/trial1 \\
      --answers runs/agent/trial2 --answers runs/agent/trial3 \\
      --ids solvable_queries/test_query_ids --out runs/agent_trials
"""

WIN_RATE_EXAMPLE = """\b
Example:
  stbproxy eval win-rate --candidate converted/my_agent \\
      --reference reference_answers_gpt-3.5-turbo_CoT \\
      --ids solvable_queries/test_query_ids --out runs/my_agent_vs_ref
"""

SOLVABLE_EXAMPLE = """\b
Example (three voting models behind one OpenAI-compatible gateway):
  stbproxy eval solvable --queries solvable_queries/test_instruction \\
      --out runs/solvable --judge-model gpt-4-turbo \\
      --judge-model gemini-pro --judge-model claude-2
"""

@eval_group.command("pass-rate", epilog=PASS_RATE_EXAMPLE)
@click.option("--answers", required=True, multiple=True,
              help="Converted answers, raw ToolBench answers or cassettes" + SOURCE_HELP.rstrip(".")
                   + ". Repeat it for repeated trials, one per trial (or name a run that stands for its "
                     "trials): adds pass@k and pass^k.")
@queries_option
@click.option("--ids", required=True, type=click.Path(exists=True, path_type=Path),
              help="Solvable ids: a {qid: 0} file per group, or their folder.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run folder (log, summary, details); re-running on it re-uses the log.")
@click.option("--rounds", type=click.IntRange(1, 100), default=3, show_default=True, help="Judging rounds.")
@click.option("--missing", type=click.Choice(MISSING_POLICIES), default="unsolved", show_default=True,
              help="A query without a usable answer: count as Unsolved, or skip it (the original).")
@click.option("--method", default=None, help="Name of the method in tables [default: from --answers].")
@click.option("--answers-method", default=None,
              help=METHOD_HELP.format(what="answers", convert="",
                                       default="the run's name: the session's or folder's, the one its trials "
                                               "share"))
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for converting raw answers.")
@click.option("--chart/--no-chart", default=True, show_default=True,
              help="Write sopr.png (and pass_k.png for repeated trials) into --out.")
@judge_options()
@handle_errors
def pass_rate_cmd(answers: tuple[str, ...], queries: tuple[Path, ...], ids: Path, out: Path, rounds: int,
                  missing: str, method: str | None, answers_method: str | None, seed: int, chart: bool,
                  **opts: Any) -> None:
    """Solvable pass rate of one method, per group, mean±std over rounds; with several
    trials, also pass@k and pass^k."""
    opts = judge_setup(opts)
    id_groups = load_ids(ids)
    sources = expand_sources(answers)
    run_name = method_name(answers[0]) if len(answers) == 1 else trials_name(answers)
    if len(sources) > 1:
        loaded = load_sources(sources, seed, queries, id_groups)
        for trial in loaded:  # one name for all: an answer the same in two trials is judged once
            name_traffic_method(trial, answers_method, run_name)
        _pass_rate_trials(loaded, sources, id_groups, out, rounds, missing, method or run_name, chart, opts)
        return
    [loaded] = load_sources(sources, seed, queries, id_groups)
    name_traffic_method(loaded, answers_method, run_name)
    name = method or run_name

    def body(judge: Judge, bar: Bar, warn: Warnings) -> dict[str, Any]:
        result = pass_rate(loaded, id_groups, judge, method=name, rounds=rounds, missing=missing, warn=warn,
                           concurrency=opts["concurrency"], progress=bar)
        bar.close()
        summary = report.pass_rate_summary(result, judge_info(judge))
        text = report.write_run(out, summary)
        report.write_pass_rate_details(out, result)
        if chart:
            report.bar_chart([summary], out / "sopr.png", title=f"SoPR of {name}")
        click.echo(text, nl=False)
        return summary

    run_judged(out, opts, opts["judge_model"], "judging", body)


def _pass_rate_trials(loaded: list[AnswerSet], sources: list[str], id_groups: dict[str, list[str]], out: Path,
                      rounds: int, missing: str, name: str, chart: bool, opts: dict[str, Any]) -> None:
    """pass-rate over several trials: each judged alike, then SoPR per trial and across
    them, pass@k and pass^k."""

    def body(judge: Judge, bar: Bar, warn: Warnings) -> dict[str, Any]:
        runs = pass_rate_trials(loaded, id_groups, judge, method=name, rounds=rounds, missing=missing, warn=warn,
                                concurrency=opts["concurrency"], progress=bar)
        bar.close()
        result = trials.repeated(runs, sources, warn=warn)
        summary = report.trials_summary(result, judge_info(judge))
        text = report.write_run(out, summary)
        report.write_trials_details(out, result)
        if chart:
            report.bar_chart([summary], out / "sopr.png", title=f"SoPR of {name} (mean±std over {len(runs)} trials)")
            if result.scores[trials.OVERALL]:
                report.pass_k_chart(summary, out / "pass_k.png", title=f"pass@k and pass^k of {name}")
        click.echo(text, nl=False)
        return summary

    run_judged(out, opts, opts["judge_model"], "judging", body)


@eval_group.command("win-rate", epilog=WIN_RATE_EXAMPLE)
@click.option("--candidate", required=True, help="Candidate answers" + SOURCE_HELP)
@click.option("--reference", required=True, help="Reference answers" + SOURCE_HELP)
@queries_option
@click.option("--ids", required=True, type=click.Path(exists=True, path_type=Path), help="Solvable ids file or folder.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Run folder.")
@click.option("--rounds", type=click.IntRange(1, 100), default=3, show_default=True, help="Voting rounds.")
@click.option("--missing", type=click.Choice(MISSING_POLICIES), default="unsolved", show_default=True,
              help="A side without a usable answer loses the query, or the query is skipped.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for answer order and conversion.")
@click.option("--candidate-name", default=None,
              help="The candidate's name in tables [default: its answers' folder or file name].")
@click.option("--reference-name", default=None,
              help="The reference's name in tables [default: its answers' folder or file name].")
@click.option("--candidate-method", default=None,
              help=METHOD_HELP.format(what="the candidate's answers", convert="",
                                       default="its session's or folder's name"))
@click.option("--reference-method", default=None,
              help=METHOD_HELP.format(what="the reference's answers", convert="",
                                       default="its session's or folder's name"))
@judge_options()
@handle_errors
def win_rate_cmd(candidate: str, reference: str, queries: tuple[Path, ...], ids: Path, out: Path, rounds: int,
                 missing: str, seed: int, candidate_name: str | None, reference_name: str | None,
                 candidate_method: str | None, reference_method: str | None, **opts: Any) -> None:
    """Solvable win rate of a candidate against a reference, with wins, ties and losses."""
    opts = judge_setup(opts)
    id_groups = load_ids(ids)
    mine, theirs = load_sources([candidate, reference], seed, queries, id_groups)
    name_traffic_method(mine, candidate_method, method_name(candidate))
    name_traffic_method(theirs, reference_method, method_name(reference))
    c_name = candidate_name or method_name(candidate)
    r_name = reference_name or method_name(reference)

    def body(judge: Judge, bar: Bar, warn: Warnings) -> dict[str, Any]:
        result = win_rate(mine, theirs, id_groups, judge, candidate_name=c_name, reference_name=r_name,
                          rounds=rounds, missing=missing, seed=seed, warn=warn,
                          concurrency=opts["concurrency"], progress=bar)
        bar.close()
        summary = report.win_rate_summary(result, judge_info(judge))
        text = report.write_run(out, summary)
        report.write_win_rate_details(out, result)
        click.echo(text, nl=False)
        return summary

    run_judged(out, opts, opts["judge_model"], "judging", body)


@eval_group.command("solvable", epilog=SOLVABLE_EXAMPLE)
@click.option("--queries", required=True, type=click.Path(exists=True, path_type=Path),
              help="Query files (G1_instruction.json, ...), their folder, or converted answers.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run folder; kept ids go to OUT/test_query_ids/<group>.json.")
@judge_options(many_models=True)
@handle_errors
def solvable_cmd(queries: Path, out: Path, **opts: Any) -> None:
    """Keep the tasks a majority of judge models find solvable."""
    opts = judge_setup(opts)
    tasks, problems = load_tasks(queries)
    models = list(opts["judge_model"])

    def body(judge: Judge, bar: Bar, warn: Warnings) -> dict[str, Any]:
        for message in problems:
            warn(message)
        result = solvable(tasks, judge, models, warn=warn, concurrency=opts["concurrency"], progress=bar)
        result.problems[:0] = problems
        bar.close()
        summary = report.solvable_summary(result, judge_info(judge))
        text = report.write_run(out, summary)
        report.write_solvable_details(out, result)
        written = write_ids(result, out / "test_query_ids")
        click.echo(text, nl=False)
        click.echo(f"kept ids written to {out / 'test_query_ids'} ({len(written)} files)", err=True)
        return summary

    run_judged(out, opts, models[0], "judging", body)
