"""``stbproxy mcp-stdio``: the official SDK's stdio client starts the proxy instead of the
server, which the proxy starts only for what the store cannot answer."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stbproxy.store.embedded import Store
from tests.mcp_demo import StdioCommand, run_client

pytestmark = pytest.mark.integration

STEPS = [["tools"], ["call", "add", {"a": 2, "b": 3}], ["call", "shout", {"word": "hey"}], ["read", "demo://info"]]


def stdio_plan(argv: list[str], steps: list) -> dict:
    return {"stdio": argv, "steps": steps}


def test_record_then_replay_without_starting_the_server(tmp_path):
    store, demo = tmp_path / "store", StdioCommand(tmp_path)
    recorded = run_client(stdio_plan(demo.behind_proxy(store, "--mode", "record", "--session", "st"), STEPS), {})
    assert recorded[2]["structuredContent"] == {"total": 5, "note": "2+3"}
    assert demo.lines() == ["started", "add", "shout"]
    replayed = run_client(stdio_plan(demo.behind_proxy(store, "--mode", "replay"), STEPS[::-1]), {})
    assert replayed[1:] == recorded[1:][::-1] and replayed[0] == recorded[0]
    assert demo.lines() == ["started", "add", "shout"]  # never started again
    with Store(store, readonly=True) as db:
        keys = [e.key for e in db.scan("mcp/stdio/")]
        sessions = [r["source"] for r in db.session_records("st")]
    assert len(keys) == 5 and all("python" not in k for k in keys)  # initialize, tools/list, 2 calls, 1 read
    assert sessions.count("upstream") == 5


def test_virtual_mode_starts_the_server_for_a_miss_and_initializes_it_as_the_client_did(tmp_path):
    store, demo = tmp_path / "store", StdioCommand(tmp_path)
    run_client(stdio_plan(demo.behind_proxy(store, "--mode", "record"), STEPS[:2]), {})
    got = run_client(stdio_plan(demo.behind_proxy(store), [*STEPS[:2], ["call", "shout", {"word": "late"}]]), {})
    assert got[3]["content"][0]["text"] == "LATE!"
    assert demo.lines() == ["started", "add", "started", "shout"]


def test_a_tool_the_server_never_answered_is_simulated_without_it(tmp_path):
    store, demo = tmp_path / "store", StdioCommand(tmp_path)
    run_client(stdio_plan(demo.behind_proxy(store, "--mode", "record"), [["tools"]]), {})
    broken = [*demo.behind_proxy(store, "--simulator", "schema")[:-4], sys.executable, "-c", "raise SystemExit(5)"]
    # another command line is another server: the tools of this one are unknown, nothing is simulated
    unknown = run_client(stdio_plan(broken, [["call", "add", {"a": 1, "b": 2}]]), {})
    assert unknown[0]["initialize_error"]["code"] in (-32011, -32012)
    got = run_client(stdio_plan(demo.behind_proxy(store, "--simulator", "schema", "--faults", "down=1"),
                                [["call", "forecast", {"city": "Lima"}]]), {})
    assert set(got[1]["structuredContent"]) == {"city", "days", "summary", "high_c"}
    assert demo.lines() == ["started"]  # only the recording's: the fault kept it "down"


def test_the_servers_exit_status_is_the_commands(tmp_path):
    script = Path(sys.executable).with_name("stbproxy")
    child = [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.stderr.write('child says bye\\n'); "
                                   "sys.exit(3)"]
    initialize = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    done = subprocess.run([str(script), "mcp-stdio", "--mode", "record", "--store", str(tmp_path / "store"), "--",
                           *child], input=initialize + "\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "child says bye" in done.stderr  # the child's stderr passes through
    answer = json.loads(done.stdout.strip().splitlines()[-1])  # and stdout holds MCP messages alone
    assert answer["id"] == 0 and answer["error"]["code"] == -32011


def test_a_line_that_is_no_json_rpc_message_gets_an_error_and_nothing_is_kept(tmp_path):
    script = Path(sys.executable).with_name("stbproxy")
    store = tmp_path / "store"
    lines = "this is not json\n" + '{"jsonrpc": "2.0", "id": 1}\n' + "[1, 2]\n"
    done = subprocess.run([str(script), "mcp-stdio", "--store", str(store), "--simulator", "schema", "--",
                           sys.executable, "-c", "import sys; sys.stdin.read()"],
                          input=lines, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["error"]["code"] for a in answers] == [-32700, -32600, -32600]
    assert all(a["id"] is None and "not a JSON-RPC message" in a["error"]["message"] for a in answers)
    with Store(store, readonly=True) as db:
        assert list(db.entries()) == []  # nothing keyed, simulated or stored


def test_a_server_command_that_cannot_run_is_one_error_line_and_status_127(tmp_path):
    script = Path(sys.executable).with_name("stbproxy")
    initialize = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    done = subprocess.run([str(script), "mcp-stdio", "--mode", "record", "--store", str(tmp_path / "store"), "--",
                           str(tmp_path / "no-such-server"), "--api-key", "SECRET-ARG-77"],
                          input=initialize + "\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 127
    (line,) = done.stderr.splitlines()
    assert line.startswith("stbproxy: error: cannot start the stdio MCP server no-such-server (and 2 arguments)")
    assert json.loads(done.stdout)["error"]["code"] == -32011  # the client got its answer first
    assert "SECRET-ARG-77" not in done.stdout + done.stderr


@pytest.mark.parametrize("spec, code", [("status=503", -32603), ("down=1", -32011), ("malformed", -32603)])
def test_every_fault_answers_the_request_with_a_json_rpc_error_at_once(tmp_path, spec, code):
    # The Python SDK's client waits for an answer with the request's id: an HTTP-shaped body never came
    store, demo = tmp_path / "store", StdioCommand(tmp_path)
    run_client(stdio_plan(demo.behind_proxy(store, "--mode", "record"), STEPS[:2]), {})
    started = time.monotonic()
    got = run_client(stdio_plan(demo.behind_proxy(store, "--mode", "replay", "--faults", spec), STEPS[1:3]), {})
    assert got[1]["error"]["code"] == code and "Injected fault" in got[1]["error"]["message"]
    assert got[2]["error"]["code"] == code  # a call the recording never made: faulted before the store
    assert time.monotonic() - started < 15
