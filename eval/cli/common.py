"""The ``eval`` group and what its commands share: the judge's options and its set-up, a
run folder's judged run (progress bar, warnings, statistics), one error line for a
failure of the evaluation, and reading answers with their queries."""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import click
from click.core import ParameterSource

from ..answers import GROUP_RE, name_method
from ..errors import EvalError, InputError, JudgeFatalError, TemplateError
from ..judge import DEFAULT_MODEL, Judge, JudgeSettings, unknown_request_fields
from ..judgeconfig import config_beside, load_judge_config
from ..judgelog import LOG_NAME, JudgeLog
from ..model import AnswerSet
from ..prompts import Prompts, load_template
from ..runner import DEFAULT_CONCURRENCY, Progress
from ..sources import load_queries, load_source

MAX_WARNINGS = 40  # printed; all of them are kept in summary.json


class Bar(Progress):
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


class Warnings:
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


def judge_options(*, many_models: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
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


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
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


def judge_setup(opts: dict[str, Any]) -> dict[str, Any]:
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


def make_judge(out: Path, opts: dict[str, Any], model: str) -> Judge:
    settings = JudgeSettings(model=model, temperature=opts["temperature"], base_url=opts["base_url"],
                             api_key=opts["api_key"], timeout=opts["timeout"], max_retries=opts["max_retries"],
                             parse_retries=opts["parse_retries"], max_tokens=opts["max_tokens"],
                             retry_unscored=opts["retry_unscored"], request=opts["request"])
    return Judge(settings, opts["prompts"], JudgeLog(out / LOG_NAME, reuse=opts["reuse_log"]))


def judge_info(judge: Judge) -> dict[str, Any]:
    s = judge.settings
    info = {"model": s.model, "temperature": s.temperature, "prompts": judge.prompts.origin,
            "schemas": judge.prompts.schemas_origin, "log": LOG_NAME, "stats": judge.stats.as_dict()}
    if s.max_tokens:
        info["max_tokens"] = s.max_tokens
    if s.request:
        info["request"] = dict(s.request)
    return info


def echo_stats(judge: Judge) -> None:
    st = judge.stats
    click.echo(f"judge: {st.judged + st.reused} judgments ({st.judged} made with {st.calls} calls, "
               f"{st.reused} from the log); {st.unscored} unscored, {st.errors} failed; tokens this run: "
               f"{st.prompt_tokens} prompt + {st.completion_tokens} completion "
               f"(re-used judgments had cost {st.logged_prompt_tokens} + {st.logged_completion_tokens})", err=True)


def method_name(source: str | Path) -> str:
    """A method name from the answers path (its folder unless that is named by group),
    or the recorded session it names."""
    path = Path(source).resolve()
    name = path.stem if path.is_file() else path.name
    while GROUP_RE.match(name) and path.parent != path:
        path = path.parent
        name = path.name
    return name or "answers"


def trials_name(sources: tuple[str, ...]) -> str:
    """A method name for several trial sources: what their names share, less a trial
    suffix (``agent.t1`` and ``agent.t2`` give ``agent``), else the first one's name."""
    names = [method_name(source) for source in sources]
    shared = os.path.commonprefix(names)
    return re.sub(r"(?:[._-](?:t|trial|run))?[._-]*$", "", shared, flags=re.I) or names[0]


METHOD_HELP = ("The method of {what} read from traffic (sessions, cassettes), as StableToolBench's answer files "
                "name theirs (CoT@1, DFS_woFilter_w2): the judge sees it in the answer object parse_answer_status "
                "is shown{convert} [default: a cassette's method metadata, else {default}].")


def name_traffic_method(answers: AnswerSet, given: str | None, run_name: str) -> None:
    """Answers from traffic get ``given`` (even over a recorded method), else the run's
    name where the recording named no method: traffic never says what the agent ran."""
    name_method(answers, given or run_name, replace_recorded=given is not None)


def run_judged(out: Path, opts: dict[str, Any], model: str, label: str,
               body: Callable[[Judge, Bar, Warnings], Any]) -> Any:
    out.mkdir(parents=True, exist_ok=True)
    judge = make_judge(out, opts, model)
    bar = Bar(label, opts["progress"])
    warnings = Warnings()
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
            echo_stats(judge)




@click.group("eval", help="Offline StableToolBench evaluation: SoPR, SoWR and solvable tasks, "
                          "judged by any OpenAI-compatible model, re-using logged judgments.")
def eval_group() -> None:
    pass


queries_option = click.option(
    "--queries", multiple=True, type=click.Path(exists=True, path_type=Path),
    help="StableToolBench query files (or their folder): recorded conversations get the id of the "
         "query their task states. Repeatable.")
SOURCE_HELP = " (file or folder), or a recorded session holding many conversations."


def load_sources(sources: list[str], seed: int, queries: tuple[Path, ...],
                  id_groups: dict[str, list[str]] | None = None) -> list[Any]:
    index, problems = load_queries(queries)
    loaded = [load_source(source, seed=seed, queries=index) for source in sources]
    loaded[0].problems[:0] = problems
    if not queries and id_groups is not None:
        for source, answers in zip(sources, loaded):
            named_by_query(source, answers, id_groups)
    return loaded


def named_by_query(source: str, answers: AnswerSet, id_groups: dict[str, list[str]]) -> None:
    """Recorded conversations (a session, a cassette) are named by the query they state only
    with --queries; without it they are named by digest, and no id could ever match them."""
    from ..trajectories import DIGEST_NAME

    names = [qid for group in answers.by_group.values() for qid in group]
    wanted = {qid for ids in id_groups.values() for qid in ids}
    if names and all(DIGEST_NAME.fullmatch(name) for name in names) and not wanted.intersection(names):
        raise InputError(f"{source}: its {len(names)} recorded conversations are named by digest (such as "
                         f"{names[0]}), not by query id: a recorded session or cassette needs --queries "
                         "(StableToolBench's query files) so that each conversation gets the id of the query it states")
