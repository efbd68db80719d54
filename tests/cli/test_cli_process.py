"""What a new user sees in the first hour, through the installed `stbproxy` command as a
subprocess: exit codes, the exact first line, never a traceback, never a false ready line."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urlsplit

import click
import pytest

from stbproxy.cli import main
from stbproxy.sessions import safe_session_name
from stbproxy.store.embedded import Store
from tests.proxy.test_integration_proxy import agent
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("stbproxy")


def stbproxy(*args: str, env: dict | None = None, input: str | None = None, cwd=None, timeout: float = 90):
    """The command as a user's shell runs it: none of the test run's proxy or STBPROXY_ settings
    leak in, except the CA folder (tests never write into the real home) unless ``env`` sets HOME."""
    keep = () if env and "HOME" in env else ("STBPROXY_CONFDIR",)
    base = {k: v for k, v in os.environ.items()
            if not k.lower().endswith("_proxy") and (not k.startswith("STBPROXY_") or k in keep)}
    return subprocess.run([str(SCRIPT), *args], env={**base, **(env or {})}, input=input, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(result) -> str:
    """The failure contract: non-zero exit, one `stbproxy: error:` line, nothing that looks ready."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output and "listening on" not in output, output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stbproxy: error: "), output
    return lines[0]


def line_after(proxy, line: str, timeout: float = 10) -> str:
    """The line the proxy printed after ``line`` (its output is read on a thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at = proxy.output.index(line)
        if len(proxy.output) > at + 1:
            return proxy.output[at + 1].strip()
        time.sleep(0.02)
    raise AssertionError(f"nothing printed after {line!r}")


def fails_in_one_line(cases: list[tuple[list[str], str, str]]) -> list[str]:
    """Run each (args, says, fix) case side by side; each must fail in one line that starts
    with ``says`` and names ``fix``. Returns the lines, for further checks."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda case: stbproxy(*case[0]), cases))
    lines = [one_error_line(result) for result in results]
    for (args, says, fix), line in zip(cases, lines):
        assert line.startswith(f"stbproxy: error: {says}") and fix in line, (args, line)
    return lines


def env_lines(text: str) -> dict[str, str]:
    """The variables ``stbproxy env`` exports (its comment line aside)."""
    return {name: shlex.split(value)[0] for name, _, value in
            (line.removeprefix("export ").partition("=") for line in text.splitlines() if not line.startswith("#"))}


# -- 5, 6: failures are one clear line, and never after a ready line ---------------------------------

def test_no_ready_line_and_one_error_line_for_everything_serve_cannot_open(tmp_path):
    store = tmp_path / "busy" / "store"
    catalog = tmp_path / "bad-catalog.json"  # not beside any store, where serve would find it
    catalog.write_text('{"format": ')
    cassette = tmp_path / "broken.yaml"
    cassette.write_text("interactions: [oops\n")
    (tmp_path / "a-file").write_text("x")
    names = (f"store-{i}" for i in range(100))  # a store per case: the cases run side by side
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    taken = listening.getsockname()[1]
    cases = [
        (["--store", str(tmp_path / "s" / next(names)), "--port", str(taken)],
         f"cannot listen on 127.0.0.1:{taken}: the port is in use", "--port"),
        (["--store", str(store)], f"the store at {store} is locked by another process", "another --store"),
        (["--store", str(tmp_path / "s" / next(names)), "--catalog", str(catalog)],
         f"cannot read catalog {catalog}", "--catalog"),
        (["--store", str(tmp_path / "s" / next(names)), "--cassette", str(cassette)],
         "cannot replay the cassette:", "--cassette"),
        (["--store", str(tmp_path / "a-file" / "store")],
         f"cannot create the store at {tmp_path / 'a-file' / 'store'}: {tmp_path / 'a-file'} is a file", "--store"),
        (["--store", "/proc/stbproxy/store"], "cannot create the store at /proc/stbproxy/store: /proc is the kernel's",
         "--store"),
        (["--store", "/sys/stbproxy"], "cannot create the store at /sys/stbproxy: /sys is the kernel's", "--store"),
        (["--store", str(tmp_path / "s" / next(names)), "--confdir", str(tmp_path / "a-file" / "ca")],
         f"cannot keep the CA in {tmp_path / 'a-file' / 'ca'}", "--confdir"),
        (["--store", str(tmp_path / "s" / next(names)), "--cassette", str(REPO / "cassettes" / "weather_oslo.yaml"),
          "--report", str(tmp_path / "no-such-folder" / "r.json")], "cannot write", "does not exist"),
        (["--store", str(tmp_path / "s" / next(names)), "--host", "10.9.8.7"],
         "refusing to listen on 10.9.8.7", "--proxy-auth"),
        # an empty user name or password would admit 'Proxy-Authorization: Basic Og==': an open proxy
        *[(["--store", str(tmp_path / "s" / next(names)), "--host", "0.0.0.0", "--proxy-auth", empty],
           "--proxy-auth needs a user name and a password, neither of them empty", "--proxy-auth")
          for empty in (":", "u:", ":p")],
        (["--store", str(tmp_path / "s" / next(names)), "--proxy-auth", f"@{tmp_path / 'no-such.htpasswd'}"],
         f"--proxy-auth @{tmp_path / 'no-such.htpasswd'}: no such htpasswd file", "--proxy-auth"),
        (["--store", str(tmp_path / "s" / next(names)), "--mode", "sometimes"],
         "Invalid value for '--mode'", "serve --help"),
        (["--store", str(tmp_path / "s" / next(names)), "--sessions", "x"], "No such option '--sessions'", "--session"),
    ]
    cases = [(["serve", *(["--port", "0"] if "--port" not in args else []), *args], says, fix)
             for args, says, fix in cases]
    stbproxy("env")  # the CA exists before the cases start side by side
    try:
        with Store(store):  # held open: any other writer meets RocksDB's lock
            port_in_use = fails_in_one_line(cases)[0]
    finally:
        listening.close()
    assert "regular@" not in port_in_use  # mitmproxy's own advice does not apply to stbproxy


