"""Export and import end to end: sessions recorded through a real `stbproxy serve`, cassettes
replayed by plain vcrpy, imported back, and flow files written by a real mitmdump."""

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
import requests
import vcr
from vcr.serializers import yamlserializer

from stbproxy.keys import request_key
from stbproxy.models import Request
from stbproxy.sessions import safe_session_name
from stbproxy.store.embedded import Store
from tests.proxy.test_integration_proxy import agent
from tests.servers import ProxyProcess, Upstream

pytestmark = pytest.mark.integration

SECRET = "rk-export-secret-0099"
SSE_BODY = "".join(f'data: {{"n": {i}}}\n\n' for i in range(3)) + "data: [DONE]\n\n"


def stb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stbproxy", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def session_calls(base: str) -> list[dict]:
    return [
        {"method": "GET", "url": f"{base}/echo?city=Paris",
         "headers": {"X-RapidAPI-Key": SECRET, "X-RapidAPI-Host": "weather.p.rapidapi.com"}},
        {"method": "POST", "url": f"{base}/echo", "data": json.dumps({"query": "pizza", "api_key": SECRET}),
         "headers": {"Content-Type": "application/json", "Authorization": f"Bearer {SECRET}"}},
        {"method": "GET", "url": f"{base}/binary"},
        {"method": "GET", "url": f"{base}/sse"},
        {"method": "GET", "url": f"{base}/gzip"},
        {"method": "GET", "url": f"{base}/echoheader", "headers": {"X-RapidAPI-Key": SECRET}},
        {"method": "GET", "url": f"{base}/echo?q=x&api_key={SECRET}"},  # a secret in the query: last
    ]


def scrubbed(body: str) -> str:
    return body.replace(f"Bearer {SECRET}", "REDACTED").replace(SECRET, "REDACTED")


def interactions(path: Path) -> list[dict]:
    return yamlserializer.deserialize(path.read_text())["interactions"]


def without_source(items: list[dict]) -> list[dict]:
    out = json.loads(json.dumps(items, default=lambda b: b.decode("latin-1")))
    for item in out:
        item["response"]["headers"].pop("X-Stb-Source")
    return out


