"""``exec``: ToolBench-style execution-scored REST tasks, each generation's curl command
and its labels run through the proxy and compared (exec_run.py does the work)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import click

from .common import Bar, Warnings, eval_group, handle_errors

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
    from ..exec_profiles import PROFILES

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
@handle_errors
def exec_cmd(items_path: Path, out: Path | None, default_task: str, proxy: str | None, ca: str | None,
             allow_host: tuple[str, ...], key_env: tuple[str, ...], timeout: float, labels_only: bool,
             name: str | None, progress: bool) -> None:
    """Execution-scored REST tasks (ToolBench's OpenWeather and The Cat API, or any JSON API):
    each item's labels and the first curl line of its generation are run through the proxy,
    never by a shell, and the answers compared: success, crash rate, precision, recall, F1."""
    from .. import exec_report
    from ..exec_http import Sender, proxy_for_humans
    from ..exec_run import Keys, load_items, run

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
    warnings = Warnings()
    bar = Bar("running", progress)
    try:
        with Sender(proxy, ca=ca or _ca_from_env(), timeout=timeout, scrub=keys.scrub) as sender:
            plural = "" if len(items) == 1 else "s"
            click.echo(f"{len(items)} item{plural} through the proxy at {proxy_for_humans(proxy)}", err=True)
            result = run(items, sender, keys, allow_host, labels_only=labels_only, progress=bar, warn=warnings)
    finally:
        bar.close()
        warnings.flush()
    if out is None:  # so --labels-only: without it, a missing --out is refused above
        click.echo(exec_report.labels_text(result), nl=False)
        return
    summary = exec_report.summary_of(result, name or items_path.stem, items_path.name)
    exec_report.write(out, result, summary)
    click.echo(exec_report.text(summary), nl=False)
    for line in exec_report.item_lines(result):
        click.echo(line)
    click.echo(exec_report.sources_line(summary), err=True)
    click.echo(f"run written to {out} (summary.json, items.csv, items.jsonl)", err=True)