def test_an_unwritable_store_folder_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    mounted = False
    if os.geteuid() == 0:  # root writes through modes: make the folder a read-only file system
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(locked)],
                                 capture_output=True).returncode == 0
        if not mounted:
            pytest.skip("running as root without a read-only mount: an unwritable folder cannot be made")
    try:
        line = one_error_line(stbproxy("serve", "--port", "0", "--store", str(locked / "store")))
    finally:
        if mounted:
            subprocess.run(["umount", str(locked)], check=True)
    assert "not writable" in line and "--store" in line


def test_every_other_command_fails_in_one_line_naming_the_thing_and_the_fix(tmp_path):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "CURRENT").write_text("garbage\n")
    store = tmp_path / "store"
    with Store(store):
        pass
    cases = [
        (["stats", "--store", str(tmp_path / "none")], f"no store at {tmp_path / 'none'}", "--store"),
        (["stats", "--store", str(junk)], f"the store at {junk} cannot be read", "another --store"),
        (["sessions", "--store", "/proc/none"], "no store at /proc/none", "--store"),
        (["export", "--session", "nope", "--store", str(store)], "no session 'nope'", "known sessions"),
        (["export", "--all", "*", "--store", str(store), "-o", str(tmp_path / "nodir" / "x.yaml")],
         f"cannot write {tmp_path / 'nodir' / 'x.yaml'}", "does not exist"),
        (["export", "--store", str(store)], "give exactly one of --session NAME or --all GLOB", "--all"),
        (["import", "cassette", str(tmp_path / "none.yaml")], "Invalid value for 'FILES...'", "does not exist"),
        (["import", "stb-cache", str(tmp_path / "none")], "Invalid value for 'CACHE_DIR'", "does not exist"),
        (["forget", "--store", str(store)], "say what to forget", "--source"),
        (["forget", "--store", str(store), "--older-than", "soon"], "--older-than: 'soon' is not an age", "7d"),
        (["forget", "--store", str(tmp_path / "none"), "--source", "simulated"], "no store at", "--store"),
        (["env", "--confdir", str(tmp_path / "junk" / "CURRENT" / "ca")], "cannot keep the CA in", "--confdir"),
        (["env", "--port", "99999"], "Invalid value for '--port'", "env --help"),
        (["sevre"], "No such command 'sevre'", "stbproxy --help"),
    ]
    fails_in_one_line(cases)


# -- 3: one CA per user; the ready line prints the client's exact line ----------------------------

