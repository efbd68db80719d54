"""How commands end when they are cut short: a reader that goes away early (`| head`), and
Ctrl-C in the middle of an import. Real `stbproxy` subprocesses, as a user's shell runs them."""

from __future__ import annotations

import os
import subprocess

import click
import pytest
from click.testing import CliRunner

from stbproxy.cli.common import SIGPIPE_EXIT, OneLineErrors
from stbproxy.store import Store
from tests.test_cli_process import SCRIPT

pytestmark = pytest.mark.integration


def run_with_stdout_closed(*args: str) -> subprocess.CompletedProcess:
    """The command with a standard output nobody reads any more: its first write fails
    with a broken pipe, as under `| head -1` once head has its line."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([str(SCRIPT), *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=60, env={k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")})
    finally:
        os.close(write_end)


@pytest.mark.parametrize("command", [["stats"], ["stats", "--json"], ["sessions"], ["--help"], ["--version"]])
def test_a_reader_that_stops_early_ends_the_command_quietly_as_git_does(tmp_path, command):
    store = tmp_path / "store"
    Store(store).close()
    store_args = ["--store", str(store)] if not command[0].startswith("--") else []
    result = run_with_stdout_closed(*command, *store_args)
    assert result.stderr == ""  # neither "stbproxy: error: Broken pipe" nor "Exception ignored ..."
    assert result.returncode == SIGPIPE_EXIT  # what a shell reports for `git log | head -1`


def test_a_broken_pipe_elsewhere_than_stdout_is_still_reported():
    @click.group(cls=OneLineErrors)
    def group():
        pass

    @group.command()
    def talk():
        raise BrokenPipeError(32, "Broken pipe")  # e.g. a server that closed its socket

    result = CliRunner().invoke(group, ["talk"])
    assert result.exit_code == 1 and result.output == "stbproxy: error: Broken pipe\n"