def assert_no_secret_under(folder: Path) -> None:
    for root, _dirs, files in os.walk(folder):
        for name in files:
            assert SECRET.encode() not in (Path(root) / name).read_bytes(), f"secret found in {name}"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A session 'rec-1' recorded through the proxy, plus a session 'mixed' with a cache
    hit, a simulated answer and an answer too big to store; exported while it runs.
    Recorded once for the module; the tests only read the store."""
    tmp_path = tmp_path_factory.mktemp("recorded")
    store = tmp_path / "stb" / "store"
    out = tmp_path / "out"
    out.mkdir()
    with Upstream() as upstream, ProxyProcess(store, "--max-body", "5k", "--validity", "strict") as proxy:
        env = proxy.client_env(session="rec-1")
        seen = agent(env, session_calls(upstream.base))
        agent(proxy.client_env(), [
            {"method": "GET", "url": upstream.url("/echo?city=Paris"), "headers": {"X-Stb-Session": "mixed"}},
            {"method": "GET", "url": "http://127.0.0.1:9/gone?q=1", "headers": {"X-Stb-Session": "mixed"}},
            {"method": "GET", "url": upstream.url("/big?bytes=20000"), "headers": {"X-Stb-Session": "mixed"}},
            {"method": "GET", "url": upstream.url("/echo?odd=1"), "headers": {"X-Stb-Session": "../odd name"}},
        ])
        exported = stb("export", "--session", "rec-1", "--store", store, cwd=out)  # the store is read-only here
    # The upstream is stopped from here on: whatever replays below does so without it.
    assert exported.returncode == 0, exported.stderr
    assert [s["source"] for s in seen] == ["upstream"] * 7
    return store, out / "rec-1.yaml", seen, exported.stdout


def test_exported_session_replays_in_plain_vcrpy(recorded):
    store, cassette, seen, said = recorded
    assert "wrote 7 interactions to rec-1.yaml" in said
    calls = session_calls(seen_base(cassette))
    items = interactions(cassette)
    assert [i["request"]["uri"] for i in items[:6]] == [c["url"] for c in calls[:6]]  # the session's order
    assert items[6]["request"]["uri"].endswith("api_key=REDACTED")  # query secrets are redacted
    assert {i["response"]["headers"]["X-Stb-Source"][0] for i in items} == {"upstream"}
    session = requests.Session()
    session.trust_env = False
    with vcr.use_cassette(str(cassette), record_mode="none") as played:
        for call, before in zip(calls[:6], seen[:6]):
            reply = session.request(call["method"], call["url"], headers=call.get("headers"), data=call.get("data"))
            assert reply.status_code == before["status"]
            assert reply.content.decode("latin-1") == scrubbed(before["body"])
            assert reply.headers.get("Content-Type") == before["content_type"]
            assert reply.headers["X-Stb-Source"] == "upstream"
        assert played.play_count == 6
    assert seen[3]["body"] == SSE_BODY and seen[3]["content_type"] == "text/event-stream"
    assert seen[4]["body"] == '{"compressed": true}'


def seen_base(cassette: Path) -> str:
    uri = interactions(cassette)[0]["request"]["uri"]
    return uri[: uri.index("/echo")]


def test_no_secret_reaches_an_exported_byte(recorded, tmp_path):
    store, cassette, seen, _ = recorded
    assert SECRET in seen[5]["body"]  # the upstream echoed the key back to the agent
    raw = cassette.read_bytes()
    assert SECRET.encode() not in raw and raw.count(b"REDACTED") >= 6
    text_only = tmp_path / "text.json"
    result = stb("export", "--all", "http/127.0.0.1*/echo*", "-o", text_only, "--store", store)
    assert result.returncode == 0, result.stderr
    assert SECRET.encode() not in text_only.read_bytes()
    assert json.loads(text_only.read_text())["version"] == 1


def test_export_import_export_gives_the_same_interactions(recorded, tmp_path):
    store, cassette, _, _ = recorded
    fresh = tmp_path / "fresh" / "store"
    first = stb("import", "cassette", cassette, "--session", "again", "--store", fresh)
    assert first.returncode == 0, first.stderr
    assert "imported: 7, duplicates: 0, problems: 0" in first.stdout
    rerun = stb("import", "cassette", cassette, "--store", fresh)
    assert "imported: 0, duplicates: 7, problems: 0" in rerun.stdout  # idempotent
    # ... for the session's log too: the same cassette into the same session logs nothing more
    again = stb("import", "cassette", cassette, "--session", "again", "--store", fresh)
    assert again.returncode == 0, again.stderr
    assert ("imported: 0, duplicates: 7, problems: 0; session again: 0 calls logged, 7 were logged already by an "
            "earlier import of the same cassette (left as they are)") in again.stdout
    other = stb("import", "cassette", cassette, "--session", "other", "--store", fresh)  # another session logs them
    assert "session other: 7 calls logged" in other.stdout
    second = tmp_path / "again.yaml"
    result = stb("export", "--session", "again", "-o", second, "--store", fresh)
    assert result.returncode == 0, result.stderr
    assert without_source(interactions(second)) == without_source(interactions(cassette))  # 7, not 14
    assert {i["response"]["headers"]["X-Stb-Source"][0] for i in interactions(second)} == {"imported"}
    # Keyed exactly as the proxy keyed them: the imported store holds the same keys.
    with Store(store, readonly=True) as old, Store(fresh, readonly=True) as new:
        recorded_keys = [r["key"] for r in old.session_records("rec-1")]
        assert sorted(ex.key for ex in new.entries()) == sorted(recorded_keys)
        assert {ex.source.value for ex in new.entries()} == {"imported"}
    assert_no_secret_under(fresh)


def test_streamed_sse_survives_record_export_import_and_replay(recorded, tmp_path):
    store, cassette, _, _ = recorded
    (sse,) = [i for i in interactions(cassette) if i["request"]["uri"].endswith("/sse")]
    assert sse["response"]["body"]["string"] == SSE_BODY
    assert sse["response"]["headers"]["Content-Type"] == ["text/event-stream"]
    fresh = tmp_path / "fresh" / "store"
    assert stb("import", "cassette", cassette, "--store", fresh).returncode == 0
    with ProxyProcess(fresh, "--mode", "replay") as proxy:
        (answer,) = agent(proxy.client_env(), [{"method": "GET", "url": sse["request"]["uri"]}])
    assert (answer["status"], answer["source"], answer["content_type"]) == (200, "cache", "text/event-stream")
    assert answer["body"] == SSE_BODY
    events = [block for block in answer["body"].split("\n\n") if block]
    assert events == ['data: {"n": 0}', 'data: {"n": 1}', 'data: {"n": 2}', "data: [DONE]"]


def test_session_export_options_and_errors(recorded, tmp_path):
    store, cassette, _, _ = recorded
    everything = tmp_path / "mixed.yaml"
    result = stb("export", "--session", "mixed", "-o", everything, "--store", store)
    assert result.returncode == 0, result.stderr
    # The answer over --max-body was never stored: reported and skipped, not fatal.
    assert "skipped" in result.stderr and "/big?bytes=20000" in result.stderr and "1 skipped" in result.stdout
    sources = [i["response"]["headers"]["X-Stb-Source"][0] for i in interactions(everything)]
    assert sources == ["upstream", "simulated"]  # the cache hit exports the answer it was served
    real_only = tmp_path / "real.yaml"
    result = stb("export", "--session", "mixed", "-o", real_only, "--exclude-simulated", "--store", store)
    assert result.returncode == 0 and "1 simulated left out" in result.stdout
    assert [i["request"]["uri"] for i in interactions(real_only)] == [interactions(everything)[0]["request"]["uri"]]
    # Unknown sessions name the known ones; binary bodies and JSON do not mix; one of --session/--all.
    unknown = stb("export", "--session", "nope", "--store", store)
    assert unknown.returncode == 2 and "no session 'nope'" in unknown.stderr and "rec-1" in unknown.stderr
    as_json = stb("export", "--session", "rec-1", "-o", tmp_path / "rec.json", "--store", store)
    assert as_json.returncode == 2 and "--format yaml" in as_json.stderr and not (tmp_path / "rec.json").exists()
    assert stb("export", "--store", store).returncode == 2
    # --all: by host, by key, by glob that matches nothing
    by_host = tmp_path / "host.yaml"
    assert stb("export", "--all", "127.0.0.1", "-o", by_host, "--store", store).returncode == 0
    assert len(interactions(by_host)) == 9  # 7 of rec-1, the odd-named session's one, the simulated one
    by_key = tmp_path / "key.yaml"
    assert stb("export", "--all", "http/*/GET/sse/*", "-o", by_key, "--store", store).returncode == 0
    assert [i["response"]["body"]["string"] for i in interactions(by_key)] == [SSE_BODY]
    # host:port as a user writes it picks the same as the host alone
    port = seen_base(cassette).rsplit(":", 1)[1]
    by_host_port = tmp_path / "host-port.yaml"
    result = stb("export", "--all", f"127.0.0.1:{port}", "-o", by_host_port, "--store", store)
    assert result.returncode == 0, result.stderr
    assert interactions(by_host_port) == [i for i in interactions(by_host)
                                          if i["request"]["uri"].startswith(f"http://127.0.0.1:{port}/")]
    assert len(interactions(by_host_port)) == 8  # not the simulated answer of another port
    # a glob that picks nothing: one line, status 2, no file
    for pattern in ("127.0.0.1:1", "nothing.example"):
        nothing = tmp_path / "nothing.yaml"
        result = stb("export", "--all", pattern, "-o", nothing, "--store", store)
        assert result.returncode == 2 and not nothing.exists()
        assert result.stderr.startswith(f"stbproxy: error: --all {pattern!r} matches no stored exchange (compared "
                                        "with each host, host:port, category/tool/api and store key); nothing "
                                        f"written; stored hosts: 127.0.0.1:{port}, ")
        assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("url, pattern, picked", [
    ("https://api.example.com/v1/x", "api.example.com:443", True),  # the scheme's default port
    ("https://api.example.com/v1/x", "api.example.com:80", False),
    ("http://api.example.com/v1/x", "api.example.com:80", True),
    ("https://api.example.com:8443/v1/x", "api.example.com:8443", True),
    ("https://api.example.com:8443/v1/x", "api.example.com:443", False),
    ("https://API.Example.com/v1/x", "api.example.com", True),
    ("https://api.example.com/v1/x", "API.example.COM:443", True),  # host names are case-insensitive
    ("https://api.example.com/v1/x", "*.example.com:*", True),
    ("http://[::1]:8443/x", "[::1]:8443", True),  # a literal address, though brackets read as a glob
    ("http://[::1]:8443/x", "::1", True),
    ("http://127.0.0.1:8443/x", "127.0.0.1:8443", True),
    ("http://127.0.0.1:8443/x", "127.0.0.1:844", False),
])
def test_export_all_matches_host_and_port_as_users_write_them(url, pattern, picked):
    from stbproxy.cassettes.selection import matches
    from stbproxy.models import Exchange, Response, Source

    exchange = Exchange(request_key(Request("GET", url)), Request("GET", url), Response(200), Source.UPSTREAM, 0.0)
    assert matches(exchange, pattern) is picked


def test_odd_session_names_export_to_a_safe_file_in_the_current_folder(recorded, tmp_path):
    store, _, _, _ = recorded
    here = tmp_path / "here"
    here.mkdir()
    result = stb("export", "--session", "../odd name", "--store", store, cwd=here)
    assert result.returncode == 0, result.stderr
    (written,) = list(here.iterdir())
    assert written.name == f"{safe_session_name('../odd name')}.yaml" and "/" not in written.stem
    assert len(interactions(written)) == 1 and not list(tmp_path.glob("*odd*"))


def test_bad_cassettes_are_reported_per_interaction_and_never_stop_the_rest(recorded, tmp_path):
    _, cassette, _, _ = recorded
    document = yamlserializer.deserialize(cassette.read_text())
    del document["interactions"][1]["response"]["status"]
    partly_bad = tmp_path / "partly.yaml"
    partly_bad.write_text(yamlserializer.serialize(document))
    unsafe = tmp_path / "unsafe.yaml"
    unsafe.write_text(f"interactions:\n- !!python/object/apply:os.system ['touch {tmp_path}/PWNED']\nversion: 1\n")
    old = tmp_path / "old.yaml"
    old.write_text("interactions: []\nversion: 2\n")
    truncated = tmp_path / "truncated.yaml"  # a copy cut short, in the middle of its third interaction
    text = cassette.read_text()
    truncated.write_text(text[: text.index("- request:", text.index("- request:", text.index("- request:") + 1) + 1)
                              + 40])
    har = tmp_path / "flows.har"  # what mitmproxy's hardump writes
    har.write_text(json.dumps({"log": {"version": "1.2", "creator": {"name": "mitmproxy"}, "entries": []}}))
    fresh = tmp_path / "fresh" / "store"
    result = stb("import", "cassette", partly_bad, unsafe, old, truncated, har, "--store", fresh)
    assert result.returncode == 1
    assert "imported: 6, duplicates: 0, problems: 5" in result.stdout
    assert f"{partly_bad}: interaction 1: missing response.status" in result.stderr
    assert f"{unsafe}: refused an unsafe or unknown YAML tag" in result.stderr
    assert f"{old}: cassette format version 2 is not supported" in result.stderr
    assert f"  problem: {truncated}: looks truncated (the file ends early): " in result.stderr
    assert (f"  problem: {har}: a HAR file (an HTTP Archive, as browsers and mitmproxy's hardump write), not a vcrpy "
            "cassette; import cassette reads vcrpy cassettes (YAML or JSON, format version 1) and mitmproxy flow files "
            "(mitmdump -w)\n") in result.stderr
    assert not (tmp_path / "PWNED").exists()


# -- mitmproxy flow files -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mitmdump_flows(tmp_path: Path, calls: list[dict]) -> Path:
    """Run a real mitmdump on loopback, send ``calls`` through it, and return its flow file."""
    mitmdump = Path(sys.executable).with_name("mitmdump")
    if not mitmdump.exists():
        pytest.skip("mitmdump is not installed beside this Python")
    flows, port = tmp_path / "flows.mitm", free_port()
    process = subprocess.Popen(
        [str(mitmdump), "--listen-host", "127.0.0.1", "--listen-port", str(port), "-w", str(flows), "-q",
         "--set", "connection_strategy=lazy", "--set", f"confdir={tmp_path / 'mitmconf'}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mitmdump did not start: {process.stdout.read()}")
                time.sleep(0.1)
        proxy = f"http://127.0.0.1:{port}"
        agent({"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "NO_PROXY": ""}, calls)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return flows


def test_mitmdump_flow_files_import_and_corrupt_ones_are_clear_errors(tmp_path, upstream):
    calls = [
        {"method": "GET", "url": upstream.url("/echo?city=Rome"), "headers": {"X-RapidAPI-Key": SECRET}},
        {"method": "GET", "url": upstream.url("/gzip")},
        {"method": "POST", "url": upstream.url("/echo"), "headers": {"Content-Type": "application/json"},
         "data": json.dumps({"q": "x", "api_key": SECRET})},
    ]
    flows = mitmdump_flows(tmp_path, calls)
    assert flows.stat().st_size > 0
    corrupt = tmp_path / "corrupt.mitm"
    corrupt.write_bytes(b"12:not a flow!,99999:" + b"\x00" * 40)
    truncated = tmp_path / "truncated.mitm"
    truncated.write_bytes(flows.read_bytes()[: flows.stat().st_size // 2])
    store = tmp_path / "stb" / "store"
    result = stb("import", "cassette", corrupt, flows, truncated, "--store", store)
    assert result.returncode == 1
    assert f"{corrupt}: not a flow file mitmproxy" in result.stderr
    assert str(truncated) in result.stderr and "after 1 flows" in result.stderr
    # The good file, and the flow the truncated one still held (a duplicate of the good one).
    assert "imported: 3, duplicates: 1, problems: 2" in result.stdout
    with Store(store, readonly=True) as db:
        stored = {ex.key: ex for ex in db.entries()}
    expected = {request_key(Request(c["method"], c["url"], tuple((c.get("headers") or {}).items()),
                                    (c.get("data") or "").encode())) for c in calls}
    assert set(stored) == expected  # keyed as the proxy keys these requests
    assert {ex.source.value for ex in stored.values()} == {"imported"}
    gz = next(ex for ex in stored.values() if ex.request.url.endswith("/gzip"))
    assert gz.response.body == b'{"compressed": true}' and gz.response.header("Content-Encoding") is None
    assert_no_secret_under(store.parent)
    exported = tmp_path / "flows.yaml"
    assert stb("export", "--all", "127.0.0.1", "-o", exported, "--store", store).returncode == 0
    assert SECRET.encode() not in exported.read_bytes() and len(interactions(exported)) == 3
    shutil.rmtree(tmp_path / "mitmconf", ignore_errors=True)
