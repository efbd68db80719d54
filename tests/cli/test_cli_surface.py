"""What users see of the commands stays as it is through refactors: every command's --help
text and the environment variable of every option, and the addon's mitmproxy options
(under mitmdump: name, type, default, help), compared with tests/cli/cli_surface.txt.

A change meant for users updates the file on purpose:
``STB_WRITE_CLI_SURFACE=1 python -m pytest tests/cli/test_cli_surface.py``, and the diff is
read in review like any other change of the docs.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from stbproxy.cli import main

SURFACE = Path(__file__).with_name("cli_surface.txt")
WIDTH = 100


def commands(group: click.Group, ctx: click.Context, path: tuple[str, ...]):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        yield path + (name,), command
        if isinstance(command, click.Group):
            yield from commands(command, click.Context(command, info_name=name, parent=ctx), path + (name,))


def surface() -> str:
    runner = CliRunner(env={"COLUMNS": str(WIDTH)})
    root = click.Context(main, info_name="stbproxy")
    parts = []
    for path, command in [((), main), *commands(main, root, ())]:
        shown = runner.invoke(main, [*path, "--help"], prog_name="stbproxy", terminal_width=WIDTH)
        assert shown.exit_code == 0, (path, shown.output)
        envvars = sorted(f"  {param.name}: {param.envvar}" for param in command.params
                         if isinstance(param, click.Option) and param.envvar)
        parts.append("\n".join([f"=== stbproxy {' '.join(path)}".rstrip(), shown.output.rstrip(),
                                "--- environment", *envvars]))
    parts.append("\n".join(["=== mitmdump -s addons/stbproxy_addon.py: the stb_ options", *addon_options()]))
    return "\n\n".join(parts) + "\n"


def addon_options() -> list[str]:
    from mitmproxy import optmanager

    from stbproxy.mitm.addon import StbAddon

    options = optmanager.OptManager()
    StbAddon().load(options)
    return [f"{name}: {option.typespec!r} = {option.default!r}\n  {option.help}"
            for name, option in sorted(options._options.items())]


def test_every_command_s_help_and_environment_variables_are_as_recorded():
    # In a process of its own: click keeps a command's help option once asked, and a test
    # that invoked the eval group alone (no -h) would change what this one reads.
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    now = done.stdout
    if os.environ.get("STB_WRITE_CLI_SURFACE"):
        SURFACE.write_text(now, encoding="utf-8")
    recorded = SURFACE.read_text(encoding="utf-8")
    diff = "".join(difflib.unified_diff(recorded.splitlines(True), now.splitlines(True), "recorded", "now", n=1))
    assert now == recorded, f"the commands' surface changed (see the module's docstring to record it):\n{diff}"


if __name__ == "__main__":
    sys.stdout.write(surface())
