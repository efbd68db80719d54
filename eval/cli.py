"""The ``eval`` command group: ``stbproxy eval ...`` or ``python -m stbeval ...``.

The only module of stbeval that imports click. Commands read files, build a judge over
the run folder's log, call the library, write the run folder and print the table to
standard output; warnings, progress and judge statistics go to standard error.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import click
from click.core import ParameterSource

from . import calls, calls_report, report, trials
from .answers import GROUP_RE, Answer, Problem, load_ids, name_method, to_converted
from .errors import EvalError, InputError, JudgeFatalError, TemplateError
from .judge import DEFAULT_MODEL, Judge, JudgeSettings, unknown_request_fields
from .judgeconfig import config_beside, load_judge_config
from .judgelog import LOG_NAME, JudgeLog
from .model import AnswerSet
from .passrate import MISSING_POLICIES, pass_rate, pass_rate_trials
from .prompts import Prompts, load_template
from .runner import DEFAULT_CONCURRENCY, Progress
from .solvable import load_tasks, solvable, write_ids
from .sources import expand_sources, load_queries, load_source
from .winrate import win_rate

MAX_WARNINGS = 40  # printed; all of them are kept in summary.json


class _Bar(Progress):
    """click's progress bar (with ETA) on standard error, safe to step from threads."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self._bar: Any = None
        self._lock = threading.Lock()

    def start(self, total: int) -> None:
        # Only on a terminal: elsewhere a bar is one stray line among the results.
        if self.enabled and total > 0 and self._bar is None and sys.stderr.isatty():
            self._bar = click.progressbar(length=total, label=self.label, file=sys.stderr,
                                          show_eta=True, show_pos=True)
            self._bar.__enter__()

    def step(self, n: int = 1) -> None:
        if self._bar is not None:
            with self._lock:
                self._bar.update(n)

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.__exit__(None, None, None)
                self._bar = None


class _Warnings:
    def __init__(self) -> None:
        self.messages: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        with self._lock:
            self.messages.append(message)

    def flush(self) -> None:
        for message in self.messages[:MAX_WARNINGS]:
            click.echo(f"warning: {message}", err=True)
        if len(self.messages) > MAX_WARNINGS:
            click.echo(f"warning: ... and {len(self.messages) - MAX_WARNINGS} more (all in summary.json)", err=True)
        self.messages.clear()


def _judge_options(*, many_models: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option("--judge-model", "judge_model", multiple=many_models,
                         default=(DEFAULT_MODEL,) if many_models else DEFAULT_MODEL, show_default=True,
                         help="Judge model" + (" (repeat for several voting models)" if many_models else "")
                              + "; --judge-config's model when not given."),
            click.option("--temperature", type=float, default=0.2, show_default=True,
                         help="Judge temperature; --judge-config's when not given (none sent if it has none)."),
            click.option("--base-url", envvar="OPENAI_BASE_URL", default=None,
                         help="OpenAI-compatible endpoint [env OPENAI_BASE_URL; default OpenAI]."),
            click.option("--api-key", envvar="OPENAI_API_KEY", default=None, show_envvar=False,
                         help="API key [env OPENAI_API_KEY]."),
            click.option("--judge-template", type=click.Path(exists=True, dir_okay=False), default=None,
                         help="Prompt template in the original evaluator's <function> format, sent as "
                              "written."),
            click.option("--judge-config", type=click.Path(exists=True, dir_okay=False), default=None,
                         help="The original evaluator's config.yaml: its completions_kwargs (model, "
                              "max_tokens, temperature, timeout, function schemas, ...) make the rest of each "
                              "request, as the original sends it; options given explicitly win, and its "
                              "prompt_template is the template when --judge-template is not given "
                              "[default: the config.yaml beside --judge-template, if there is one]."),
            click.option("--concurrency", type=click.IntRange(1, 512), default=DEFAULT_CONCURRENCY,
                         show_default=True, help="Judge calls in flight at once."),
            click.option("--timeout", type=float, default=60.0, show_default=True,
                         help="Seconds per judge call; --judge-config's when not given."),
            click.option("--max-retries", type=click.IntRange(0, 20), default=2, show_default=True,
                         help="Transport retries per judge call (timeouts, 429, 5xx)."),
            click.option("--parse-retries", type=click.IntRange(0, 20), default=2, show_default=True,
                         help="Further attempts after a reply without a valid label."),
            click.option("--max-tokens", type=int, default=None,
                         help="Cap on judge reply tokens (max_tokens) [default: --judge-config's, else none]."),
            click.option("--reuse-log", multiple=True, type=click.Path(exists=True, dir_okay=False),
                         help="Another run's judgments.jsonl to re-use judgments from (repeatable)."),
            click.option("--retry-unscored", is_flag=True, help="Ask again where the log holds unscored replies."),
            click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar."),
        ]
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def _handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except JudgeFatalError as exc:
            raise click.ClickException(f"{str(exc).rstrip('.')}; no score written (judgments made so far are kept "
                                       "in the run's log: fix the judge and run the same command again)")
        except EvalError as exc:
            raise click.ClickException(str(exc))
        except KeyboardInterrupt:
            click.echo("\ninterrupted: judgments made so far are kept in the run's log; "
                       "run the same command again to resume.", err=True)
            sys.exit(130)

    return wrapper


