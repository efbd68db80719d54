"""Run forensics on the command line: ``stbproxy run`` (an agent command, once per trial)
and ``stbproxy drift`` (what verify mode found). docs/forensics.md."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import click

from stbproxy.cli.common import confdir_option, fail, store_option
from stbproxy.cli.serving import client_env
from stbproxy.errors import StbError

TRIAL_ENV = "STBPROXY_TRIAL"
SESSION_ENV = "STBPROXY_SESSION"


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--trials", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Run the command this many times, as trials 1..N (each its own session, NAME.t<i>).")
@click.option("--session", default=None, metavar="NAME", help="Name of the run [default: run-<UTC time>].")
@click.option("--host", default="127.0.0.1", show_default=True, help="The proxy's address.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="The proxy's port.")
@confdir_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(trials, session, host, port, confdir, command):
    """Run an agent COMMAND through a running proxy, once per trial.

    \b
    Example: stbproxy run --trials 4 --session react-gpt -- python agent.py --query q1
    Each trial i runs with the proxy's variables (as 'stbproxy env' prints them) naming
    session NAME.t<i> with trial index i: the agent's own LLM calls are keyed per trial,
    so each trial samples afresh, while its tool calls share the store's answers. The
    command also sees STBPROXY_TRIAL and STBPROXY_SESSION. Every trial runs even when one
    fails; the exit status is 1 when any did. 'stbproxy eval pass-rate --answers NAME'
    then reads the N trial sessions and reports pass@k and pass^k.
    """
    from stbproxy.forensics.naming import SessionRef
    from stbproxy.sessions import default_session_name, safe_session_name

    name = session or default_session_name(command="run")
    if safe_session_name(name) != name:
        fail(f"--session: {name!r} must use only letters, digits, '.', '_' and '-'")
    _check_listening(host, port)
    failed: list[str] = []
    for trial in range(1, trials + 1):
        trial_session = f"{name}.t{trial}" if trials > 1 else name
        ref = SessionRef(trial_session, trial if trials > 1 else None)
        env = {**os.environ, **client_env(host, port, confdir, trial_session, ref.spec()[len(trial_session):]),
               TRIAL_ENV: str(trial), SESSION_ENV: trial_session}
        click.echo(f"trial {trial}/{trials}: session {trial_session}", err=True)
        try:
            code = subprocess.run(list(command), env=env).returncode
        except OSError as exc:
            fail(f"cannot run {command[0]!r}: {exc.strerror or exc}")
        if code != 0:
            failed.append(f"trial {trial} (session {trial_session}) exited with {code}")
    sessions = f"{name}.t1 .. {name}.t{trials}" if trials > 1 else name
    click.echo(f"{trials} run(s) recorded in session(s) {sessions}; "
               + ("all exited 0" if not failed else f"{len(failed)} failed: " + "; ".join(failed)), err=True)
    raise SystemExit(1 if failed else 0)


def _check_listening(host: str, port: int) -> None:
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError:
        fail(f"no proxy is listening on {host}:{port}: start 'stbproxy serve' first (or pass --host/--port)")


@click.command()
@store_option
@click.option("--session", default=None, metavar="NAME", help="Only this session's verified calls [default: all].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--strict", is_flag=True, help="Exit 1 when any verified answer changed (status, shape or values).")
def drift(store, session, as_json, strict):
    """What 'serve --mode verify' found: per API, calls whose real answer is the same as the
    stored one or changed (status, shape, values), with the first differing place and both
    values shortened. Secrets never appear. Works while a proxy runs.
    """
    from stbproxy.cli.common import known_session
    from stbproxy.forensics.drift_report import drift_by_api, render
    from stbproxy.store.embedded import Store

    if not (store / "CURRENT").exists():
        fail(f"no store at {store} (pass --store, or set STBPROXY_STORE)")
    try:
        with Store(store, readonly=True) as db:
            names = [known_session(db, session)] if session is not None else db.session_names()
            rows = drift_by_api((name, list(db.session_records(name))) for name in names)
    except StbError as exc:
        fail(str(exc))
    if strict and not rows:  # a check that checked nothing must not pass
        fail("no verified calls to judge: run 'stbproxy serve --mode verify' and the agent first"
             + (f" (session {session} has none)" if session else ""))
    if as_json:
        click.echo(json.dumps({"apis": [row.to_dict() for row in rows],
                               "changed": sum(row.changed for row in rows)}, indent=2))
    else:
        click.echo(render(rows), nl=False)
    if strict and any(row.changed for row in rows):
        raise SystemExit(1)
