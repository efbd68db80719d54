"""What `stbproxy serve` checks and says before it is ready, through the installed command:
each store's own catalog (brought in from its old place beside the store), a replay of
nothing refused, and where real /virtual calls will go."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import requests

from stbproxy.models import Exchange, Request, Response, Source
from stbproxy.serve_process import ServeProcess
from stbproxy.stb.catalog import ApiDoc, Catalog
from stbproxy.store.embedded import Store
from stbproxy.store.record_format import encode_exchange
from stbproxy.store.shared_bulk import SharedBulk
from stbproxy.store.shared_url import parse_shared_url
from tests.cli.test_cli_process import one_error_line, stbproxy

pytestmark = pytest.mark.integration


def ready_line(proxy: ServeProcess) -> str:
    return next(line for line in proxy.output if " listening on http://" in line)


def write_tools(root: Path, urls: dict[str, str]) -> Path:
    """A ToolBench tools folder: one tool of category Data whose APIs are ``{name: url}``."""
    folder = root / "tools" / "Data"
    folder.mkdir(parents=True)
    doc = {"tool_name": "Sample", "tool_description": "", "api_list": [
        {"name": name, "url": url, "method": "GET", "description": "", "required_parameters": [],
         "optional_parameters": []} for name, url in urls.items()]}
    (folder / "sample.json").write_text(json.dumps(doc))
    return root / "tools"


def old_catalog(folder: Path, apis: int) -> Path:
    """A catalog where earlier versions kept it: beside the store, in the store's parent folder."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "catalog.json"
    Catalog([ApiDoc(category="Data", tool="Old", api=f"api {n}", url=f"http://old.example/{n}", method="GET")
             for n in range(apis)]).save(path)
    return path


def make_store(path: Path) -> Path:
    """A store as a recording leaves it (an import of nothing creates it)."""
    cassette = Path(__file__).resolve().parents[2] / "cassettes" / "weather_oslo.yaml"
    result = stbproxy("import", "cassette", str(cassette), "--store", str(path))
    assert result.returncode == 0, result.stderr
    return path


# -- 6: each store has its own catalog --------------------------------------------------------------


def test_import_tools_writes_into_the_store_and_a_sibling_store_does_not_see_it(tmp_path):
    tools = write_tools(tmp_path / "docs", {"forecast": "http://api.example/forecast"})
    runs = tmp_path / "runs"
    imported = stbproxy("import", "tools", str(tools), "--store", str(runs / "a"))
    assert imported.returncode == 0, imported.stderr
    assert (runs / "a" / "catalog.json").is_file() and not (runs / "catalog.json").exists()
    assert f"catalog {runs / 'a' / 'catalog.json'}: 1 APIs" in imported.stdout

    with ServeProcess(runs / "a") as own, ServeProcess(runs / "b") as sibling:
        mine, theirs = ready_line(own), ready_line(sibling)
    assert f"store {runs / 'a'}, catalog {runs / 'a' / 'catalog.json'} (1 API)" in mine
    assert f"store {runs / 'b'}, no catalog" in theirs


def test_a_catalog_in_the_old_place_is_moved_into_the_store_with_a_notice(tmp_path):
    store = make_store(tmp_path / "run" / "store")
    old = old_catalog(tmp_path / "run", apis=3)
    with ServeProcess(store) as proxy:
        said = "".join(proxy.output)
    new = store / "catalog.json"
    assert f"catalog moved from {old} to {new}" in said
    assert f"catalog {new} (3 APIs)" in ready_line(proxy)
    assert new.is_file() and not old.exists()


def test_an_old_catalog_shared_by_sibling_stores_is_copied_until_the_last_takes_it(tmp_path):
    first, second = make_store(tmp_path / "runs" / "a"), make_store(tmp_path / "runs" / "b")
    old = old_catalog(tmp_path / "runs", apis=2)
    tools = write_tools(tmp_path / "docs", {"forecast": "http://api.example/forecast"})

    copied = stbproxy("import", "tools", str(tools), "--store", str(first))  # 'import tools' adopts it first
    assert copied.returncode == 0, copied.stderr
    assert f"catalog copied from {old} to {first / 'catalog.json'}" in copied.stderr
    assert "1 other store(s)" in copied.stderr and old.exists()
    assert f"catalog {first / 'catalog.json'}: 3 APIs (1 new)" in copied.stdout  # the old two, and the new one

    with ServeProcess(second) as proxy:  # the last store beside it: moved
        said = "".join(proxy.output)
    assert f"catalog moved from {old} to {second / 'catalog.json'}" in said
    assert f"catalog {second / 'catalog.json'} (2 APIs)" in ready_line(proxy)
    assert not old.exists()


