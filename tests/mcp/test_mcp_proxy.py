"""MCP through the proxy, with the official SDK's client and a FastMCP server, both real
processes on loopback, the client configured only by HTTP_PROXY: record, replay after the
server is gone (in a new client session, in another order), simulate a tool call the
server never answered, inject faults."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from stbproxy.store.embedded import Store
from tests.fakes.fake_openai import FakeOpenAI
from tests.keys.secret_forms_helpers import forbidden, leaks
from tests.mcp_demo import McpServer, run_client
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

CALLS = [["tools"], ["call", "add", {"a": 2, "b": 3}], ["call", "forecast", {"city": "Oslo", "days": 3}],
         ["call", "shout", {"word": "hey"}], ["read", "demo://info"], ["prompt", "review", {"code": "x = 1"}]]


def plan(server_url: str, steps: list) -> dict:
    return {"url": server_url, "steps": steps}


def record(store, server: McpServer, steps: list, *options: str) -> list:
    """What the client got for ``steps`` through a record-mode proxy into ``store``."""
    with ProxyProcess(store, "--mode", "record", *options) as proxy:
        return run_client(plan(server.url, steps), proxy.client_env())


@pytest.mark.parametrize("answers", ["sse", "json"])
def test_recorded_calls_replay_identically_after_the_server_is_gone(tmp_path, answers):
    store = tmp_path / "store"
    with McpServer(tmp_path, *(["--json"] if answers == "json" else [])) as server:
        with ProxyProcess(store, "--mode", "record", "--session", "rec") as proxy:
            recorded = run_client(plan(server.url, CALLS), proxy.client_env())
        assert server.calls() == ["add", "forecast", "shout"]
    assert recorded[0]["initialized"] == "demo"
    assert recorded[2]["structuredContent"] == {"total": 5, "note": "2+3"}

    with ProxyProcess(store, "--mode", "replay") as proxy:
        again = run_client(plan(server.url, CALLS), proxy.client_env())
        # the same calls in another order: other JSON-RPC ids, the same answers
        shuffled = run_client(plan(server.url, [CALLS[3], CALLS[1], CALLS[5], CALLS[2]]), proxy.client_env())
    assert again == recorded
    assert shuffled[1:] == [recorded[4], recorded[2], recorded[6], recorded[3]]


def test_a_replay_miss_is_an_error_the_client_reads_at_once(tmp_path):
    store = tmp_path / "store"
    with McpServer(tmp_path) as server:
        record(store, server, [["tools"], ["call", "add", {"a": 1, "b": 1}]])
    with ProxyProcess(store, "--mode", "replay") as proxy:
        got = run_client(plan(server.url, [["call", "add", {"a": 1, "b": 2}]]), proxy.client_env())
    assert got[1]["error"]["code"] == -32010
    assert "no stored answer for tools/call" in got[1]["error"]["message"]


def test_a_tool_call_the_server_never_answered_is_simulated_from_its_stored_tool_list(tmp_path):
    store = tmp_path / "store"
    with McpServer(tmp_path) as server:
        record(store, server, [["tools"]])
    # the server is gone; virtual mode: the store first, else the simulator
    with ProxyProcess(store, "--simulator", "schema", "--session", "sim") as proxy:
        got = run_client(plan(server.url, [["call", "forecast", {"city": "Rome", "days": 2}],
                                           ["call", "forecast", {"city": "Rome", "days": 2}],
                                           ["call", "forecast", {"city": "Rome", "days": 9}],
                                           ["call", "add", {"a": 1}],
                                           ["call", "nosuchtool", {}]]), proxy.client_env())
    simulated, again, out_of_range, missing_b, unknown = got[1:]
    # the SDK client checked structuredContent against the tool's outputSchema itself
    assert set(simulated["structuredContent"]) == {"city", "days", "summary", "high_c"}
    assert simulated["isError"] is False and again == simulated  # deterministic, and stored
    assert out_of_range["isError"] is True and "Invalid arguments for tool forecast" in \
        out_of_range["content"][0]["text"] and "/days" in out_of_range["content"][0]["text"]
    assert missing_b["isError"] is True and "'b' is a required property" in missing_b["content"][0]["text"]
    assert unknown["error"]["code"] == -32602 and "Unknown tool: nosuchtool" in unknown["error"]["message"]
    with Store(store, readonly=True) as db:
        sources = {e.source.value for e in db.scan("mcp/") if "/tools/call/" in e.key}
        assert sources == {"simulated"}


def test_faults_fail_mcp_tools_as_mcp_does(tmp_path):
    store = tmp_path / "store"
    calls = [["call", "add", {"a": 2, "b": 3}], ["call", "shout", {"word": "x"}]]
    with McpServer(tmp_path) as server:
        record(store, server, [["tools"], *calls])
    with ProxyProcess(store, "--mode", "replay", "--faults", "tool-error,tool=add") as proxy:
        got = run_client(plan(server.url, calls), proxy.client_env())
    assert got[1]["isError"] is True and "Injected fault" in got[1]["content"][0]["text"]
    assert got[2]["content"][0]["text"] == "X!"  # another tool: untouched
    with ProxyProcess(store, "--mode", "replay", "--faults", "rpc-error") as proxy:
        got = run_client(plan(server.url, calls), proxy.client_env())
    assert got[1]["error"]["code"] == -32603 and got[2]["error"]["code"] == -32603


def test_credentials_are_never_kept_and_the_answers_to_them_stay_private(tmp_path, redis_server):
    token, api_key = "Tok3n/with+slash==", "K3y-Value-Zeta77"
    headers = {"Authorization": f"Bearer {token}", "X-Api-Key": api_key}
    forms = {token: forbidden(token), api_key: forbidden(api_key)}
    store = tmp_path / "store"
    steps = [["tools"], ["call", "whoami", {}], ["call", "add", {"a": 1, "b": 2}]]
    with McpServer(tmp_path) as server:
        with ProxyProcess(store, "--mode", "record", "--shared", redis_server.url) as proxy:
            live = run_client({"url": server.url, "headers": headers, "steps": steps}, proxy.client_env())
    # the server's own answer reached the client as it was (it echoes the credentials) ...
    assert token in live[2]["content"][0]["text"] and api_key in live[2]["content"][0]["text"]
    # ... and nothing kept holds a credential, in any form it could be written in
    assert store_leaks(store, forms) == []
    values = redis_values(redis_server.url)
    assert [leak for value in values for leak in leaks(value, forms)] == []
    assert not [key for key in values if key.startswith(b"mcp/")], "a private answer reached the shared tier"
    with Store(store, readonly=True) as db:
        kept = list(db.scan("mcp/"))
    assert kept and all(e.meta.get("private") for e in kept)
    assert any("REDACTED" in e.response.body.decode() for e in kept if "/whoami/" in e.key)

    with ProxyProcess(store, "--mode", "replay") as proxy:
        same = run_client({"url": server.url, "headers": headers, "steps": steps[2:]}, proxy.client_env())
        other = run_client({"url": server.url, "headers": {"Authorization": "Bearer another-token-9"},
                            "steps": steps[2:]}, proxy.client_env())
    assert same[1] == live[3]  # the same credentials: their own answers
    assert other[0]["initialize_error"]["code"] == -32010  # others: nothing of theirs is stored


def store_leaks(store, forms) -> list:
    """Credentials in the store's files as written, and in every record decoded."""
    found = []
    for path in store.rglob("*"):
        if path.is_file():
            found += [(path.name, *leak) for leak in leaks(path.read_bytes(), forms)]
    with Store(store, readonly=True) as db:
        for exchange in db.entries():
            text = json.dumps([exchange.request.url, exchange.request.headers, exchange.response.headers,
                               exchange.request.body.decode("utf-8", "replace"),
                               exchange.response.body.decode("utf-8", "replace"), exchange.meta])
            found += [(exchange.key, *leak) for leak in leaks(text, forms)]
    return found