CLIENTS = textwrap.dedent("""
    set -e
    eval "$EVAL_LINE"
    curl -sS --fail "$URL" -o /dev/null -w 'curl %{http_code}\\n'
    python -c 'import os, requests; print("requests", requests.get(os.environ["URL"], timeout=20).status_code)'
    python -c 'import os, httpx; print("httpx", httpx.get(os.environ["URL"], timeout=20).status_code)'
    python -c 'import os, urllib.request; print("urllib", urllib.request.urlopen(os.environ["URL"], timeout=20).status)'
""")
NODE = textwrap.dedent("""
    const http = require('http'), tls = require('tls');
    const proxy = new URL(process.env.HTTPS_PROXY), target = new URL(process.env.URL);
    const tunnel = http.request({host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: target.host});
    tunnel.on('connect', (res, socket) => {
      const s = tls.connect({socket, servername: 'localhost'}, () => {
        s.write(`GET ${target.pathname}${target.search} HTTP/1.1\\r\\nHost: ${target.host}\\r\\n` +
                'Connection: close\\r\\n\\r\\n');
      });
      let data = ''; s.on('data', c => data += c); s.on('end', () => console.log('node ' + data.split(' ')[1]));
      s.on('error', e => { console.log('node error ' + e.message); process.exit(1); });
    });
    tunnel.end();
""")