# -- 7: a replay of nothing is refused ----------------------------------------------------------------


def test_a_replay_of_a_missing_or_empty_store_is_refused_in_one_line(tmp_path):
    missing = tmp_path / "never-recorded"
    empty = tmp_path / "only-logs"
    with Store(empty) as db:  # a run whose every request passed through: logged, nothing to answer
        db.append_session("run-1", {"time": 1.0, "source": "passthrough", "key": "log/passthrough/1", "seconds": 0.1})
    refused = [stbproxy("serve", "--port", "0", "--mode", "replay", "--store", str(store), timeout=30)
               for store in (missing, empty)]
    lines = [one_error_line(result) for result in refused]
    assert lines[0].startswith(f"stbproxy: error: nothing to replay: no store at {missing}; ")
    assert "--allow-empty" in lines[0]
    assert lines[1].startswith(f"stbproxy: error: nothing to replay: the store at {empty} holds no entries; ")
    assert not missing.exists()  # not created just to be found empty

    with ServeProcess(missing, "--mode", "replay", "--allow-empty") as proxy:  # on purpose: every request a miss
        with requests.Session() as client:
            client.trust_env = False
            answer = client.get("http://api.example/anything", proxies={"http": proxy.url})
    assert answer.status_code == 404 and answer.headers["X-Stb-Source"] == "miss"

    recorded = make_store(tmp_path / "recorded")
    with ServeProcess(recorded, "--mode", "replay") as proxy:
        assert "mode replay" in ready_line(proxy)