def redis_values(url: str) -> dict[bytes, bytes]:
    import redis

    client = redis.Redis.from_url(url)
    try:
        out = {}
        for key in client.scan_iter(count=1000):
            kind = client.type(key).decode()
            if kind == "string":
                out[key] = client.get(key) or b""
            elif kind == "list":
                out[key] = b"\n".join(client.lrange(key, 0, -1))
            else:
                out[key] = client.dump(key) or b""
        return out
    finally:
        client.close()


def test_a_session_the_store_opened_reaches_the_live_server_for_a_miss(tmp_path):
    store = tmp_path / "store"
    with McpServer(tmp_path) as server:
        record(store, server, [["tools"], ["call", "add", {"a": 1, "b": 2}]])
        # virtual mode, the server up: initialize and tools/list come from the store (a session
        # id minted by the proxy), the new call goes to the server in a session of its own
        with ProxyProcess(store, "--session", "mixed") as proxy:
            got = run_client(plan(server.url, [["tools"], ["call", "add", {"a": 1, "b": 2}],
                                               ["call", "forecast", {"city": "Rome"}]]), proxy.client_env())
        assert server.calls() == ["add", "forecast"]  # the stored add was not asked again
    assert got[3]["structuredContent"]["summary"] == "sunny in Rome"
    with Store(store, readonly=True) as db:
        records = list(db.session_records("mixed"))
    sources = Counter(r["source"] for r in records)
    # from the store: initialize, tools/list, add; answered by the proxy: the initialized
    # notification and the GET stream (405), the session having no server session yet; the
    # DELETE at the end goes to the server session the forecast call opened (and so does a
    # GET stream the client opens again once that session exists, when it comes in time)
    assert {k: v for k, v in sources.items() if k != "passthrough"} == {"cache": 3, "local": 2, "upstream": 1}
    assert sources["passthrough"] >= 1, sources


