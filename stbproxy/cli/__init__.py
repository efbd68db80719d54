"""The ``stbproxy`` command (the cli package is the only importer of click).

The click group lives here; its commands live in modules by theme: serving.py (serve,
env), mcp_stdio.py (mcp-stdio: a stdio MCP server behind the proxy), store_care.py (stats,
sessions, forget), export.py (export), importing.py (import stb-cache, tools, cassette),
openapi.py (import openapi, check), forensics.py (run: an agent command once per trial;
drift), shared_tier.py (sync, and the --shared option of the others), stability.py (``eval
stability``, attached to the evaluation package's group); common.py holds what they share.
Every option can also be set from the environment: ``STBPROXY_<COMMAND>_<OPTION>`` (e.g.
``STBPROXY_SERVE_PORT=9000``, ``STBPROXY_STATS_JSON=1``), the store everywhere by
``STBPROXY_STORE`` and the CA's folder by ``STBPROXY_CONFDIR``.
"""

from __future__ import annotations

import signal
from pathlib import Path

import click

from stbproxy import __version__
from stbproxy.cli.common import OneLineErrors, end_at_once_on_ctrl_c, expose_envvars
from stbproxy.cli.export import export
from stbproxy.cli.forensics import drift, run
from stbproxy.cli.importing import import_group
from stbproxy.cli.mcp_stdio import mcp_stdio
from stbproxy.cli.openapi import check, import_openapi
from stbproxy.cli.serving import env, serve
from stbproxy.cli.shared_tier import sync
from stbproxy.cli.store_care import forget, sessions, stats


class _Main(OneLineErrors):
    """The top-level group, with `eval` loaded only when it is named or listed: the
    evaluation package (vcrpy with it) takes about half a second to import, which every
    other command, an import or a serve, would otherwise pay at start."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), "eval"})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name == "eval" and name not in self.commands:
            self.add_command(_eval_group(), name="eval")
        return super().get_command(ctx, name)


def _eval_group() -> click.Group:
    from stbeval.cli import eval_group  # stbeval never imports the proxy side
    from stbproxy.cli.stability import stability

    _sessions_as_answers(eval_group)
    eval_group.add_command(stability)  # it runs proxies: the proxy side's, attached here
    expose_envvars(eval_group, "STBPROXY_EVAL")
    return eval_group


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stbproxy")
def main() -> None:
    """A transparent, reproducible virtual API server for tool-using LLM agents.

    Quick start: `stbproxy serve`, then in the agent's shell
    `eval "$(stbproxy env)"` and run the agent unmodified.
    """


def command_line() -> None:
    """The ``stbproxy`` executable and ``python -m stbproxy``: the group, then a quiet exit
    for a Ctrl-C pressed after the command has said how it ended. An impatient second
    press would otherwise land in Python's own exit and print a KeyboardInterrupt."""
    try:
        main()
    finally:
        signal.signal(signal.SIGINT, end_at_once_on_ctrl_c)


def _sessions_as_answers(group: click.Group) -> None:
    """`stbproxy eval` reads a session of the store wherever it reads answers (--store)."""
    from stbeval.sources import add_expander, add_resolver
    from stbproxy.cassettes.conversations import session_document, trial_sessions

    chosen = {"store": Path(".stbproxy") / "store"}

    def remember(_ctx, _param, value):
        chosen["store"] = value
        return value

    for command in group.commands.values():
        if any(p.name in ("answers", "candidate", "reference") for p in command.params):
            command.params.append(click.Option(
                ["--store"], type=click.Path(file_okay=False, path_type=Path), default=chosen["store"],
                envvar="STBPROXY_STORE", show_default=True, expose_value=False, callback=remember,
                help="The store whose sessions --answers (--candidate, --reference) may name."))
    add_resolver(lambda name: session_document(chosen["store"], name))
    add_expander(lambda name: trial_sessions(chosen["store"], name))  # a run of trials: its sessions


import_group.add_command(import_openapi)
for command in (serve, env, run, mcp_stdio, stats, sessions, forget, export, import_group, sync, check, drift):
    main.add_command(command)
expose_envvars(main, "STBPROXY")


if __name__ == "__main__":
    main()
