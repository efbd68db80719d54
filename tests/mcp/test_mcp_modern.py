"""The stateless era of MCP (2026-07-28) through the proxy, with the official SDK 2.x's
server and client as real processes (from a venv of their own: tests/mcp_modern): no
handshake, ``_meta`` on every request, ``server/discover``, Mcp-Method / Mcp-Name headers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import httpx
import pytest

from stbproxy.store.embedded import Store
from tests.mcp_demo import free_port
from tests.mcp_modern import CLIENT, SERVER, modern_python
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

STEPS = [["tools"], ["call", "add", {"a": 2, "b": 3}], ["call", "shout", {"word": "hey"}], ["read", "demo://info"],
         ["prompt", "review", {"code": "x = 1"}]]


@pytest.fixture(scope="module")
def python2():
    return modern_python()


class ModernServer:
    def __init__(self, python: str, folder) -> None:
        self.python, self.port = python, free_port()
        self.calls_file = folder / f"modern-calls-{self.port}.txt"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def calls(self) -> list[str]:
        return self.calls_file.read_text().split() if self.calls_file.exists() else []

    def __enter__(self):
        self.process = subprocess.Popen([self.python, str(SERVER), "--port", str(self.port), "--calls",
                                         str(self.calls_file)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(self.process.stderr.read().decode())
                time.sleep(0.05)
        raise RuntimeError("the modern MCP server did not listen")

    def __exit__(self, *exc_info) -> None:
        self.process.terminate()
        self.process.wait(10)


def modern_client(python: str, plan: dict, env: dict[str, str]) -> list:
    clean = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    done = subprocess.run([python, str(CLIENT), json.dumps(plan)], env={**clean, **env}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_stateless_era_records_and_replays_in_another_order(tmp_path, python2):
    store = tmp_path / "store"
    with ModernServer(python2, tmp_path) as server:
        with ProxyProcess(store, "--mode", "record") as proxy:
            recorded = modern_client(python2, {"url": server.url, "mode": "auto", "steps": STEPS},
                                     proxy.client_env())
        assert server.calls() == ["add", "shout"]
    assert recorded[0] == {"protocol": "2026-07-28"}  # auto mode: server/discover, then the stateless era
    assert recorded[2]["structured_content"] == {"total": 5, "note": "2+3"}
    assert recorded[1]["result_type"] == "complete"
    with Store(store, readonly=True) as db:
        methods = sorted(key.split("/")[3] + "/" + key.split("/")[4] for key in db.keys("mcp/"))
        assert "server/discover" in methods and not any(m.startswith("initialize") for m in methods)
    with ProxyProcess(store, "--mode", "replay") as proxy:
        again = modern_client(python2, {"url": server.url, "mode": "auto", "steps": STEPS}, proxy.client_env())
        reversed_ = modern_client(python2, {"url": server.url, "steps": STEPS[::-1]}, proxy.client_env())
    assert again == recorded
    assert reversed_[1:] == recorded[1:][::-1]


def test_a_subscriptions_listen_stream_brings_changes_as_they_happen(tmp_path, python2):
    store = tmp_path / "store"
    with ModernServer(python2, tmp_path) as server:
        with ProxyProcess(store, "--mode", "record") as proxy:
            got = modern_client(python2, {"url": server.url, "steps": [["listen", "touch_tools", {}]]},
                                proxy.client_env())
    assert got[1] == {"event": "ToolsListChanged"}  # while the stream stays open, not when it ends
    with Store(store, readonly=True) as db:  # the stream itself is never an answer to serve again
        assert not any("/subscriptions/listen/" in key for key in db.keys("mcp/"))
    with ProxyProcess(store, "--mode", "replay") as proxy:  # no server to listen to: an error the client reads
        again = modern_client(python2, {"url": server.url, "steps": [["listen", "touch_tools", {}]]},
                              proxy.client_env())
    assert again[1]["error"]["code"] == -32011 and "passed on to the server" in again[1]["error"]["message"]


def test_headers_that_contradict_the_body_are_a_400_never_stored(tmp_path, python2):
    store = tmp_path / "store"
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1, "b": 1}, "_meta": meta}}
    with ModernServer(python2, tmp_path) as server:
        with ProxyProcess(store) as proxy:
            with httpx.Client(proxy=f"http://127.0.0.1:{proxy.port}", trust_env=False) as client:
                answer = client.post(server.url, json=body, headers={
                    "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
                    "Mcp-Method": "tools/call", "Mcp-Name": "shout"})
        assert server.calls() == []  # never reached the server
    assert answer.status_code == 400 and answer.headers["x-stb-source"] == "local"
    assert answer.json()["error"]["code"] == -32020 and "Mcp-Name" in answer.json()["error"]["message"]
    with Store(store, readonly=True) as db:
        assert list(db.keys("mcp/")) == []


def test_the_stateless_era_simulates_a_new_call_and_fails_tools_on_purpose(tmp_path, python2):
    store = tmp_path / "store"
    with ModernServer(python2, tmp_path) as server:
        with ProxyProcess(store, "--mode", "record") as proxy:
            modern_client(python2, {"url": server.url, "steps": [["tools"], ["call", "shout", {"word": "a"}]]},
                          proxy.client_env())
    # the server is gone: a call it never answered is made up from its stored tools/list
    with ProxyProcess(store, "--simulator", "schema") as proxy:
        simulated = modern_client(python2, {"url": server.url, "steps": [
            ["call", "add", {"a": 4, "b": 5}], ["call", "add", {"a": "four"}]]}, proxy.client_env())
    made, refused = simulated[1:]
    assert set(made["structured_content"]) == {"total", "note"} and made["is_error"] is False
    assert refused["is_error"] is True and "Invalid arguments for tool add" in refused["content"][0]["text"]
    with ProxyProcess(store, "--mode", "replay", "--faults", "tool-error,tool=shout") as proxy:
        faulted = modern_client(python2, {"url": server.url, "steps": [["call", "shout", {"word": "a"}]]},
                                proxy.client_env())
    assert faulted[1]["is_error"] is True and "Injected fault" in faulted[1]["content"][0]["text"]
