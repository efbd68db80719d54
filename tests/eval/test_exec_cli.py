"""eval exec's command line: bad input and a missing proxy end in one line (issue 44)."""

from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner

from stbeval.cli import eval_group

NO_PROXY_ENV = {name: "" for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")}


@pytest.fixture
def items(tmp_path):
    path = tmp_path / "items.json"
    path.write_text(json.dumps([{"id": 1, "generation": "curl http://127.0.0.1:9/x",
                                 "labels": ["curl http://127.0.0.1:9/x"]}]))
    return path


def invoke(*args, env=None):
    return CliRunner().invoke(eval_group, ["exec", "--no-progress", *args], env={**NO_PROXY_ENV, **(env or {})})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("args,words", [
    (["--out", "x"], "no proxy to send the commands through"),
    (["--proxy", "http://127.0.0.1:1", "--labels-only", "--out", "x"], "--labels-only scores nothing"),
    (["--proxy", "http://127.0.0.1:1"], "give --out DIR"),
    (["--proxy", "http://127.0.0.1:1", "--out", "x", "--key-env", "weather=X"], "give TASK=VARIABLE"),
])
def test_usage_errors(items, tmp_path, args, words):
    result = invoke("--items", str(items), *args)
    assert result.exit_code == 2 and words in result.output


def test_a_proxy_that_is_not_there_stops_the_run_in_one_line(items, tmp_path):
    port = closed_port()
    result = invoke("--items", str(items), "--proxy", f"http://run-1:@127.0.0.1:{port}", "--allow-host", "127.0.0.1",
                    "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"cannot reach the proxy at http://127.0.0.1:{port}" in errors[0]
    assert "run-1" not in result.output  # the proxy's user part (a session name) is not shown
    assert not (tmp_path / "out").exists()


def test_the_proxy_defaults_to_the_one_stbproxy_env_exported(items, tmp_path):
    port = closed_port()
    result = invoke("--items", str(items), "--allow-host", "127.0.0.1", "--out", str(tmp_path / "out"),
                    env={"HTTPS_PROXY": f"http://127.0.0.1:{port}"})
    assert result.exit_code == 1 and f"cannot reach the proxy at http://127.0.0.1:{port}" in result.output


def test_a_bad_items_file_is_one_line(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text('{"id": 1}\n')
    result = invoke("--items", str(path), "--proxy", "http://127.0.0.1:1", "--out", str(tmp_path / "out"))
    assert result.exit_code == 1 and "line 1: 'labels' must be one curl command" in result.output