# Judge options an evaluator configuration sets unless they are given (option -> its key).
_CONFIGURED = {"judge_model": "model", "temperature": "temperature", "max_tokens": "max_tokens", "timeout": "timeout"}


def _judge_setup(opts: dict[str, Any]) -> dict[str, Any]:
    """The judge options with the evaluator configuration applied (--judge-config, else
    the config.yaml beside --judge-template), and the prompts loaded: checked before any
    answer is read or call made. Options given on the command line (or in the
    environment) win over the configuration's values; an option the configuration does
    not set keeps its default, except the temperature, which the original then omits."""
    template = opts["judge_template"]
    config_path = opts["judge_config"] or (config_beside(template) if template else None)
    if config_path is None:
        return {**opts, "prompts": load_template(template) if template else Prompts(), "request": {}}
    config = load_judge_config(config_path)
    unknown = unknown_request_fields(config.request)
    if unknown:
        raise TemplateError(f"{config.path}: completions_kwargs has field(s) the chat completion call does not "
                            f"take: {', '.join(unknown)}")
    template = template or config.template
    where = str(config.path)
    prompts = (load_template(template, schemas=config.schemas, schemas_origin=where) if template
               else Prompts(schemas=config.schemas, schemas_origin=where))
    out = {**opts, "prompts": prompts, "request": config.request}
    context = click.get_current_context()
    for option, key in _CONFIGURED.items():
        if context.get_parameter_source(option) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP):
            continue
        if key in config.settings or key == "temperature":
            value = config.settings.get(key)
            out[option] = (value,) if isinstance(opts[option], tuple) else value
    return out


def _make_judge(out: Path, opts: dict[str, Any], model: str) -> Judge:
    settings = JudgeSettings(model=model, temperature=opts["temperature"], base_url=opts["base_url"],
                             api_key=opts["api_key"], timeout=opts["timeout"], max_retries=opts["max_retries"],
                             parse_retries=opts["parse_retries"], max_tokens=opts["max_tokens"],
                             retry_unscored=opts["retry_unscored"], request=opts["request"])
    return Judge(settings, opts["prompts"], JudgeLog(out / LOG_NAME, reuse=opts["reuse_log"]))


def _judge_info(judge: Judge) -> dict[str, Any]:
    s = judge.settings
    info = {"model": s.model, "temperature": s.temperature, "prompts": judge.prompts.origin,
            "schemas": judge.prompts.schemas_origin, "log": LOG_NAME, "stats": judge.stats.as_dict()}
    if s.max_tokens:
        info["max_tokens"] = s.max_tokens
    if s.request:
        info["request"] = dict(s.request)
    return info


