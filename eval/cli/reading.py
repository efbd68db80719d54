"""The commands that only read files: ``report`` (a table, a chart or one HTML page of run
folders), ``convert`` (answers from traffic in StableToolBench's converted format) and
``calls`` (call accuracy against reference calls)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .. import calls, calls_report, report
from ..answers import Answer, Problem, load_ids, to_converted
from ..errors import InputError
from .common import (
    METHOD_HELP,
    SOURCE_HELP,
    eval_group,
    handle_errors,
    load_sources,
    method_name,
    name_traffic_method,
    queries_option,
)

REPORT_EXAMPLE = """\b
Example:
  stbproxy eval report runs/cot runs/dfs runs/my_agent_vs_ref \\
      --out runs/report --chart runs/report/sopr.png

\b
One page to read, filter and compare (no network needed to open it):
  stbproxy eval report runs/my_agent runs/my_agent_vs_ref --html report.html \\
      --baseline runs/my_agent_last_week
"""



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
@handle_errors
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
    from ..answers import read_json
    from ..html_report import render
    from ..report_data import build_document

    stability = read_json(stability_data) if stability_data is not None else None
    document = build_document(runs, baseline=baseline, stability=stability)
    out.write_text(render(document), encoding="utf-8")
    first = document["runs"][0]
    listed = f"{len(first['exec']['items'])} items" if "exec" in first else f"{len(first['queries'])} queries"
    click.echo(f"report written to {out} ({listed})", err=True)


@eval_group.command("convert")
@click.option("--answers", required=True, help="Raw ToolBench answers or cassettes" + SOURCE_HELP)
@queries_option
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="Converted JSON file (one group) or folder (one <group>.json per group).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the answer path choice.")
@click.option("--answers-method", default=None,
              help=METHOD_HELP.format(what="answers", convert=", and it is written here",
                                       default="the session's or folder's name"))
@handle_errors
def convert_cmd(answers: str, queries: tuple[Path, ...], out: Path, seed: int, answers_method: str | None) -> None:
    """Write answers in StableToolBench's converted format (what the judge sees)."""
    [loaded] = load_sources([answers], seed, queries)
    name_traffic_method(loaded, answers_method, method_name(answers))
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
              help="The run: converted answers, raw ToolBench answers or cassettes" + SOURCE_HELP)
@click.option("--reference", required=True, help="The reference run, in any of the same forms.")
@click.option("--ids", required=True, type=click.Path(exists=True, path_type=Path),
              help="Query ids: a {qid: 0} file per group, or their folder.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run folder: summary.json, table.md, table.csv, details/<group>/<qid>.json.")
@queries_option
@click.option("--volatile-field", "volatile", multiple=True,
              help="An argument never compared, like a timestamp (repeatable); secret fields never are.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for converting raw answers.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also print each query not scored or whose calls differ, one line each "
                   "[default: how many; table.md in --out lists them].")
@handle_errors
def calls_cmd(answers: str, reference: str, ids: Path, out: Path, queries: tuple[Path, ...],
              volatile: tuple[str, ...], seed: int, verbose: bool) -> None:
    """Call accuracy (in order and in any order) and ROUGE-L against a reference run; no judge."""
    result = calls.compare_runs(calls.load_side(answers, seed=seed, queries=queries),
                                calls.load_side(reference, seed=seed, queries=queries), load_ids(ids),
                                run_name=method_name(answers), reference_name=method_name(reference),
                                left_out=calls.left_out_fields(volatile))
    for problem in result.problems:
        click.echo(f"warning: {problem}", err=True)
    click.echo(calls_report.write(out, result, verbose=verbose), nl=False)
