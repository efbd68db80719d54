"""A session's GET stream through the proxy: what a server sends by itself (a list change)
reaches the unmodified SDK client in every way in (the fast lane, HTTPS, mitmproxy's own
lane, the local endpoint, a reader worker of serve --workers); a broken stream resumes
with Last-Event-ID; the proxy closes the server's stream when the client leaves; without
a server the stream is refused (405) as by a server that offers none; and nothing of a
stream is kept."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import yaml

from stbproxy.store.embedded import Store
from tests.mcp_demo import McpServer, rpc, run_client
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

VERSION = "2025-11-25"
CHANGED = "notifications/tools/list_changed"
TOLD = [["call", "touch_tools", {}], ["until_notified", "touch_tools", CHANGED, 15]]
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json",
           "mcp-protocol-version": VERSION}


@pytest.mark.parametrize("way_in", ["fast lane", "https", "no fast lane", "local endpoint", "workers"])
def test_what_a_server_says_by_itself_reaches_the_client_on_its_get_stream(tmp_path, test_ca, way_in):
    tls = ["--tls", str(test_ca.cert_file), str(test_ca.key_file)] if way_in == "https" else []
    with McpServer(tmp_path, *tls, scheme="https" if tls else "http") as server:
        options = {"https": ["--upstream-ca", str(test_ca.ca_file)], "no fast lane": ["--no-fast-lane"],
                   "local endpoint": ["--mcp", f"demo={server.url}"], "workers": ["--workers", "2"]}.get(way_in, [])
        with ProxyProcess(tmp_path / "store", "--mode", "record", *options) as proxy:
            if way_in == "local endpoint":
                got = run_client({"url": f"{proxy.url}/mcp/demo", "steps": TOLD}, {})
            else:
                got = run_client({"url": server.url, "steps": TOLD}, proxy.client_env())
    assert got[1]["content"][0]["text"] == "told"
    assert got[2] == {"notified": CHANGED}


# -- the stream itself, with a plain HTTP client -------------------------------------------------


class Session:
    """An MCP session opened through the proxy by hand."""

    def __init__(self, proxy: ProxyProcess, server: McpServer) -> None:
        self.url = server.url
        self.client = httpx.Client(proxy=proxy.url, timeout=10)
        answer = self.post(rpc("initialize", {"protocolVersion": VERSION, "capabilities": {},
                                              "clientInfo": {"name": "by-hand", "version": "1"}}))
        self.id = answer.headers["mcp-session-id"]
        assert self.post(rpc("notifications/initialized", message_id=None)).status_code == 202

    def post(self, message: dict) -> httpx.Response:
        headers = {**HEADERS, **({"mcp-session-id": self.id} if hasattr(self, "id") else {})}
        return self.client.post(self.url, content=json.dumps(message), headers=headers)

    def touch_tools(self) -> None:
        assert self.post(rpc("tools/call", {"name": "touch_tools", "arguments": {}}, 7)).status_code == 200

    @contextmanager
    def stream(self, last_event_id: str | None = None):
        """The session's GET stream, read on a thread: (its response, the events read so far)."""
        headers = {"accept": "text/event-stream", "mcp-session-id": self.id, "mcp-protocol-version": VERSION,
                   **({"last-event-id": last_event_id} if last_event_id else {})}
        events: list[dict] = []
        with self.client.stream("GET", self.url, headers=headers) as response:
            reader = threading.Thread(target=read_events, args=(response, events), daemon=True)
            if response.status_code == 200:
                reader.start()
            yield response, events
        if reader.is_alive():
            reader.join(5)


def read_events(response: httpx.Response, events: list[dict]) -> None:
    event: dict = {}
    try:
        for line in response.iter_lines():
            if not line:
                if event:
                    events.append(event)
                event = {}
                continue
            field, _, value = line.partition(":")
            event[field] = value.strip()
    except httpx.HTTPError:
        pass  # the stream closed under the reader


def wait_for(events: list, count: int, seconds: float = 10) -> list:
    deadline = time.monotonic() + seconds
    while len(events) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return events


def notifications(events: list[dict]) -> list[str]:
    return [json.loads(e["data"])["method"] for e in events if e.get("data")]


def test_a_broken_stream_resumes_from_its_last_event_id(tmp_path):
    with McpServer(tmp_path, "--events") as server, ProxyProcess(tmp_path / "store", "--mode", "record") as proxy:
        session = Session(proxy, server)
        with session.stream() as (response, events):
            assert response.status_code == 200 and response.headers["x-stb-source"] == "passthrough"
            session.touch_tools()
            first = wait_for(events, 1)[0]  # as the server sent it, while the stream stays open
        assert notifications([first]) == [CHANGED] and first["id"]
        session.touch_tools()  # said while the client has no stream open: the server keeps it
        with session.stream(last_event_id=first["id"]) as (response, events):
            assert response.status_code == 200
            resumed = wait_for(events, 1)
    assert notifications(resumed) == [CHANGED] and resumed[0]["id"] != first["id"]


def test_the_servers_stream_is_closed_when_the_client_leaves(tmp_path):
    # The SDK's server allows one GET stream per session (a second one is a 409 while the
    # first is open): a second stream through the proxy works only if the first was closed.
    with McpServer(tmp_path) as server, ProxyProcess(tmp_path / "store", "--mode", "record") as proxy:
        session = Session(proxy, server)
        with session.stream() as (response, _):
            assert response.status_code == 200
        deadline, status = time.monotonic() + 10, None
        while status != 200 and time.monotonic() < deadline:
            with session.stream() as (response, events):
                status = response.status_code
                if status == 200:
                    session.touch_tools()
                    assert notifications(wait_for(events, 1)) == [CHANGED]
            time.sleep(0.1)
        assert status == 200


def test_without_a_server_the_stream_is_refused_and_nothing_of_a_stream_is_kept(tmp_path):
    store = tmp_path / "store"
    with McpServer(tmp_path) as server:
        with ProxyProcess(store, "--mode", "record", "--session", "live") as proxy:
            session = Session(proxy, server)
            with session.stream() as (response, events):
                session.touch_tools()
                assert notifications(wait_for(events, 1)) == [CHANGED]
    # replay: no server to listen to; a client reads 405 as "this server offers no stream"
    with ProxyProcess(store, "--mode", "replay") as proxy:
        session = Session(proxy, server)
        assert session.id.startswith("stbproxy-")  # initialize came from the store
        with session.stream() as (response, _):
            assert response.status_code == 405 and response.headers["x-stb-source"] == "local"
    with Store(store, readonly=True) as db:
        kept = [db.get(key) for prefix in ("mcp/", "log/") for key in db.keys(prefix)]
        assert not [e for e in kept if e.request.method == "GET" and e.response.status == 200]
        assert not any(CHANGED.encode() in e.response.body for e in kept)  # its events are nowhere
        streamed = [r for r in db.session_records("live") if r["method"] == "GET"]
        assert [(r["status"], r["source"], r["key"]) for r in streamed] == [(200, "passthrough", "")]
    cassette = tmp_path / "live.yaml"
    exported = subprocess.run([sys.executable, "-m", "stbproxy", "export", "--session", "live", "-o", str(cassette),
                               "--store", str(store)], capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    assert "GET http://127.0.0.1" in exported.stderr and "never kept" in exported.stderr  # named, left out
    interactions = yaml.safe_load(cassette.read_text())["interactions"]
    assert interactions and all(i["request"]["method"] == "POST" for i in interactions)