def _echo_stats(judge: Judge) -> None:
    st = judge.stats
    click.echo(f"judge: {st.judged + st.reused} judgments ({st.judged} made with {st.calls} calls, "
               f"{st.reused} from the log); {st.unscored} unscored, {st.errors} failed; tokens this run: "
               f"{st.prompt_tokens} prompt + {st.completion_tokens} completion "
               f"(re-used judgments had cost {st.logged_prompt_tokens} + {st.logged_completion_tokens})", err=True)


def _method_name(source: str | Path) -> str:
    """A method name from the answers path (its folder unless that is named by group),
    or the recorded session it names."""
    path = Path(source).resolve()
    name = path.stem if path.is_file() else path.name
    while GROUP_RE.match(name) and path.parent != path:
        path = path.parent
        name = path.name
    return name or "answers"


def _trials_name(sources: tuple[str, ...]) -> str:
    """A method name for several trial sources: what their names share, less a trial
    suffix (``agent.t1`` and ``agent.t2`` give ``agent``), else the first one's name."""
    names = [_method_name(source) for source in sources]
    shared = os.path.commonprefix(names)
    return re.sub(r"(?:[._-](?:t|trial|run))?[._-]*$", "", shared, flags=re.I) or names[0]


_METHOD_HELP = ("The method of {what} read from traffic (sessions, cassettes), as StableToolBench's answer files "
                "name theirs (CoT@1, DFS_woFilter_w2): the judge sees it in the answer object parse_answer_status "
                "is shown{convert} [default: a cassette's method metadata, else {default}].")


def _name_method(answers: AnswerSet, given: str | None, run_name: str) -> None:
    """Answers from traffic get ``given`` (even over a recorded method), else the run's
    name where the recording named no method: traffic never says what the agent ran."""
    name_method(answers, given or run_name, replace_recorded=given is not None)


def _run(out: Path, opts: dict[str, Any], model: str, label: str, body: Callable[[Judge, _Bar, _Warnings], Any]) -> Any:
    out.mkdir(parents=True, exist_ok=True)
    judge = _make_judge(out, opts, model)
    bar = _Bar(label, opts["progress"])
    warnings = _Warnings()
    finished = False
    try:
        result = body(judge, bar, warnings)
        finished = True
        return result
    finally:
        bar.close()
        judge.log.close()
        judge.close()
        if finished:  # a run that failed ends with its one error line, nothing that reads as a result
            warnings.flush()
            _echo_stats(judge)


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

REPORT_EXAMPLE = """\b
Example:
  stbproxy eval report runs/cot runs/dfs runs/my_agent_vs_ref \\
      --out runs/report --chart runs/report/sopr.png

\b
One page to read, filter and compare (no network needed to open it):
  stbproxy eval report runs/my_agent runs/my_agent_vs_ref --html report.html \\
      --baseline runs/my_agent_last_week
"""


@click.group("eval", help="Offline StableToolBench evaluation: SoPR, SoWR and solvable tasks, "
                          "judged by any OpenAI-compatible model, re-using logged judgments.")
def eval_group() -> None:
    pass


_queries_option = click.option(
    "--queries", multiple=True, type=click.Path(exists=True, path_type=Path),
    help="StableToolBench query files (or their folder): recorded conversations get the id of the "
         "query their task states. Repeatable.")
_SOURCE_HELP = " (file or folder), or a recorded session holding many conversations."


def _load_sources(sources: list[str], seed: int, queries: tuple[Path, ...],
                  id_groups: dict[str, list[str]] | None = None) -> list[Any]:
    index, problems = load_queries(queries)
    loaded = [load_source(source, seed=seed, queries=index) for source in sources]
    loaded[0].problems[:0] = problems
    if not queries and id_groups is not None:
        for source, answers in zip(sources, loaded):
            _named_by_query(source, answers, id_groups)
    return loaded