def test_a_client_that_ignores_proxy_variables_uses_the_local_endpoint(tmp_path):
    store = tmp_path / "store"
    steps = [["tools"], ["call", "add", {"a": 4, "b": 5}]]
    with McpServer(tmp_path) as server:
        with ProxyProcess(store, "--mode", "record", "--mcp", f"demo={server.url}") as proxy:
            assert any(f"MCP /mcp/demo -> {server.url}" in line for line in proxy.output)
            local = f"http://127.0.0.1:{proxy.port}/mcp/demo"
            recorded = run_client(plan(local, steps), {})  # no proxy variables at all
            unknown = run_client(plan(f"http://127.0.0.1:{proxy.port}/mcp/nosuch", steps), {})
    assert recorded[2]["structuredContent"] == {"total": 9, "note": "4+5"}
    assert "initialize_error" in unknown[0]  # a 404 from the proxy, which the SDK reports as an error
    # the same entries as through the proxy: a client that does use HTTP_PROXY replays them
    with ProxyProcess(store, "--mode", "replay") as proxy:
        assert run_client(plan(server.url, steps), proxy.client_env()) == recorded


def test_stats_and_sessions_count_mcp_calls_by_server_and_tool(tmp_path):
    store = tmp_path / "store"
    calls = [["call", "add", {"a": 1, "b": 2}], ["call", "add", {"a": 1, "b": 2}], ["call", "shout", {"word": "a"}]]
    with McpServer(tmp_path) as server:
        with ProxyProcess(store, "--session", "counted") as proxy:
            run_client(plan(server.url, [["tools"], *calls]), proxy.client_env())
    where = f"127.0.0.1:{server.port}"
    stats = json.loads(subprocess.run([sys.executable, "-m", "stbproxy", "stats", "--json", "--store", str(store)],
                                      capture_output=True, text=True, timeout=60).stdout)
    assert stats["calls"]["mcp_tools"] == [
        {"server": where, "tool": "add", "calls": 2, "by_source": {"cache": 1, "upstream": 1}},
        {"server": where, "tool": "shout", "calls": 1, "by_source": {"upstream": 1}}]
    text = subprocess.run([sys.executable, "-m", "stbproxy", "sessions", "--store", str(store)],
                          capture_output=True, text=True, timeout=60).stdout
    assert f"counted: MCP {where} add: 2 calls (cache 1, upstream 1)" in text
    row = json.loads(subprocess.run([sys.executable, "-m", "stbproxy", "sessions", "--json", "--store", str(store)],
                                    capture_output=True, text=True, timeout=60).stdout)[0]
    # the proxy's own answers (the initialized notification, the GET stream) are not counted as misses
    assert row["hit_rate"] == pytest.approx(1 / 5)  # initialize, tools/list, add, add (hit), shout


