"""An MCP agent scored from its traffic: a real agent (the openai client for its model, the
official MCP SDK for its tools, both through HTTP_PROXY), a scripted model on loopback, a
FastMCP server; the session read back as a trajectory whose steps are the model's tool calls
with what the MCP tools answered, and the same run replayed offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fakes.fake_openai import FakeOpenAI, ToolCall
from tests.mcp_demo import HERE, McpServer
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

TASK = "What is the weather in Oslo over the next 2 days, and what is 2 plus 3?"


def model(request: dict):
    """Asks for both tools at once, then answers from what they said."""
    results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    if not results:
        return [ToolCall("demo__forecast", {"city": "Oslo", "days": 2}, id="c1"),
                ToolCall("demo__add", {"a": 2, "b": 3}, id="c2")]
    return "Done: " + " | ".join(r.replace("\n", " ") for r in results)


def agent(env: dict[str, str], llm: str, mcp: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    done = subprocess.run([sys.executable, str(HERE / "agent.py"), json.dumps({"llm": llm, "mcp": mcp, "task": TASK})],
                          env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["answer"]


def stbproxy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stbproxy", *args], capture_output=True, text=True, timeout=120)


def test_an_mcp_agents_run_is_scored_from_its_traffic_and_replays_offline(tmp_path):
    store = tmp_path / "store"
    with FakeOpenAI(model) as llm, McpServer(tmp_path) as server:
        llm_url = f"{llm.url}/v1"
        with ProxyProcess(store, "--mode", "record", "--session", "mcp-run") as proxy:
            answer = agent(proxy.client_env(), llm_url, server.url)
    assert answer.startswith("Done: ") and "sunny in Oslo" in answer

    out = tmp_path / "converted.json"
    converted = stbproxy("eval", "convert", "--answers", "mcp-run", "--store", str(store), "--out", str(out))
    assert converted.returncode == 0, converted.stderr
    assert "GET" not in converted.stderr  # the client's session stream is never kept, as expected: no note
    (trajectory,) = json.loads(out.read_text()).values()
    steps = [node for node in _path(trajectory["answer"]["answer_details"][0]) if node["role"] == "tool"]
    assert [s["message"]["name"] for s in steps] == ["demo__forecast", "demo__add"]
    assert "sunny in Oslo" in steps[0]["message"]["response"] and '"total": 5' in steps[1]["message"]["response"]
    assert trajectory["query"] == TASK

    # the server and the model are gone: the whole run replays from the store
    with ProxyProcess(store, "--mode", "replay") as proxy:
        assert agent(proxy.client_env(), llm_url, server.url) == answer


def _path(node: dict) -> list[dict]:
    out = []
    while node:
        out.append(node)
        node = node["next"][0] if node.get("next") else None
    return out