def _named_by_query(source: str, answers: AnswerSet, id_groups: dict[str, list[str]]) -> None:
    """Recorded conversations (a session, a cassette) are named by the query they state only
    with --queries; without it they are named by digest, and no id could ever match them."""
    from .trajectories import DIGEST_NAME

    names = [qid for group in answers.by_group.values() for qid in group]
    wanted = {qid for ids in id_groups.values() for qid in ids}
    if names and all(DIGEST_NAME.fullmatch(name) for name in names) and not wanted.intersection(names):
        raise InputError(f"{source}: its {len(names)} recorded conversations are named by digest (such as "
                         f"{names[0]}), not by query id: a recorded session or cassette needs --queries "
                         "(StableToolBench's query files) so that each conversation gets the id of the query it states")


@eval_group.command("pass-rate", epilog=PASS_RATE_EXAMPLE)
@click.option("--answers", required=True, multiple=True,
              help="Converted answers, raw ToolBench answers or cassettes" + _SOURCE_HELP.rstrip(".")
                   + ". Repeat it for repeated trials, one per trial (or name a run that stands for its "
                     "trials): adds pass@k and pass^k.")
@_queries_option
@click.option("--ids", required=True, type=click.Path(exists=True, path_type=Path),
              help="Solvable ids: a {qid: 0} file per group, or their folder.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run folder (log, summary, details); re-running on it re-uses the log.")
@click.option("--rounds", type=click.IntRange(1, 100), default=3, show_default=True, help="Judging rounds.")
@click.option("--missing", type=click.Choice(MISSING_POLICIES), default="unsolved", show_default=True,
              help="A query without a usable answer: count as Unsolved, or skip it (the original).")
@click.option("--method", default=None, help="Name of the method in tables [default: from --answers].")
@click.option("--answers-method", default=None,
              help=_METHOD_HELP.format(what="answers", convert="",
                                       default="the run's name: the session's or folder's, the one its trials "
                                               "share"))
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for converting raw answers.")
@click.option("--chart/--no-chart", default=True, show_default=True,
              help="Write sopr.png (and pass_k.png for repeated trials) into --out.")
@_judge_options()
@_handle_errors
def pass_rate_cmd(answers: tuple[str, ...], queries: tuple[Path, ...], ids: Path, out: Path, rounds: int,
                  missing: str, method: str | None, answers_method: str | None, seed: int, chart: bool,
                  **opts: Any) -> None:
    """Solvable pass rate of one method, per group, mean±std over rounds; with several
    trials, also pass@k and pass^k."""
    opts = _judge_setup(opts)
    id_groups = load_ids(ids)
    sources = expand_sources(answers)
    run_name = _method_name(answers[0]) if len(answers) == 1 else _trials_name(answers)
    if len(sources) > 1:
        loaded = _load_sources(sources, seed, queries, id_groups)
        for trial in loaded:  # one name for all: an answer the same in two trials is judged once
            _name_method(trial, answers_method, run_name)
        _pass_rate_trials(loaded, sources, id_groups, out, rounds, missing, method or run_name, chart, opts)
        return
    [loaded] = _load_sources(sources, seed, queries, id_groups)
    _name_method(loaded, answers_method, run_name)
    name = method or run_name

    def body(judge: Judge, bar: _Bar, warn: _Warnings) -> dict[str, Any]:
        result = pass_rate(loaded, id_groups, judge, method=name, rounds=rounds, missing=missing, warn=warn,
                           concurrency=opts["concurrency"], progress=bar)
        bar.close()
        summary = report.pass_rate_summary(result, _judge_info(judge))
        text = report.write_run(out, summary)
        report.write_pass_rate_details(out, result)
        if chart:
            report.bar_chart([summary], out / "sopr.png", title=f"SoPR of {name}")
        click.echo(text, nl=False)
        return summary

    _run(out, opts, opts["judge_model"], "judging", body)