def test_the_llm_simulator_answers_an_mcp_tool_from_its_schemas(tmp_path):
    asked = []

    def simulator_model(request: dict):
        prompt = request["messages"][-1]["content"]
        asked.append(prompt)
        if '"Lima"' in prompt:  # an answer that breaks the tool's outputSchema
            return json.dumps({"error": "", "response": {"city": "Lima"}})
        return json.dumps({"error": "", "response": {"city": "Rome", "days": 2, "summary": "rain", "high_c": 12.5}})

    store = tmp_path / "store"
    with McpServer(tmp_path) as server:
        record(store, server, [["tools"], ["call", "forecast", {"city": "Oslo"}]])
    with FakeOpenAI(simulator_model) as llm:
        env = {"OPENAI_BASE_URL": f"{llm.url}/v1", "OPENAI_API_KEY": "sk-simulator-test"}
        with ProxyProcess(store, "--simulator", "llm", "--sim-model", "fake", env=env) as proxy:
            got = run_client(plan(server.url, [["call", "forecast", {"city": "Rome", "days": 2}],
                                               ["call", "forecast", {"city": "Lima"}]]), proxy.client_env())
    assert got[1]["structuredContent"] == {"city": "Rome", "days": 2, "summary": "rain", "high_c": 12.5}
    assert set(got[2]["structuredContent"]) == {"city", "days", "summary", "high_c"}  # the schema's, valid
    first = asked[0]
    assert '"outputSchema"' not in first and "must follow this JSON Schema" in first and '"high_c"' in first
    assert 'Arguments: {"city": "Rome", "days": 2}' in first
    assert "sunny in Oslo" in first  # the recorded call, as the tool answered it, is the example
    with Store(store, readonly=True) as db:
        made = [e.meta for e in db.scan("mcp/") if e.source.value == "simulated"]
    (meta,) = [m for m in made if "replaced" in m]
    assert meta["simulator"] == "schema" and "outputSchema" in meta["replaced"]


def test_an_https_mcp_server_through_the_proxys_ca(tmp_path, test_ca):
    store = tmp_path / "store"
    tls = ["--tls", str(test_ca.cert_file), str(test_ca.key_file)]
    steps = [["tools"], ["call", "add", {"a": 7, "b": 8}]]
    with McpServer(tmp_path, *tls, scheme="https") as server:
        with ProxyProcess(store, "--mode", "record", "--upstream-ca", str(test_ca.ca_file)) as proxy:
            recorded = run_client(plan(server.url, steps), proxy.client_env())  # trusts the proxy's CA only
    assert recorded[2]["structuredContent"] == {"total": 15, "note": "7+8"}
    with ProxyProcess(store, "--mode", "replay") as proxy:
        assert run_client(plan(server.url, steps), proxy.client_env()) == recorded


def test_an_mcp_session_exports_as_a_cassette_that_replays(tmp_path):
    store, cassette = tmp_path / "store", tmp_path / "mcp.yaml"
    with McpServer(tmp_path) as server:
        with ProxyProcess(store, "--mode", "record", "--session", "rec") as proxy:
            recorded = run_client(plan(server.url, CALLS), proxy.client_env())
    exported = subprocess.run([sys.executable, "-m", "stbproxy", "export", "--session", "rec", "-o", str(cassette),
                               "--store", str(store)], capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    interactions = yaml.safe_load(cassette.read_text())["interactions"]
    session_ids = {value for i in interactions for part in ("request", "response")
                   for name, values in i[part]["headers"].items() if name.lower() == "mcp-session-id"
                   for value in values}
    assert session_ids == {"REDACTED"}  # a live session's id is never written
    with ProxyProcess(tmp_path / "unused", "--cassette", str(cassette)) as proxy:
        assert run_client(plan(server.url, CALLS), proxy.client_env()) == recorded
    imported = tmp_path / "imported"
    done = subprocess.run([sys.executable, "-m", "stbproxy", "import", "cassette", str(cassette), "--store",
                           str(imported)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with ProxyProcess(imported, "--mode", "replay") as proxy:
        assert run_client(plan(server.url, CALLS[::-1]), proxy.client_env())[1:] == recorded[1:][::-1]


def test_progress_reaches_a_replaying_client_under_its_own_token(tmp_path):
    # Replayed in another order, the stored progress carries the recording's token: the SDK
    # client would drop it (or hand it to another call) unless it is this request's own
    store = tmp_path / "store"
    counted = ["call", "count_to", {"n": 3}, {"progress": True}]
    with McpServer(tmp_path) as server:
        recorded = record(store, server, [["call", "add", {"a": 1, "b": 1}], counted])
    assert recorded[2]["progress"] == [1, 2, 3]
    with ProxyProcess(store, "--mode", "replay") as proxy:
        replayed = run_client(plan(server.url, [counted]), proxy.client_env())
        unasked = run_client(plan(server.url, [counted[:3]]), proxy.client_env())
    assert replayed[1] == recorded[2]
    assert unasked[1] == recorded[2]["result"]  # no progress asked for: the same answer, without it
