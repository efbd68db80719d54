"""``stbproxy eval stability``: the stability experiment of stbproxy/stability/experiment.py as a command.

It starts proxies, so it belongs to the proxy side; cli/__init__.py attaches it to the
evaluation package's ``eval`` group (stbeval never imports the proxy), and so it is not a
command of ``python -m stbeval``. The experiment is imported when the command runs, so the
other ``eval`` commands do not pay for it at start.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from stbproxy.cli.common import fail
from stbproxy.errors import StbError

QUICK_LIMIT = 20
# Not zero: the offline simulator keeps a template's key names, and a few StableToolBench
# templates carry keys that check_result reads as failures ("parameters", "404"), so those
# APIs' calls stay invalid once their tool is down (G1_instruction, seed 0: 12 of 862 at 50 %).
FLAT_TOLERANCE = 0.02

EXAMPLE = """\b
Examples:
  stbproxy eval stability --quick
  stbproxy eval stability --queries solvable_queries/test_instruction/G1_instruction.json --out g1.png
"""


@click.command("stability", epilog=EXAMPLE)
@click.option("--queries", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A StableToolBench query file (solvable_queries/test_instruction/G1_instruction.json, ...) "
                   "[default: a built-in synthetic set, 60 queries over 30 tools].")
@click.option("--limit", type=click.IntRange(1), default=None, help="Use only the first N queries.")
@click.option("--quick", is_flag=True, help=f"The first {QUICK_LIMIT} queries (--limit {QUICK_LIMIT}).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="The proxies' --fault-seed: which tools are down.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("stability.png"),
              show_default=True, help="The PNG plot of both curves.")
@click.option("--data", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write both curves as JSON here, for 'eval report --stability'.")
@click.option("--flat-tolerance", type=click.FloatRange(0, 1), default=FLAT_TOLERANCE, show_default=True,
              help="The largest spread of the shares with the simulator that still counts as flat.")
def stability(queries: Path | None, limit: int | None, quick: bool, seed: int, out: Path, data: Path | None,
              flat_tolerance: float) -> None:
    """StableToolBench's stability experiment, offline: the share of tool calls with a valid
    answer as 0, 10, 20 and 50 % of the tools are down, with the offline simulator and
    without one.

    Every run is a fresh 'stbproxy serve' in front of a loopback API that always answers
    (no network, no LLM). Prints the table and three checks (all real at 0 %, falling
    without the simulator, flat with it) and writes the plot; exits 1 when a check fails.
    """
    from stbproxy.stability.experiment import (
        Experiment,
        plot,
        read_queries,
        report_lines,
        run_experiment,
        series,
        summary_line,
    )
    from stbproxy.stability.queries import builtin_queries

    try:
        if queries is None:
            listed, name = builtin_queries(), "built-in synthetic queries"
        else:
            listed, name = read_queries(queries), queries.name
        experiment = Experiment.plan(listed, name, limit=limit or (QUICK_LIMIT if quick else None), seed=seed,
                                     flat_tolerance=flat_tolerance)
        click.echo(summary_line(experiment))
        run_experiment(experiment, progress=lambda line: click.echo(line, err=True))
    except StbError as exc:
        fail(str(exc))
    for line in report_lines(experiment):
        click.echo(line)
    plot(experiment, out)
    click.echo(f"\nplot written to {out}")
    if data is not None:
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_text(json.dumps(series(experiment), indent=2) + "\n", encoding="utf-8")
        click.echo(f"curves written to {data}")
    if not experiment.passed:
        raise SystemExit(1)