def _pass_rate_trials(loaded: list[AnswerSet], sources: list[str], id_groups: dict[str, list[str]], out: Path,
                      rounds: int, missing: str, name: str, chart: bool, opts: dict[str, Any]) -> None:
    """pass-rate over several trials: each judged alike, then SoPR per trial and across
    them, pass@k and pass^k."""

    def body(judge: Judge, bar: _Bar, warn: _Warnings) -> dict[str, Any]:
        runs = pass_rate_trials(loaded, id_groups, judge, method=name, rounds=rounds, missing=missing, warn=warn,
                                concurrency=opts["concurrency"], progress=bar)
        bar.close()
        result = trials.repeated(runs, sources, warn=warn)
        summary = report.trials_summary(result, _judge_info(judge))
        text = report.write_run(out, summary)
        report.write_trials_details(out, result)
        if chart:
            report.bar_chart([summary], out / "sopr.png", title=f"SoPR of {name} (mean±std over {len(runs)} trials)")
            if result.scores[trials.OVERALL]:
                report.pass_k_chart(summary, out / "pass_k.png", title=f"pass@k and pass^k of {name}")
        click.echo(text, nl=False)
        return summary

    _run(out, opts, opts["judge_model"], "judging", body)


@eval_group.command("win-rate", epilog=WIN_RATE_EXAMPLE)
@click.option("--candidate", required=True, help="Candidate answers" + _SOURCE_HELP)
@click.option("--reference", required=True, help="Reference answers" + _SOURCE_HELP)
@_queries_option
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
              help=_METHOD_HELP.format(what="the candidate's answers", convert="",
                                       default="its session's or folder's name"))
@click.option("--reference-method", default=None,
              help=_METHOD_HELP.format(what="the reference's answers", convert="",
                                       default="its session's or folder's name"))
@_judge_options()
@_handle_errors
def win_rate_cmd(candidate: str, reference: str, queries: tuple[Path, ...], ids: Path, out: Path, rounds: int,
                 missing: str, seed: int, candidate_name: str | None, reference_name: str | None,
                 candidate_method: str | None, reference_method: str | None, **opts: Any) -> None:
    """Solvable win rate of a candidate against a reference, with wins, ties and losses."""
    opts = _judge_setup(opts)
    id_groups = load_ids(ids)
    mine, theirs = _load_sources([candidate, reference], seed, queries, id_groups)
    _name_method(mine, candidate_method, _method_name(candidate))
    _name_method(theirs, reference_method, _method_name(reference))
    c_name = candidate_name or _method_name(candidate)
    r_name = reference_name or _method_name(reference)

    def body(judge: Judge, bar: _Bar, warn: _Warnings) -> dict[str, Any]:
        result = win_rate(mine, theirs, id_groups, judge, candidate_name=c_name, reference_name=r_name,
                          rounds=rounds, missing=missing, seed=seed, warn=warn,
                          concurrency=opts["concurrency"], progress=bar)
        bar.close()
        summary = report.win_rate_summary(result, _judge_info(judge))
        text = report.write_run(out, summary)
        report.write_win_rate_details(out, result)
        click.echo(text, nl=False)
        return summary

    _run(out, opts, opts["judge_model"], "judging", body)


@eval_group.command("solvable", epilog=SOLVABLE_EXAMPLE)
@click.option("--queries", required=True, type=click.Path(exists=True, path_type=Path),
              help="Query files (G1_instruction.json, ...), their folder, or converted answers.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run folder; kept ids go to OUT/test_query_ids/<group>.json.")
@_judge_options(many_models=True)
@_handle_errors
def solvable_cmd(queries: Path, out: Path, **opts: Any) -> None:
    """Keep the tasks a majority of judge models find solvable."""
    opts = _judge_setup(opts)
    tasks, problems = load_tasks(queries)
    models = list(opts["judge_model"])

    def body(judge: Judge, bar: _Bar, warn: _Warnings) -> dict[str, Any]:
        for message in problems:
            warn(message)
        result = solvable(tasks, judge, models, warn=warn, concurrency=opts["concurrency"], progress=bar)
        result.problems[:0] = problems
        bar.close()
        summary = report.solvable_summary(result, _judge_info(judge))
        text = report.write_run(out, summary)
        report.write_solvable_details(out, result)
        written = write_ids(result, out / "test_query_ids")
        click.echo(text, nl=False)
        click.echo(f"kept ids written to {out / 'test_query_ids'} ({len(written)} files)", err=True)
        return summary

    _run(out, opts, models[0], "judging", body)