def test_env_without_store_points_at_the_ca_that_serve_uses_and_https_works_for_every_client(
        tmp_path, tls_upstream, test_ca):
    home = tmp_path / "home"
    home.mkdir()
    user = {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with ProxyProcess(tmp_path / "runs" / "x" / "store", "--upstream-ca", str(test_ca.ca_file),
                      env=user, user_ca=True) as proxy:
        ready = [line for line in proxy.output if "listening on" in line][0]
        ca = home / ".stbproxy" / "mitmproxy-ca-cert.pem"
        assert ready.startswith(f"stbproxy 0.1.0 listening on http://127.0.0.1:{proxy.port} (mode virtual, store ")
        assert f"CA {ca})" in ready and ca.is_file()
        eval_line = line_after(proxy, ready)
        assert eval_line == f'point clients at it: eval "$(stbproxy env --port {proxy.port})"'
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("STBPROXY_")}, **user,
               "URL": tls_upstream.url("/echo?via=proxy"), "EVAL_LINE": eval_line.split(": ", 1)[1]}
        env = {k: v for k, v in env.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
        out = subprocess.run(["bash", "-c", CLIENTS], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split("\n")[:4] == ["curl 200", "requests 200", "httpx 200", "urllib 200"]
        if shutil.which("node"):
            exported = env_lines(stbproxy("env", "--port", str(proxy.port), env={"HOME": str(home)}).stdout)
            assert exported["NODE_EXTRA_CA_CERTS"] == str(ca)
            node = subprocess.run(["node", "-e", NODE], env={**env, **exported}, capture_output=True, text=True,
                                  timeout=60)
            assert node.stdout.strip() == "node 200", node.stdout + node.stderr


# -- 4: session names survive URLs; every flag reads its variable -------------------------------

NAMES = ["my run/x", "a:b@c"]


def test_session_names_are_percent_encoded_and_decoded(tmp_path, upstream):
    with ProxyProcess(tmp_path / "store") as proxy:
        for n, name in enumerate(NAMES):
            exported = env_lines(stbproxy("env", "--port", str(proxy.port), "--session", name).stdout)
            proxy_url = exported["HTTP_PROXY"]
            assert unquote(urlsplit(proxy_url).username) == name
            assert "/" not in proxy_url.removeprefix("http://") and proxy_url.count("@") == 1
            seen = agent({k: exported[k] for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
                         [{"method": "GET", "url": upstream.url(f"/echo?s={n}")}])
            assert seen[0]["status"] == 200
            curl = subprocess.run(["curl", "-sS", "-x", proxy_url, upstream.url(f"/echo?c={n}"), "-o", "/dev/null"],
                                  capture_output=True, text=True, timeout=30)
            assert curl.returncode == 0, curl.stderr
    sessions = json.loads(stbproxy("sessions", "--json", "--store", str(tmp_path / "store")).stdout)
    assert sorted((row["name"], row["calls"]) for row in sessions) == sorted((safe_session_name(n), 2) for n in NAMES)
    for name in NAMES:
        exported_cassette = stbproxy("export", "--session", name, "--store", str(tmp_path / "store"),
                                     "-o", str(tmp_path / "run.yaml"))
        assert exported_cassette.stdout.startswith("wrote 2 interactions"), exported_cassette.stderr


def test_stats_json_variable_and_every_flag_read_their_variables(tmp_path):
    with Store(tmp_path / "store"):
        pass
    result = stbproxy("stats", env={"STBPROXY_STATS_JSON": "1", "STBPROXY_STATS_STORE": str(tmp_path / "store")})
    assert result.returncode == 0 and json.loads(result.stdout)["entries"] == 0


def _options(command: click.Command, path: str):
    for param in command.params:
        if isinstance(param, click.Option) and (param.expose_value or not param.is_eager):
            yield path, command, param
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _options(sub, f"{path} {name}")


def test_every_option_has_a_help_text_and_its_help_shows_the_variable():
    seen = 0
    for path, command, option in _options(main, "stbproxy"):
        assert option.help and option.help.strip(), f"{path} {option.opts[0]} has no help"
        flag = max((o for o in option.opts if o.startswith("--")), key=len)
        variable = "_".join(["STBPROXY", *path.split()[1:], flag.lstrip("-")]).upper().replace("-", "_")
        record = option.get_help_record(click.Context(command, info_name=path.split()[-1]))
        assert f"env var: {variable}" in record[1], (path, flag, record)
        seen += 1
    assert seen > 80
    help_text = stbproxy("serve", "--help").stdout
    assert "STBPROXY_SERVE_SIM_TEMPERATURE" in help_text and "STBPROXY_SERVE_SIM_MAX_TOKENS" in help_text


# -- 1, 2, 8: defaults that do not mislead, curating simulated answers, what stats says ---------------

def test_a_plain_api_answer_mentioning_500_is_kept_and_stats_labels_passthrough(tmp_path, upstream):
    store = tmp_path / "store"
    with ProxyProcess(store, "--passthrough", "localhost") as proxy:
        seen = agent(proxy.client_env(), [{"method": "GET", "url": upstream.url("/echo?q=cost+500+usd")},
                                          {"method": "GET", "url": f"http://localhost:{upstream.port}/echo?llm=1"}])
    assert [s["source"] for s in seen] == ["upstream", "passthrough"]
    stats = stbproxy("stats", "--store", str(store)).stdout
    assert "passthrough: passed through (not served from the store)" in stats
    assert "simulated" not in stats


def test_forget_what_an_outage_left_behind_once_the_api_is_back(tmp_path, upstream):
    store = tmp_path / "store"
    calls = [{"method": "GET", "url": upstream.url(f"/echo?item={i}")} for i in range(12)]
    # The API "is down" for this run (a fault): every answer is simulated, and stored.
    with ProxyProcess(store, "--faults", "down=1", "--fault-seed", "3") as proxy:
        ready = [line for line in proxy.output if "listening on" in line][0]
        assert "simulator schema" in ready and "FAULTS ON: down=1 (seed 3)" in ready
        assert {s["source"] for s in agent(proxy.client_env(), calls)} == {"simulated"}
    assert upstream.hits["/echo"] == 0
    errors = json.loads(stbproxy("stats", "--errors", "--json", "--store", str(store)).stdout)
    assert errors["injected"] == {"total": 12, "by_rule": {"down=1": 12}}
    assert sum(row["count"] for row in errors["real"][:3]) == 0  # no real failure among them

    dry = stbproxy("forget", "--faulted", "--dry-run", "--store", str(store))
    assert dry.stdout.strip() == f"12 entries would be forgotten from {store} (dry run: nothing changed)"
    assert "would forget: simulated GET http://127.0.0.1:" in dry.stderr and "fault down=1" in dry.stderr
    declined = stbproxy("forget", "--faulted", "--store", str(store), input="n\n")
    assert declined.returncode == 1 and "forget 12 entries from" in declined.stderr
    assert declined.stderr.strip().endswith("? [y/N]: stbproxy: error: nothing forgotten")  # input piped: no echo
    assert "would forget" not in declined.stdout and "Traceback" not in declined.stderr
    done = stbproxy("forget", "--source", "simulated", "--host", "127.0.0.1", "--store", str(store), "--yes")
    assert done.stdout.strip() == f"forgot 12 entries from {store} (12 simulated)"

    with ProxyProcess(store) as proxy:  # the API is back: real answers now
        assert {s["source"] for s in agent(proxy.client_env(), calls[:2])} == {"upstream"}


def test_a_real_404_is_replaced_unless_kept_and_the_ready_line_says_so(tmp_path, upstream):
    call = [{"method": "GET", "url": upstream.url("/status/404")}]
    with ProxyProcess(tmp_path / "default") as proxy:  # virtual mode: a made-up 200 for the real 404
        assert ("simulator schema, replaces real 4xx/5xx answers (StableToolBench calls: check_result failures; "
                "kept: 4xx an OpenAPI document lists), ") in proxy.output[0]
        assert [(s["source"], s["status"]) for s in agent(proxy.client_env(), call)] == [("simulated", 200)]
    with ProxyProcess(tmp_path / "kept", "--keep-status", "404,410") as proxy:
        assert "(StableToolBench calls: check_result failures; kept: 4xx an OpenAPI document lists, 404, 410)" \
            in proxy.output[0]
        seen = agent(proxy.client_env(), call * 2)
    assert [(s["source"], s["status"]) for s in seen] == [("upstream", 404), ("cache", 404)]
    stats = json.loads(stbproxy("stats", "--json", "--store", str(tmp_path / "kept")).stdout)
    assert stats["by_source"] == {"upstream": 1} and stats["failed_by_source"] == {"upstream": 1}
    for value, says in (("429", "429 says the call should be made again later"), ("500", "'500' is not a 4xx")):
        line = one_error_line(stbproxy("serve", "--port", "0", "--store", str(tmp_path / "x"), "--keep-status", value))
        assert line.startswith(f"stbproxy: error: --keep-status: {says}"), line
    assert not (tmp_path / "x").exists()


def test_verbose_says_why_a_faulted_call_got_its_answer(tmp_path, upstream):
    call = [{"method": "GET", "url": upstream.url("/echo?faulted=1")}]
    with ProxyProcess(tmp_path / "store", "--faults", "down=1", "-v") as proxy:
        assert agent(proxy.client_env(), call)[0]["source"] == "simulated"
    with ProxyProcess(tmp_path / "recorded", "--mode", "record", "--faults", "status=503", "-v") as recording:
        assert agent(recording.client_env(), call)[0]["source"] == "injected"
    url = upstream.url("/echo?faulted=1")
    assert any(f"injected fault down=1 for GET {url}: the real API is not asked, the simulator answers" in line
               for line in proxy.output), proxy.output
    assert any(f"injected fault status=503 for GET {url}: the client gets the failure" in line
               for line in recording.output), recording.output
    assert upstream.hits["/echo"] == 0


def test_refresh_simulated_serves_real_answers_once_the_api_is_back(tmp_path, upstream):
    store = tmp_path / "store"
    call = [{"method": "GET", "url": upstream.url("/echo?refresh=1")}]
    with ProxyProcess(store, "--faults", "down=1") as proxy:
        assert agent(proxy.client_env(), call)[0]["source"] == "simulated"
    # (without --refresh-simulated it would be served for good: tests/engine/test_engine.py)
    with ProxyProcess(store, "--refresh-simulated") as proxy:
        assert "asking real APIs again for simulated answers" in proxy.output[0]
        assert [s["source"] for s in agent(proxy.client_env(), call * 2)] == ["upstream", "cache"]
    assert json.loads(stbproxy("stats", "--json", "--store", str(store)).stdout)["by_source"] == {"upstream": 1}


def test_ordered_replay_says_already_played_and_names_json_fields(tmp_path):
    cassette = REPO / "cassettes" / "weather_oslo.yaml"
    search = {"method": "POST", "url": "http://127.0.0.1:18765/v1/cities/search",
              "headers": {"Content-Type": "application/json"}, "data": json.dumps({"prefix": "os", "limit": 3})}
    other = {**search, "data": json.dumps({"prefix": "oslo", "limit": 3})}
    with ProxyProcess(tmp_path / "store", "--cassette", str(cassette), "--ordered") as proxy:
        ready = proxy.output[0]
        assert "mode replay" in ready and "simulator" not in ready  # the simulator cannot act in replay
        seen = agent(proxy.client_env(), [search, search, other])
    assert [s["source"] for s in seen] == ["cache", "miss", "miss"]
    again, differs = json.loads(seen[1]["body"]), json.loads(seen[2]["body"])
    assert again["error"] == ("stbproxy replay: already played (1 of 1): this is request 2 of its kind and "
                              "the cassette recorded 1")
    assert differs["closest"]["differences"] == [{"part": "json:prefix", "stored": "os", "got": "oslo"}]


def test_clients_started_at_once_on_a_new_confdir_share_one_whole_ca(tmp_path):
    """Eight `stbproxy env` (or serve) started together on a folder without a CA: one of them
    creates it, and none reads a half-written key."""
    for round_ in range(3):
        confdir = tmp_path / f"certs-{round_}"
        runs = [subprocess.Popen([sys.executable, "-m", "stbproxy", "env", "--confdir", str(confdir)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
        outputs = [run.communicate(timeout=120) for run in runs]
        assert [run.returncode for run in runs] == [0] * 8, [err for _out, err in outputs if err]
        assert len({out for out, _err in outputs}) == 1
