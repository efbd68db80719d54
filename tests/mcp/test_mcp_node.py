"""Third-party MCP software through the proxy, from npm (pinned in tests/mcp_node/package.json):
the TypeScript SDK's client (through the proxy with undici's ProxyAgent, and over stdio), the
reference server @modelcontextprotocol/server-everything (Streamable HTTP and stdio) and the
Inspector's CLI mode (through serve --mcp's local endpoint, and over stdio). For each pair:
record, replay with the server gone, replay in another order in a new session, a hit then a
miss in virtual mode with the server up, simulation of an unseen call, faults, the server's
questions in the middle of a call (sampling, elicitation), and progress, live and replayed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stbproxy.store.embedded import Store
from tests import processes
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parents[1] / "mcp_node"
MODULES = HERE / "node_modules"
EVERYTHING = MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
INSPECTOR = MODULES / "@modelcontextprotocol" / "inspector" / "cli" / "build" / "cli.js"
STBPROXY = str(Path(sys.executable).with_name("stbproxy"))
UNREACHABLE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "ENETUNREACH", "network")

SAMPLED = ["call", "trigger-sampling-request", {"prompt": "hello", "maxTokens": 5}]
ELICITED = ["call", "trigger-elicitation-request", {}]
PROGRESS = ["call", "trigger-long-running-operation", {"duration": 1.2, "steps": 3}, {"progress": True}]
STEPS = [["call", "echo", {"message": "hi"}], ["call", "get-sum", {"a": 2, "b": 3}], PROGRESS, SAMPLED,
         ["read", "demo://resource/static/document/architecture.md"], ["prompt", "simple-prompt", {}], ["tools"]]


@pytest.fixture(scope="session")
def node_modules():
    """The pinned packages, installed with ``npm ci`` when missing; a skip, saying so, only
    where the npm registry cannot be reached."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the third-party MCP tests (tests/mcp_node)")
    if not EVERYTHING.exists() or not INSPECTOR.exists():
        done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, capture_output=True, text=True,
                              timeout=600)
        if done.returncode != 0:
            if any(word in done.stderr for word in UNREACHABLE):
                pytest.skip(f"the npm registry cannot be reached (npm ci in {HERE}): {done.stderr[-300:]}")
            raise RuntimeError(f"npm ci in {HERE} failed: {done.stderr[-2000:]}")
    return MODULES


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Everything:
    """The reference server over Streamable HTTP at /mcp, as a process of its own."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Everything:
        self.process = subprocess.Popen(["node", str(EVERYTHING), "streamableHttp"], env={**os.environ,
                                        "PORT": str(self.port)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.wait_listening(self.process, self.port, "the reference server")
        return self

    def stop(self) -> None:
        processes.stop(self.process)

    def __exit__(self, *exc_info) -> None:
        self.stop()


@pytest.fixture(scope="module")
def everything(node_modules):
    with Everything() as server:
        yield server


def ts_client(plan: dict, proxy: ProxyProcess | None = None) -> list:
    """What the TypeScript SDK's client got for ``plan`` (through ``proxy`` when given)."""
    clean = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    env = {**clean, **({"HTTP_PROXY": proxy.url} if proxy is not None else {})}
    done = subprocess.run(["node", str(HERE / "client.mjs"), json.dumps(plan)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def inspector(*args: str, ok: bool = True) -> dict | str:
    """The Inspector CLI's output (``--cli TARGET ... --method ...``), as JSON; with ``ok``
    False, what it said when it failed."""
    done = subprocess.run(["node", str(INSPECTOR), "--cli", *args], capture_output=True, text=True, timeout=120)
    if not ok:
        assert done.returncode != 0, done.stdout
        return done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout[done.stdout.index("{"):])


def stdio(store: Path, *options: str) -> list[str]:
    return [STBPROXY, "mcp-stdio", "--store", str(store), *options, "--", "node", str(EVERYTHING), "stdio"]


def texts(result: dict) -> str:
    return " ".join(c.get("text", "") for c in result.get("content", []))


def sources(store: Path, prefix: str = "mcp/") -> dict[str, str]:
    with Store(store, readonly=True) as db:
        return {e.key.split("/")[-2]: e.source.value for e in db.scan(prefix) if "/tools/call/" in e.key}


# -- the TypeScript SDK's client and the reference server, over Streamable HTTP -------------------


def test_ts_client_records_replays_in_another_order_simulates_and_faults_over_http(tmp_path, node_modules):
    store = tmp_path / "store"
    with Everything() as server:
        plan = {"url": server.url, "steps": [*STEPS, ELICITED,
                                             # progress through the proxy as it comes: a 2.5 s timeout that
                                             # progress resets outlives a 3.2 s tool only if each arrives live
                                             ["call", "trigger-long-running-operation", {"duration": 3.2, "steps": 4},
                                              {"timeout": 2500, "reset": True}]]}
        with ProxyProcess(store, "--mode", "record", "--session", "rec") as proxy:
            recorded = ts_client(plan, proxy)
    assert "Echo: hi" in texts(recorded[1]) and "5" in texts(recorded[2])
    assert [p["progress"] for p in recorded[3]["progress"]] == [1, 2, 3]
    assert "a sampled answer" in texts(recorded[4]) and "Name: Ada" in texts(recorded[8])
    assert "completed" in texts(recorded[9])  # not timed out: the progress was live
    assert {"sampling/createMessage", "elicitation/create"} <= set(recorded[-1]["asked"])

    # the server is gone: replay in another order, in a new session
    order = [ELICITED, SAMPLED, PROGRESS, STEPS[4], STEPS[1], STEPS[0], STEPS[5]]
    with ProxyProcess(store, "--mode", "replay") as proxy:
        replayed = ts_client({"url": server.url, "steps": order}, proxy)
        otherwise = ts_client({"url": server.url, "sampling": "another answer", "steps": [SAMPLED]}, proxy)
        local = ts_client({"url": server.url, "steps": [["set_level", "debug"], ["subscribe", "demo://x"],
                                                        ["call", "echo", {"message": "unseen"}]]}, proxy)
    assert replayed[1:8] == [recorded[8], recorded[4], recorded[3], recorded[5], recorded[2], recorded[1],
                             recorded[6]]
    assert replayed[0]["session"].startswith("stbproxy-") and replayed[-1]["session"] == replayed[0]["session"]
    assert replayed[-1]["asked"] == ["elicitation/create", "sampling/createMessage"]  # asked again, in place
    miss = otherwise[1]["error"]
    assert miss["code"] == -32010 and miss["data"]["differs_at"] == "/result/content/text"
    assert miss["data"]["got"]["result"]["content"]["text"] == "another answer"
    assert local[1] == {} and local[2] == {}  # logging/setLevel, resources/subscribe: answered by the proxy
    closest = local[3]["error"]["data"]["closest"]
    assert "/tools/call/echo/" in closest["key"]
    assert closest["differences"] == [{"part": "json:params.arguments.message", "stored": "hi", "got": "unseen"}]

    # an unseen call, simulated from the stored tool list; faults as HTTP and as MCP
    with ProxyProcess(store, "--simulator", "schema") as proxy:
        simulated = ts_client({"url": server.url, "steps": [["call", "get-structured-content",
                                                             {"location": "New York"}]]}, proxy)
    assert simulated[1]["structuredContent"] and simulated[1].get("isError") is not True
    with ProxyProcess(store, "--mode", "replay", "--faults", "status=503,tool=echo", "--faults",
                      "tool-error,tool=get-sum") as proxy:
        faulted = ts_client({"url": server.url, "steps": [STEPS[0], STEPS[1], PROGRESS]}, proxy)
    assert "503" in faulted[1]["error"]["message"]
    assert faulted[2]["isError"] is True and "Injected fault" in texts(faulted[2])
    assert faulted[3]["result"] == recorded[3]["result"]
    assert sources(store)["get-structured-content"] == "simulated"


def test_a_hit_then_a_miss_in_virtual_mode_reaches_the_live_server_in_the_clients_session(tmp_path, everything):
    store = tmp_path / "store"
    with ProxyProcess(store, "--mode", "record") as proxy:
        ts_client({"url": everything.url, "steps": [STEPS[0], SAMPLED]}, proxy)
    with ProxyProcess(store, "--simulator", "schema") as proxy:
        got = ts_client({"url": everything.url, "steps": [STEPS[0], ["call", "echo", {"message": "horizon"}],
                                                          ELICITED, STEPS[0]]}, proxy)
        otherwise = ts_client({"url": everything.url, "sampling": "another answer", "steps": [SAMPLED]}, proxy)
    assert got[0]["session"].startswith("stbproxy-")  # initialize from the store: the proxy's id
    assert texts(got[1]) == "Echo: hi" and texts(got[2]) == "Echo: horizon"  # the server's, not made up
    assert "Name: Ada" in texts(got[3])  # the server asked, live, in the session the proxy opened
    assert got[-1]["session"] == got[0]["session"] and "close_error" not in got[-1]
    # a stored call whose question the client answers otherwise: the server answers it, live, not kept
    assert "another answer" in texts(otherwise[1])
    assert otherwise[-1]["asked"] == ["sampling/createMessage", "sampling/createMessage"]
    assert sources(store) == {"echo": "upstream", "trigger-sampling-request": "upstream",
                              "trigger-elicitation-request": "upstream"}
    with Store(store, readonly=True) as db:
        (sampled,) = [e for e in db.scan("mcp/") if "/trigger-sampling-request/" in e.key]
    assert b"a sampled answer" in sampled.response.body  # the recording's, as it was


ECHO = ("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=hi")
UNSEEN = ("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=unseen")
STRUCTURED = ("--method", "tools/call", "--tool-name", "get-structured-content", "--tool-arg", "location=Chicago")


def test_inspector_cli_through_the_local_endpoint(tmp_path, node_modules):
    store = tmp_path / "store"
    with Everything() as server:
        with ProxyProcess(store, "--mode", "record", "--mcp", f"ev={server.url}") as proxy:
            endpoint = f"{proxy.url}/mcp/ev/mcp"  # the Inspector puts /mcp in place of any other path
            listed = inspector(endpoint, "--method", "tools/list")
            live = inspector(endpoint, *ECHO)
    assert texts(live) == "Echo: hi" and any(t["name"] == "echo" for t in listed["tools"])
    with ProxyProcess(store, "--mode", "replay", "--mcp", f"ev={server.url}") as proxy:  # the server is gone
        endpoint = f"{proxy.url}/mcp/ev/mcp"
        assert inspector(endpoint, *ECHO) == live and inspector(endpoint, "--method", "tools/list") == listed
        assert inspector(endpoint, "--method", "logging/setLevel", "--log-level", "debug") == {}
        assert "-32010" in inspector(endpoint, *UNSEEN, ok=False)
    with ProxyProcess(store, "--mode", "replay", "--faults", "status=503", "--mcp", f"ev={server.url}") as proxy:
        assert "503" in inspector(f"{proxy.url}/mcp/ev/mcp", *ECHO, ok=False)
    with ProxyProcess(store, "--simulator", "schema", "--mcp", f"ev={server.url}") as proxy:
        simulated = inspector(f"{proxy.url}/mcp/ev/mcp", *STRUCTURED)
    assert simulated["structuredContent"]
    with Everything(server.port), ProxyProcess(store, "--mcp", f"ev={server.url}") as proxy:  # the server is back
        endpoint = f"{proxy.url}/mcp/ev/mcp"
        assert inspector(endpoint, *ECHO) == live and texts(inspector(endpoint, *UNSEEN)) == "Echo: unseen"
    assert sources(store)["echo"] == "upstream"


# -- over stdio, behind mcp-stdio ------------------------------------------------------------------


def test_ts_client_over_stdio_records_replays_and_faults(tmp_path, node_modules):
    store = tmp_path / "store"
    recorded = ts_client({"stdio": stdio(store, "--mode", "record"), "steps": STEPS})
    # live, the SDK may drop the last progress: the server writes it with the answer, in one read
    assert [p["progress"] for p in recorded[3]["progress"]][:2] == [1, 2]
    assert "a sampled answer" in texts(recorded[4])
    order = [SAMPLED, PROGRESS, STEPS[0], STEPS[4], STEPS[1], STEPS[5]]
    replayed = ts_client({"stdio": stdio(store, "--mode", "replay"), "steps": order})
    assert [p["progress"] for p in replayed[2]["progress"]] == [1, 2, 3]  # kept, and paced on replay
    assert replayed[2]["result"] == recorded[3]["result"]
    assert [replayed[1], *replayed[3:7]] == [recorded[4], recorded[1], recorded[5], recorded[2], recorded[6]]
    assert "sampling/createMessage" in replayed[-1]["asked"]
    otherwise = ts_client({"stdio": stdio(store, "--mode", "replay"), "sampling": "no", "steps": [SAMPLED]})
    assert otherwise[1]["error"]["code"] == -32010 and otherwise[1]["error"]["data"]["asked"] == \
        "sampling/createMessage"
    # a hit, then a miss the server (started for it) answers; a question answered otherwise: the server's
    virtual = ts_client({"stdio": stdio(store), "sampling": "other", "steps": [
        STEPS[0], ["call", "echo", {"message": "late"}], SAMPLED]})
    assert texts(virtual[1]) == "Echo: hi" and texts(virtual[2]) == "Echo: late"
    assert '"other"' in texts(virtual[3]) and virtual[-1]["asked"].count("sampling/createMessage") == 2
    for spec, code in (("down=1", -32011), ("status=503", -32603), ("timeout", -32011), ("malformed", -32603),
                       ("empty", -32603), ("refuse", -32011)):
        started = time.monotonic()
        faulted = ts_client({"stdio": stdio(store, "--mode", "replay", "--faults", spec), "steps": [STEPS[0]]})
        assert faulted[1]["error"]["code"] == code and "Injected fault" in faulted[1]["error"]["message"], spec
        assert time.monotonic() - started < 15
    simulated = ts_client({"stdio": stdio(store, "--simulator", "schema", "--faults", "down=1"),
                           "steps": [["call", "get-structured-content", {"location": "Chicago"}]]})
    assert simulated[1]["structuredContent"]


def command(folder: Path, name: str, argv: list[str]) -> str:
    """``argv`` as one executable file: the Inspector reads a ``--`` in its own arguments."""
    path = folder / name
    path.write_text("#!/bin/sh\nexec " + " ".join(f"'{arg}'" for arg in argv) + "\n")
    path.chmod(0o755)
    return str(path)


def test_inspector_cli_over_stdio(tmp_path, node_modules):
    store = tmp_path / "store"
    recording = command(tmp_path, "record.sh", stdio(store, "--mode", "record"))
    replaying = command(tmp_path, "replay.sh", stdio(store, "--mode", "replay"))
    listed = inspector(recording, "--method", "tools/list")
    live = inspector(recording, *ECHO)
    assert inspector(replaying, *ECHO) == live and inspector(replaying, "--method", "tools/list") == listed
    assert inspector(replaying, "--method", "logging/setLevel", "--log-level", "info") == {}
    faulted = command(tmp_path, "faulted.sh", stdio(store, "--mode", "replay", "--faults", "status=503"))
    assert "Injected fault (status=503)" in inspector(faulted, *ECHO, ok=False)
    virtual = command(tmp_path, "virtual.sh", stdio(store))
    assert inspector(virtual, *ECHO) == live and texts(inspector(virtual, *UNSEEN)) == "Echo: unseen"
    simulating = command(tmp_path, "simulating.sh", stdio(store, "--simulator", "schema", "--faults", "down=1"))
    assert inspector(simulating, *STRUCTURED)["structuredContent"]