@eval_group.command("report", epilog=REPORT_EXAMPLE)
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write report.md, report.csv and report.json here.")
@click.option("--chart", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG bar chart of SoPR per group [default: OUT/sopr.png when --out is given].")
@click.option("--title", default="SoPR by group", show_default=True, help="Chart title.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write one self-contained HTML page here: the summary, every query of the first run with "
                   "its trajectory (where each answer came from), filters and search.")
@click.option("--baseline", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="With --html: a run folder to compare with, query by query.")
@click.option("--stability", "stability_data", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="With --html: the curves 'stbproxy eval stability --data FILE' wrote, drawn in the "
                                 "summary.")
@_handle_errors
def report_cmd(runs: tuple[Path, ...], out: Path | None, chart: Path | None, title: str, html_out: Path | None,
               baseline: Path | None, stability_data: Path | None) -> None:
    """Combine run folders into one table (and a chart of the pass-rate runs), or one HTML page."""
    if (baseline or stability_data) and html_out is None:
        raise click.UsageError("--baseline and --stability shape the HTML page: give --html OUT.html too")
    # a file goes into a folder that is there (or the --out folder this command makes): none is made for it
    for path in (html_out, chart):
        if path is not None and not path.parent.is_dir() and (out is None or path.parent.resolve() != out.resolve()):
            raise InputError(f"cannot write {path}: the directory {path.parent} does not exist")
    summaries = [report.load_summary(run) for run in runs]
    text = report.render(summaries)
    click.echo(text, nl=False)
    if html_out is not None:
        _write_html(list(runs), html_out, baseline, stability_data)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(text, encoding="utf-8")
        (out / "report.json").write_text(json.dumps(summaries, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        csv_parts = []
        passes = [s for s in summaries if s["kind"] == "pass_rate"]
        wins = [s for s in summaries if s["kind"] == "win_rate"]
        if passes:
            csv_parts.append(report.to_csv(*report.pass_rate_table(passes)))
        if wins:
            csv_parts.append(report.to_csv(*report.win_rate_table(wins)))
        (out / "report.csv").write_text("\n".join(csv_parts), encoding="utf-8")
    if chart is None and out is not None:
        chart = out / "sopr.png"
    if chart is not None and any(s["kind"] == "pass_rate" for s in summaries):
        report.bar_chart(summaries, chart, title=title)
        click.echo(f"chart written to {chart}", err=True)


def _write_html(runs: list[Path], out: Path, baseline: Path | None, stability_data: Path | None) -> None:
    from .answers import read_json
    from .html_report import render
    from .report_data import build_document

    stability = read_json(stability_data) if stability_data is not None else None
    document = build_document(runs, baseline=baseline, stability=stability)
    out.write_text(render(document), encoding="utf-8")
    first = document["runs"][0]
    listed = f"{len(first['exec']['items'])} items" if "exec" in first else f"{len(first['queries'])} queries"
    click.echo(f"report written to {out} ({listed})", err=True)


@eval_group.command("convert")
@click.option("--answers", required=True, help="Raw ToolBench answers or cassettes" + _SOURCE_HELP)
@_queries_option
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="Converted JSON file (one group) or folder (one <group>.json per group).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the answer path choice.")
@click.option("--answers-method", default=None,
              help=_METHOD_HELP.format(what="answers", convert=", and it is written here",
                                       default="the session's or folder's name"))
@_handle_errors
def convert_cmd(answers: str, queries: tuple[Path, ...], out: Path, seed: int, answers_method: str | None) -> None:
    """Write answers in StableToolBench's converted format (what the judge sees)."""
    [loaded] = _load_sources([answers], seed, queries)
    _name_method(loaded, answers_method, _method_name(answers))
    for message in loaded.problems:
        click.echo(f"warning: {message}", err=True)
    groups = {g: [a for a in items.values() if isinstance(a, Answer)] for g, items in loaded.by_group.items()}
    for items in loaded.by_group.values():
        for item in items.values():
            if isinstance(item, Problem):
                click.echo(f"warning: {item}", err=True)
    if len(groups) == 1 and out.suffix == ".json":
        targets = {out: next(iter(groups.values()))}
    else:
        targets = {out / f"{g or 'answers'}.json": items for g, items in groups.items()}
    for target, items in targets.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(to_converted(items), ensure_ascii=False) + "\n", encoding="utf-8")
        click.echo(f"{target}: {len(items)} answers", err=True)


CALLS_EXAMPLE = """\b
Example:
  stbproxy eval calls --answers answer/my_agent --reference answer/golden \\
      --ids solvable_queries/test_query_ids --out runs/my_agent_calls
"""


@eval_group.command("calls", epilog=CALLS_EXAMPLE)
@click.option("--answers", required=True,
              help="The run: converted answers, raw ToolBench answers or cassettes" + _SOURCE_HELP)
@click.option("--reference", required=True, help="The reference run, in any of the same forms.")
@click.option("--ids", required=True, type=click.Path(exists=True, path_type=Path),
              help="Query ids: a {qid: 0} file per group, or their folder.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run folder: summary.json, table.md, table.csv, details/<group>/<qid>.json.")
@_queries_option
@click.option("--volatile-field", "volatile", multiple=True,
              help="An argument never compared, like a timestamp (repeatable); secret fields never are.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for converting raw answers.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also print each query not scored or whose calls differ, one line each "
                   "[default: how many; table.md in --out lists them].")
@_handle_errors
def calls_cmd(answers: str, reference: str, ids: Path, out: Path, queries: tuple[Path, ...],
              volatile: tuple[str, ...], seed: int, verbose: bool) -> None:
    """Call accuracy (in order and in any order) and ROUGE-L against a reference run; no judge."""
    result = calls.compare_runs(calls.load_side(answers, seed=seed, queries=queries),
                                calls.load_side(reference, seed=seed, queries=queries), load_ids(ids),
                                run_name=_method_name(answers), reference_name=_method_name(reference),
                                left_out=calls.left_out_fields(volatile))
    for problem in result.problems:
        click.echo(f"warning: {problem}", err=True)
    click.echo(calls_report.write(out, result, verbose=verbose), nl=False)


EXEC_EXAMPLE = """\b
Example (record the labels' answers once, with the key; then score from the store):
  stbproxy serve --mode record --store runs/ow/store       # terminal 1
  eval "$(stbproxy env)"                                    # terminal 2
  OPENWEATHER_API_KEY=... stbproxy eval exec --items ow.jsonl \\
      --task openweather --labels-only
  stbproxy serve --mode replay --store runs/ow/store       # terminal 1, after Ctrl-C
  stbproxy eval exec --items ow.jsonl --task openweather --out runs/ow-exec
"""


def _key_envs(values: tuple[str, ...]) -> dict[str, str]:
    from .exec_profiles import PROFILES

    envs = {}
    for value in values:
        task, sep, name = value.partition("=")
        if not sep or task not in PROFILES or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise click.BadParameter(f"{value!r}: give TASK=VARIABLE, TASK one of {', '.join(PROFILES)}",
                                     param_hint="--key-env")
        envs[task] = name
    return envs


def _proxy_from_env() -> str | None:
    """The proxy `eval "$(stbproxy env)"` exported, if any."""
    return next((os.environ[name] for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
                 if os.environ.get(name)), None)


def _ca_from_env() -> str | None:
    return next((os.environ[name] for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
                 if os.environ.get(name)), None)


@eval_group.command("exec", epilog=EXEC_EXAMPLE)
@click.option("--items", "items_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The items: id, query, generation and labels (ground-truth curl commands); JSON or JSON Lines "
                   "(docs/formats.md).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run folder: summary.json, items.csv, items.jsonl (required unless --labels-only).")
@click.option("--task", "default_task", type=click.Choice(["openweather", "thecatapi", "generic"]), default="generic",
              show_default=True, help="The task (profile) of items that name none.")
@click.option("--proxy", default=None,
              help="The stbproxy to send every command through [default: $HTTPS_PROXY or $HTTP_PROXY, as "
                   "'eval \"$(stbproxy env)\"' sets them].")
@click.option("--ca", type=click.Path(exists=True, dir_okay=False), default=None,
              help="CA bundle that trusts the proxy, for https URLs [default: $SSL_CERT_FILE, $REQUESTS_CA_BUNDLE "
                   "or $CURL_CA_BUNDLE, as stbproxy env sets them].")
@click.option("--allow-host", multiple=True,
              help="A further host the commands may reach (HOST any port, HOST:PORT that one); besides the task's "
                   "own (api.openweathermap.org, api.thecatapi.com). Repeatable.")
@click.option("--key-env", multiple=True,
              help="TASK=VARIABLE: the environment variable holding TASK's key [default: OPENWEATHER_API_KEY, "
                   "THECATAPI_API_KEY; generic none]. Repeatable.")
@click.option("--timeout", type=click.FloatRange(0.1, 600), default=30.0, show_default=True,
              help="Seconds per request.")
@click.option("--labels-only", is_flag=True,
              help="Run the labels only (to record their answers once, through a proxy in record mode).")
@click.option("--name", default=None, help="The run's name in reports [default: the items file's name].")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
@_handle_errors
def exec_cmd(items_path: Path, out: Path | None, default_task: str, proxy: str | None, ca: str | None,
             allow_host: tuple[str, ...], key_env: tuple[str, ...], timeout: float, labels_only: bool,
             name: str | None, progress: bool) -> None:
    """Execution-scored REST tasks (ToolBench's OpenWeather and The Cat API, or any JSON API):
    each item's labels and the first curl line of its generation are run through the proxy,
    never by a shell, and the answers compared: success, crash rate, precision, recall, F1."""
    from . import exec_report
    from .exec_http import Sender, proxy_for_humans
    from .exec_run import Keys, load_items, run

    if out is None and not labels_only:
        raise click.UsageError("give --out DIR (or --labels-only to record the labels' answers)")
    if out is not None and labels_only:
        raise click.UsageError("--labels-only scores nothing: leave --out out")
    overrides = _key_envs(key_env)
    proxy = proxy or _proxy_from_env()
    if not proxy:
        raise click.UsageError('no proxy to send the commands through: give --proxy URL, or run '
                               'eval "$(stbproxy env)" first')
    items = load_items(items_path, default_task)
    keys = Keys.read(sorted({item.task for item in items}), overrides)
    for task, described in keys.described().items():
        if described["env"]:
            state = (" (set)" if described["set"]
                     else ": not set, so {API_KEY} is sent empty (a store answers without it)")
            click.echo(f"{task}: key from ${described['env']}{state}", err=True)
    warnings = _Warnings()
    bar = _Bar("running", progress)
    try:
        with Sender(proxy, ca=ca or _ca_from_env(), timeout=timeout, scrub=keys.scrub) as sender:
            click.echo(f"{len(items)} items through the proxy at {proxy_for_humans(proxy)}", err=True)
            result = run(items, sender, keys, allow_host, labels_only=labels_only, progress=bar, warn=warnings)
    finally:
        bar.close()
        warnings.flush()
    if labels_only:
        click.echo(exec_report.labels_text(result), nl=False)
        return
    summary = exec_report.summary_of(result, name or items_path.stem, items_path.name)
    exec_report.write(out, result, summary)
    click.echo(exec_report.text(summary), nl=False)
    for line in exec_report.item_lines(result):
        click.echo(line)
    click.echo(exec_report.sources_line(summary), err=True)
    click.echo(f"run written to {out} (summary.json, items.csv, items.jsonl)", err=True)