def test_a_refused_start_leaves_no_folder_behind(tmp_path):
    key = tmp_path / "key.pem"  # a private key where a CA bundle belongs
    key.write_text("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIBwRZj6Kv6Ndxd5Vq0vC5Kz1aXq0f8M9tXq0Yc0C9Gm3\n"
                   "-----END PRIVATE KEY-----\n")
    with socket.socket() as taken:  # a port in use
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        refusals = {
            "--upstream-ca": (["--upstream-ca", str(key), "--port", "0"], "the upstream CA bundle"),
            "--port": (["--port", busy], "the port is in use"),
            "--fork": (["--fork", "nope@2", "--port", "0"], "the store holds no session 'nope'"),
            "--simulator": (["--simulator", "llm", "--port", "0"], "the LLM simulator needs OPENAI_API_KEY"),
        }
        for name, (args, said) in refusals.items():
            run = tmp_path / name.strip("-")
            line = one_error_line(stbproxy("serve", "--store", str(run / "store"), "--confdir", str(run / "certs"),
                                           *args, env={"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}, timeout=60))
            assert said in line, line
            assert not run.exists(), (name, sorted(str(p) for p in run.rglob("*")))
    stdio = tmp_path / "stdio"  # mcp-stdio's refused start too
    line = one_error_line(stbproxy("mcp-stdio", "--store", str(stdio / "store"), "--simulator", "llm", "--", "true",
                                   env={"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}, input=""))
    assert "the LLM simulator needs OPENAI_API_KEY" in line and not stdio.exists()
    # a store that was there before stays, with what it held; the CA folder the start made goes
    store = make_store(tmp_path / "kept" / "store")
    one_error_line(stbproxy("serve", "--store", str(store), "--confdir", str(tmp_path / "kept" / "certs"),
                            "--upstream-ca", str(key), "--port", "0"))
    with Store(store, readonly=True) as db:
        assert len(list(db.entries())) == 2  # the cassette's two interactions
    assert not (tmp_path / "kept" / "certs").exists()


def test_a_replay_with_a_shared_tier_counts_its_entries_too(tmp_path, redis_server):
    local = tmp_path / "fresh"
    refused = stbproxy("serve", "--port", "0", "--mode", "replay", "--store", str(local), "--shared", redis_server.url,
                       timeout=30)
    assert one_error_line(refused).startswith(f"stbproxy: error: nothing to replay: no store at {local}, nor does the "
                                              f"shared tier {redis_server.url}")
    answer = Exchange("http/api.example/GET/item/1", Request("GET", "http://api.example/item"),
                      Response(200, (), b"{}"), Source.UPSTREAM, 1.0)
    with SharedBulk(parse_shared_url(redis_server.url)) as bulk:
        bulk.put_many([(answer.key, encode_exchange(answer))])
    with ServeProcess(local, "--mode", "replay", "--shared", redis_server.url) as proxy:
        assert f"shared {redis_server.url}" in ready_line(proxy)


# -- 9: the ready line says where real /virtual calls go -------------------------------------------


def virtual_call(proxy: ServeProcess, api: str) -> requests.Response:
    call = {"category": "Data", "tool_name": "Sample", "api_name": api, "tool_input": "{}"}
    with requests.Session() as client:
        client.trust_env = False
        return client.post(f"{proxy.url}/virtual", json=call, timeout=30)


def test_the_ready_line_says_what_really_answers_virtual_misses(tmp_path, upstream):
    mixed = write_tools(tmp_path / "mixed", {"forecast": upstream.url("/echo/forecast"),
                                             "history": "http://history.example/past",
                                             "alerts": "https://weather-alerts.p.rapidapi.com/alerts"})
    only_rapidapi = write_tools(tmp_path / "rapid", {"alerts": "https://weather-alerts.p.rapidapi.com/alerts"})
    for name, tools in (("mixed", mixed), ("keyed", mixed), ("rapid", only_rapidapi)):
        assert stbproxy("import", "tools", str(tools), "--store", str(tmp_path / name)).returncode == 0
    proxies = {
        "none": ServeProcess(tmp_path / "none"),
        "mixed": ServeProcess(tmp_path / "mixed", "--simulator", "off"),
        "keyed": ServeProcess(tmp_path / "keyed", env={"STBPROXY_RAPIDAPI_KEY": "rk-test-1"}),
        "rapid": ServeProcess(tmp_path / "rapid"),
        "toolbench": ServeProcess(tmp_path / "toolbench", "--toolbench-url", upstream.url("/virtual")),
    }
    try:
        for proxy in proxies.values():
            proxy.launch()
        said = {name: ready_line(proxy.wait_ready()) for name, proxy in proxies.items()}
        forecast, alerts = virtual_call(proxies["mixed"], "forecast"), virtual_call(proxies["mixed"], "alerts")
        relayed = virtual_call(proxies["toolbench"], "forecast")
    finally:
        for proxy in proxies.values():
            proxy.stop()

    assert "real /virtual calls: none (no catalog)" in said["none"]
    assert ("real /virtual calls: to the catalog's URLs (2 APIs on 2 hosts; 1 more on RapidAPI, skipped without "
            "$STBPROXY_RAPIDAPI_KEY)") in said["mixed"]
    assert ("real /virtual calls: to the catalog's URLs (3 APIs on 3 hosts; 1 of them on RapidAPI, with "
            "$STBPROXY_RAPIDAPI_KEY)") in said["keyed"] and "rk-test-1" not in said["keyed"]
    assert "real /virtual calls: none (1 on RapidAPI, skipped without $STBPROXY_RAPIDAPI_KEY)" in said["rapid"]
    assert f"real /virtual calls: to a ToolBench server at {upstream.url('/virtual')}" in said["toolbench"]
    # and so it is: the catalog's own URL answered, RapidAPI was not called, the server got the call
    assert forecast.headers["X-Stb-Source"] == "upstream" and upstream.hits["/echo/forecast"] == 1
    assert alerts.headers["X-Stb-Source"] != "upstream" and "no RapidAPI key" in alerts.json()["error"]
    assert relayed.headers["X-Stb-Source"] == "upstream" and len(upstream.virtual_calls) == 1


def test_a_refused_start_removes_what_it_made_and_never_what_another_start_made_meanwhile(tmp_path):
    from stbproxy.cli.common import missing_roots, remove_new

    ours, theirs = tmp_path / "s" / "store-1", tmp_path / "s" / "store-0"
    made = missing_roots(ours, tmp_path / "ca" / "certs")  # taken before anything exists: "s" is new
    (ours / "data").mkdir(parents=True)
    (tmp_path / "ca" / "certs").mkdir(parents=True)
    theirs.mkdir()  # a start side by side under the same new folder
    (theirs / "CURRENT").write_text("another store")
    remove_new(made)
    assert not ours.exists() and not (tmp_path / "ca").exists()
    assert (theirs / "CURRENT").read_text() == "another store"
    remove_new(missing_roots(tmp_path / "x" / "y"))  # nothing made: nothing to remove, no error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
