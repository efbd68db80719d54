"""`--shared URL` on the commands, and a fleet of real `stbproxy serve` processes sharing a
real redis-server (and a 3-node cluster), with an unmodified `requests` client."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from click.testing import CliRunner

from stbproxy.cassettes.vcr_format import write_cassette
from stbproxy.cli import main
from stbproxy.models import Exchange, Request, Response, Source
from stbproxy.serve_process import ServeProcess
from stbproxy.stb.catalog import api_key_name, category_key, tool_key
from stbproxy.store.embedded import Store
from stbproxy.store.key_layout import ENTRY_PREFIXES
from stbproxy.store.record_format import encode_exchange
from stbproxy.store.redis_process import RedisProcess, free_port
from stbproxy.store.shared_bulk import SharedBulk
from stbproxy.store.shared_url import parse_shared_url, redact_shared_url


def invoke(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def stb_cache_from_queries(root, stb_data, apis: int = 12, calls: int = 5):
    """A cache in StableToolBench's layout for real APIs of G1_instruction (names standardized
    as its server names the folders), with Python-literal keys as its server writes them."""
    queries = json.loads((stb_data / "solvable_queries" / "test_instruction" / "G1_instruction.json").read_text())
    seen = {}
    for query in queries:
        for api in query["api_list"]:
            category = category_key(api["category_name"])
            path = root / category / tool_key(api["tool_name"], api["category_name"]) / (
                api_key_name(api["api_name"]) + ".json")
            seen.setdefault(path, None)
        if len(seen) >= apis:
            break
    for path in list(seen)[:apis]:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = {str({"q": f"item {i}", "page": i}): {"error": "", "response": json.dumps({"n": i, "api": path.stem})}
                   for i in range(calls)}
        path.write_text(json.dumps(entries))
    return root, apis * calls


@pytest.mark.integration
def test_import_and_sync_fill_both_tiers_idempotently(tmp_path, redis_server, stb_data):
    cache, count = stb_cache_from_queries(tmp_path / "tool_response_cache", stb_data)
    first, second = tmp_path / "m1" / "store", tmp_path / "m2" / "store"
    url = redis_server.url

    result = invoke("import", "stb-cache", str(cache), "--store", str(first), "--shared", url, "--jobs", "1")
    assert result.exit_code == 0, result.output
    assert f"imported: {count}" in result.output and f"shared tier: {count} added, 0 already there" in result.output
    again = invoke("import", "stb-cache", str(cache), "--store", str(first), "--shared", url, "--jobs", "1")
    assert f"shared tier: 0 added, {count} already there" in again.output

    pulled = invoke("sync", "--pull", "--store", str(second), "--shared", url)
    assert pulled.exit_code == 0 and f"{count} copied" in pulled.output
    assert "0 copied" in invoke("sync", "--pull", "--store", str(second), "--shared", url).output
    with Store(first, readonly=True) as a, Store(second, readonly=True) as b:
        assert dict(a.records("api/")) == dict(b.records("api/")) and len(dict(a.records("api/"))) == count

    # an answer only the second machine has goes up with --push, once
    with Store(second) as db:
        db.put(Exchange("http/h/GET/only-here/1", Request("GET", "http://h/only-here"), Response(200, (), b"{}"),
                        Source.UPSTREAM, 1.0))
    pushed = invoke("sync", "--push", "--store", str(second), "--shared", url)
    assert pushed.exit_code == 0 and "1 copied" in pushed.output and f"{count} already there" in pushed.output
    assert "0 copied" in invoke("sync", "--push", "--store", str(second), "--shared", url).output

    # the catalog travels too: published by import tools, fetched by a pull where none is
    queries = stb_data / "solvable_queries" / "test_instruction" / "G1_instruction.json"
    published = invoke("import", "tools", str(queries), "--store", str(first), "--shared", url)
    assert "published to the shared tier" in published.output
    third = tmp_path / "m3" / "store"
    fetched = invoke("sync", "--pull", "--store", str(third), "--shared", url)
    assert "catalog fetched" in fetched.output
    assert (third / "catalog.json").read_bytes() == (first / "catalog.json").read_bytes()


def test_commands_refuse_a_bad_url_and_an_unreachable_server_without_the_password(tmp_path):
    bad = invoke("sync", "--pull", "--store", str(tmp_path / "s"), "--shared", "redis://u:topsecret@h:port")
    assert bad.exit_code == 2 and "bad port" in bad.output and "topsecret" not in bad.output
    down = invoke("sync", "--pull", "--store", str(tmp_path / "s"), "--shared", "redis://u:topsecret@127.0.0.1:9/0")
    assert down.exit_code == 2 and "redis://u:***@127.0.0.1:9/0" in down.output and "topsecret" not in down.output
    assert "give --push, --pull" in invoke("sync", "--store", str(tmp_path / "s"), "--shared", "redis://h").output


@pytest.mark.integration
def test_an_import_whose_shared_writes_fail_says_so_and_keeps_the_local_store(tmp_path, redis_server, stb_data):
    cache, count = stb_cache_from_queries(tmp_path / "tool_response_cache", stb_data)
    store = tmp_path / "m1" / "store"
    assert invoke("import", "stb-cache", str(cache), "--store", str(store), "--jobs", "1").exit_code == 0
    redis_server.cli("config", "set", "maxmemory-policy", "noeviction")
    redis_server.cli("config", "set", "maxmemory", "1")  # a full server: every write is refused

    failed = invoke("import", "stb-cache", str(cache), "--store", str(store), "--shared", redis_server.url,
                    "--jobs", "1")
    assert failed.exit_code != 0 and "maxmemory" in failed.output and "shared tier redis://127.0.0.1" in failed.output
    assert "imported:" not in failed.output  # no summary for a failed import
    with Store(store, readonly=True) as db:
        assert len(list(db.keys("api/"))) == count


def test_import_cassette_shares_entries_and_the_session(tmp_path, redis_server):
    exchanges = [Exchange(f"http/api.example/GET/item/{i}", Request("GET", f"http://api.example/item?i={i}"),
                          Response(200, (("Content-Type", "application/json"),), b'{"i": %d}' % i),
                          Source.UPSTREAM, 1.0)
                 for i in range(3)]
    cassette = tmp_path / "run.yaml"
    write_cassette(cassette, exchanges, "yaml")
    result = invoke("import", "cassette", str(cassette), "--store", str(tmp_path / "s"), "--session", "captured",
                    "--shared", redis_server.url)
    assert result.exit_code == 0 and "shared tier: 3 added" in result.output
    listed = invoke("sessions", "--json", "--store", str(tmp_path / "s"), "--shared", redis_server.url)
    assert [(row["name"], row["calls"]) for row in json.loads(listed.output)] == [("captured", 3)]


def test_forget_with_shared_deletes_from_both_tiers_and_says_other_machines_keep_copies(tmp_path, redis_server):
    def answer(host: str, n: int) -> Exchange:
        return Exchange(f"http/{host}/GET/item/{n}", Request("GET", f"http://{host}/item?i={n}"),
                        Response(200, (("Content-Type", "application/json"),), b'{"i": %d}' % n), Source.UPSTREAM, 1.0)

    cassette = tmp_path / "run.yaml"
    write_cassette(cassette, [answer("api.example", 0), answer("api.example", 1), answer("keep.example", 2)], "yaml")
    first, second, url = tmp_path / "m1" / "store", tmp_path / "m2" / "store", redis_server.url
    assert invoke("import", "cassette", str(cassette), "--store", str(first), "--shared", url).exit_code == 0
    assert invoke("sync", "--pull", "--store", str(second), "--shared", url).exit_code == 0  # another machine
    with SharedBulk(parse_shared_url(url)) as bulk:  # an answer only the shared tier holds
        only_shared = answer("api.example", 3)
        bulk.put_many([(only_shared.key, encode_exchange(only_shared))])
        keys_before = sorted(bulk.keys(ENTRY_PREFIXES))
    assert len(keys_before) == 4

    dry = CliRunner().invoke(main, ["forget", "--host", "api.example", "--store", str(first), "--shared", url,
                                    "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "3 entries would be forgotten from" in dry.stdout and "the shared tier redis://127.0.0.1" in dry.stdout
    assert "http://api.example/item?i=3" in dry.stderr  # the shared-only answer is selected too

    done = CliRunner().invoke(main, ["forget", "--host", "api.example", "--store", str(first), "--shared", url])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("forgot 3 entries from") and "(2 imported, 1 upstream)" in done.stdout
    assert "local stores of other machines keep their copies" in done.stderr
    with SharedBulk(parse_shared_url(url)) as bulk:
        left = sorted(bulk.keys(ENTRY_PREFIXES))
    assert len(left) == 1 and "keep.example" in left[0]
    with Store(first, readonly=True) as local, Store(second, readonly=True) as other:
        assert [ex.request.host for ex in local.entries()] == ["keep.example"]
        assert len(list(other.entries())) == 3  # the other machine's copies, as the note says


@pytest.mark.integration
def test_a_fleet_of_two_proxies_is_one_cache(tmp_path, upstream):
    with RedisProcess(tmp_path / "redis", "--requirepass", "fleet-pw-123") as server:
        url = f"redis://:fleet-pw-123@127.0.0.1:{server.port}/0"
        a = ServeProcess(tmp_path / "a" / "store", "--shared", url, "--session", "on-a").launch()
        b = ServeProcess(tmp_path / "b" / "store", "--shared", url, "--session", "on-b").launch()
        try:
            a.wait_ready()
            b.wait_ready()
            ready = "".join(a.output)
            assert "shared redis://:***@127.0.0.1" in ready and "fleet-pw-123" not in ready
            urls = [upstream.url(f"/echo?city={i}") for i in range(10)]
            with requests.Session() as client:
                client.trust_env = False
                via_a = [client.get(u, proxies={"http": a.url}) for u in urls]
                via_b = [client.get(u, proxies={"http": b.url}) for u in urls]
        finally:
            a.stop()
            b.stop()
        assert [r.headers["X-Stb-Source"] for r in via_a] == ["upstream"] * 10
        assert [r.headers["X-Stb-Source"] for r in via_b] == ["cache"] * 10
        assert [r.content for r in via_b] == [r.content for r in via_a]
        assert upstream.hits["/echo"] == 10
        assert "fleet-pw-123" not in "".join(a.output + b.output)

        stats = json.loads(invoke("stats", "--json", "--store", str(tmp_path / "b" / "store"), "--shared", url).output)
        assert stats["shared"]["counters"]["shared_hits"] == 10 and stats["shared"]["url"].startswith("redis://:***@")
        listed = json.loads(invoke("sessions", "--json", "--store", str(tmp_path / "a" / "store"),
                                   "--shared", url).output)
        assert {row["name"]: row["calls"] for row in listed} == {"on-a": 10, "on-b": 10}
        out = tmp_path / "on-b.yaml"
        exported = invoke("export", "--session", "on-b", "-o", str(out), "--store", str(tmp_path / "a" / "store"),
                          "--shared", url)
        assert exported.exit_code == 0 and "wrote 10 interactions" in exported.output


@pytest.mark.integration
def test_a_cluster_is_a_shared_tier_too(tmp_path, redis_cluster, stb_data, upstream):
    cache, count = stb_cache_from_queries(tmp_path / "cache", stb_data, apis=6, calls=10)
    url = redis_cluster.url
    imported = invoke("import", "stb-cache", str(cache), "--store", str(tmp_path / "m1" / "store"), "--shared", url,
                      "--jobs", "1")
    assert f"shared tier: {count} added" in imported.output
    pulled = invoke("sync", "--pull", "--store", str(tmp_path / "m2" / "store"), "--shared", url)
    assert f"{count} copied" in pulled.output
    with SharedBulk(parse_shared_url(url)) as bulk:
        assert bulk.key_count() == count
    one = ServeProcess(tmp_path / "m3" / "store", "--shared", url).launch()
    two = ServeProcess(tmp_path / "m4" / "store", "--shared", url).launch()
    try:
        one.wait_ready()
        two.wait_ready()
        with requests.Session() as client:
            client.trust_env = False
            first = client.get(upstream.url("/echo?cluster=1"), proxies={"http": one.url})
            second = client.get(upstream.url("/echo?cluster=1"), proxies={"http": two.url})
    finally:
        one.stop()
        two.stop()
    assert first.headers["X-Stb-Source"] == "upstream" and second.headers["X-Stb-Source"] == "cache"
    assert upstream.hits["/echo"] == 1


# -- attached on purpose only, and refused at start when it cannot be used ----------------------


def shared_session(url: str, name: str) -> None:
    with SharedBulk(parse_shared_url(url)) as bulk:
        record = {"time": 1.0, "source": "cache", "key": "http/h/GET/x/1", "seconds": 0.0}
        bulk.append_sessions([(name, json.dumps(record).encode())])


@pytest.mark.integration
def test_redis_url_in_the_environment_attaches_no_shared_tier(tmp_path, redis_server, upstream):
    shared_session(redis_server.url, "only-in-redis")
    keys_before = redis_server.cli("dbsize").strip()
    env = {"REDIS_URL": redis_server.url}

    # serve (two workers, which a shared tier would refuse) answers from its own store alone
    with ServeProcess(tmp_path / "s", "--workers", "2", env=env) as proxy:
        assert " shared " not in proxy.output[0] and "2 workers" in proxy.output[0]
        with requests.Session() as client:
            client.trust_env = False
            answer = client.get(upstream.url("/echo?alone=1"), proxies={"http": proxy.url})
    assert answer.headers["X-Stb-Source"] == "upstream"

    cassette = tmp_path / "run.yaml"
    write_cassette(cassette, [Exchange("http/api.example/GET/item/1", Request("GET", "http://api.example/item"),
                                       Response(200, (), b"{}"), Source.UPSTREAM, 1.0)], "yaml")
    imported = invoke("import", "cassette", str(cassette), "--store", str(tmp_path / "s"), env=env)
    assert imported.exit_code == 0 and "shared tier" not in imported.output
    stats = json.loads(invoke("stats", "--json", "--store", str(tmp_path / "s"), env=env).output)
    assert "shared" not in stats
    sessions = json.loads(invoke("sessions", "--json", "--store", str(tmp_path / "s"), env=env).output)
    assert "only-in-redis" not in [row["name"] for row in sessions]
    forgot = invoke("forget", "--host", "api.example", "--yes", "--store", str(tmp_path / "s"), env=env)
    assert forgot.exit_code == 0 and "shared tier" not in forgot.output
    assert "give the shared tier" in invoke("sync", "--pull", "--store", str(tmp_path / "s"), env=env).output
    assert redis_server.cli("dbsize").strip() == keys_before  # nothing was written to it


@pytest.mark.integration
@pytest.mark.parametrize("variable", ["STBPROXY_SHARED", "STBPROXY_SHARED_URL"])
def test_stbproxy_shared_attaches_the_tier_and_so_does_its_older_name(tmp_path, redis_server, variable):
    shared_session(redis_server.url, "fleet-run")
    env = {variable: redis_server.url}
    with ServeProcess(tmp_path / "s", env=env) as proxy:
        assert f"shared {redis_server.url}" in proxy.output[0]
    sessions = json.loads(invoke("sessions", "--json", "--store", str(tmp_path / "s"), env=env).output)
    assert "fleet-run" in [row["name"] for row in sessions]


@pytest.mark.integration
def test_a_shared_url_that_cannot_be_used_stops_serve_at_start_in_one_line(tmp_path):
    from tests.cli.test_cli_process import one_error_line, stbproxy

    nothing_there = free_port()
    with RedisProcess(tmp_path / "auth", "--requirepass", "right-pw-7") as server:
        where = f"127.0.0.1:{server.port}"
        cases = [  # (URL, what the line says after the masked URL)
            (f"redis://:right-pw-7@{where}/99", "the server has no database 99"),
            (f"redis://:wrong-pw-7@{where}/0", "the server refused the user name or password"),
            (f"redis://{where}/0", "the server wants a password and the URL gives none"),
            (f"redis://:right-pw-7@127.0.0.1:{nothing_there}/0",
             f"nothing listens at 127.0.0.1:{nothing_there} (connection refused)"),
            # .invalid never resolves (RFC 6761): the resolver answers at once
            ("redis://:right-pw-7@no-such-host.invalid:6379/0", "unknown host no-such-host.invalid"),
        ]

        def start(numbered):
            index, (url, _) = numbered
            began = time.monotonic()
            result = stbproxy("serve", "--port", "0", "--store", str(tmp_path / f"store-{index}"), "--shared", url)
            return result, time.monotonic() - began

        stbproxy("env")  # the CA exists before the cases start side by side
        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(start, enumerate(cases)))
    for (url, reason), (result, seconds) in zip(cases, results):
        line = one_error_line(result)  # also: nothing that looks ready
        assert line.startswith(f"stbproxy: error: shared tier {redact_shared_url(url)}: {reason}"), line
        assert line.endswith("fix --shared or $STBPROXY_SHARED") and "pw-7" not in line, line
        assert seconds < 20, (url, seconds)  # start-up included; a retried URL would never end
    assert not any(path.name.startswith("store-") for path in tmp_path.iterdir())  # refused before the store opened


@pytest.mark.integration
def test_a_shared_tier_that_goes_away_after_start_is_waited_out(tmp_path, upstream):
    with RedisProcess(tmp_path / "redis") as server, ServeProcess(tmp_path / "s", "--shared", server.url) as proxy:
        with requests.Session() as client:
            client.trust_env = False
            before = client.get(upstream.url("/echo?n=1"), proxies={"http": proxy.url})
            server.kill()
            during = client.get(upstream.url("/echo?n=2"), proxies={"http": proxy.url})
            server.start()
            deadline = time.monotonic() + 20
            while redis_keys(server) < 1 and time.monotonic() < deadline:  # the kept write is pushed
                time.sleep(0.1)
            pushed = redis_keys(server)
        assert proxy.process.poll() is None  # still serving
    assert [before.headers["X-Stb-Source"], during.headers["X-Stb-Source"]] == ["upstream", "upstream"]
    assert pushed >= 1
    assert any("is away" in line for line in proxy.output) and any("is back" in line for line in proxy.output)


def redis_keys(server: RedisProcess) -> int:
    return int(server.cli("dbsize").strip() or 0)
