"""The pytest plugin seen from a user's test suite (pytest's own pytester runs it)."""

import shlex
import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
CASSETTES = Path(__file__).resolve().parents[2] / "cassettes"

USER_TEST = '''
import json, os, subprocess, sys
import pytest

AGENT = """
import requests, sys
r = requests.get(sys.argv[1], headers={"X-RapidAPI-Key": "k"}, timeout=10)
print(r.status_code)
"""

@pytest.mark.stb_cassette("weather_oslo")
def test_unrecorded_call(stb_proxy):
    out = subprocess.run([sys.executable, "-c", AGENT, "http://127.0.0.1:18765/v1/forecast?city=Oslo&days=2"],
                         env={**os.environ, **stb_proxy.env}, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "404"

@pytest.mark.stb_cassette("no_such_cassette")
def test_missing_cassette(stb_proxy):
    pass

SEARCH = "http://127.0.0.1:18765/v1/cities/search"

@pytest.mark.stb_cassette("weather_oslo")
def test_in_process_replay_answers_recorded_calls(stb_replay):
    import requests
    found = requests.post(SEARCH, json={"limit": 3, "prefix": "os"}, headers={"X-RapidAPI-Key": "mine"})
    days = requests.get("http://127.0.0.1:18765/v1/forecast", params={"city": "Oslo", "days": 1})
    assert found.json() == {"results": ["Oslo"]} and found.headers["X-Stb-Source"] == "cache"
    assert days.status_code == 200 and days.json()["city"] == "Oslo"

@pytest.mark.stb_cassette("weather_oslo")
def test_in_process_json_field_miss(stb_replay):
    import requests
    assert requests.post(SEARCH, json={"prefix": "oslo", "limit": 3}).status_code == 404

@pytest.mark.stb_cassette("weather_oslo")
def test_in_process_already_played(stb_replay):
    import requests
    for _ in range(2):
        requests.post(SEARCH, json={"prefix": "os", "limit": 3})
'''


@pytest.mark.integration
def test_unrecorded_request_fails_the_test_with_the_closest_and_its_diff(pytester):
    shutil.copytree(CASSETTES, pytester.path / "cassettes")
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    output = result.stdout.str()
    assert "not in the cassette: GET http://127.0.0.1:18765/v1/forecast?city=Oslo&days=2" in output
    assert "closest recorded: GET http://127.0.0.1:18765/v1/forecast?city=Oslo&days=1" in output
    assert "query:days: recorded '1', got '2'" in output
    assert "no cassette" in output and "--stb-record" in output
    assert "json:prefix: recorded 'os', got 'oslo'" in output
    assert "already played (1 of 1): this is request 2 of its kind" in output
    # Misses fail the tests themselves (never their teardown); a missing cassette fails the setup.
    result.assert_outcomes(passed=1, failed=3, errors=1)
    assert "error at teardown" not in output.lower()


HTTPS_USER_TEST = '''
import os, subprocess, sys

AGENT = """
import requests, sys
r = requests.get(sys.argv[1], timeout=20)
print(r.status_code, r.headers.get("X-Stb-Source"))
"""

def test_https_api(stb_proxy):
    out = subprocess.run([sys.executable, "-c", AGENT, {url!r}], env={{**os.environ, **stb_proxy.env}},
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["200", "upstream"], out.stdout + out.stderr
'''


@pytest.mark.integration
@pytest.mark.parametrize("how", ["ini", "command line"])
def test_serve_arguments_reach_the_proxy_the_fixture_starts(pytester, tls_upstream, test_ca, how):
    """An HTTPS API signed by a private CA records only when serve gets --upstream-ca: without
    it the proxy cannot verify the API and answers an error instead of the API's answer."""
    pytester.makepyfile(test_user=HTTPS_USER_TEST.format(url=tls_upstream.url("/api/forecast?city=Oslo")))
    serve_args = f"--upstream-ca {shlex.quote(str(test_ca.ca_file))}"
    if how == "ini":
        pytester.makeini(f"[pytest]\nstb_serve_args = {serve_args}\n")
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--stb-record", timeout=120)
    else:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--stb-record",
                                               f"--stb-serve-args={serve_args}", timeout=120)
    result.assert_outcomes(passed=1)
    recorded = (pytester.path / "cassettes" / "test_https_api.yaml").read_text()
    assert "code: 200" in recorded and "/api/forecast?city=Oslo" in recorded


def test_serve_arguments_that_cannot_be_split_stop_the_run(pytester):
    pytester.makepyfile(test_user="def test_nothing(): pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--stb-serve-args=--upstream-ca 'ca.pem")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--stb-serve-args cannot be split as a shell would" in result.stderr.str()


FAILING_RECORDING = '''
import os, subprocess, sys

AGENT = "import requests, sys; r = requests.get(sys.argv[1], timeout=20); print(r.status_code)"

def test_unreachable_api(stb_proxy):
    out = subprocess.run([sys.executable, "-c", AGENT, "http://127.0.0.1:9/v1/gone?city=Oslo"],
                         env={**os.environ, **stb_proxy.env}, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "502"
'''


@pytest.mark.integration
def test_a_recording_whose_calls_got_no_answer_fails_and_keeps_the_old_cassette(pytester):
    """The agent copes with the 502 and its test passes, yet what was recorded is no answer:
    the test fails, naming the URL, and the cassette on disk is left as it was."""
    pytester.makepyfile(test_user=FAILING_RECORDING)
    old = pytester.path / "cassettes" / "test_unreachable_api.yaml"
    old.parent.mkdir()
    old.write_text("interactions: []\nversion: 1\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--stb-record", timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the recording is not saved: 1 call(s) got no answer*",
                                 "*GET http://127.0.0.1:9/v1/gone?city=Oslo: unreachable*"])
    assert old.read_text() == "interactions: []\nversion: 1\n"


NODE_USER_TEST = r'''
import os, shlex, subprocess, sys

URL = "TARGET_URL"
# Node's own https through the proxy's CONNECT tunnel (Node 20's fetch reads no proxy
# variable): HTTPS_PROXY from the environment, the CA from NODE_EXTRA_CA_CERTS, nothing else.
NODE_AGENT = """
const http = require("http"), https = require("https"), tls = require("tls"), net = require("net");
const target = new URL(process.argv[1]), proxy = new URL(process.env.HTTPS_PROXY);
const tunnel = http.request({host: proxy.hostname, port: proxy.port, method: "CONNECT",
                             path: `${target.hostname}:${target.port}`});
tunnel.on("connect", (reply, socket) => {
  if (reply.statusCode !== 200) { console.log("CONNECT", reply.statusCode); process.exit(1); }
  const secure = {socket, host: target.hostname, ...(net.isIP(target.hostname) ? {} : {servername: target.hostname})};
  // no agent: the request goes over the connection createConnection gives, the tunnel
  https.get({host: target.hostname, port: target.port, path: target.pathname + target.search,
             createConnection: () => tls.connect(secure)}, (answer) => {
    console.log(answer.statusCode, answer.headers["x-stb-source"]);
    answer.resume();
  }).on("error", (error) => { console.log(error.code || error.message); process.exitCode = 1; });
});
tunnel.on("error", (error) => { console.log(error.code || error.message); process.exitCode = 1; });
tunnel.end();
"""


def node(env):
    out = subprocess.run(["node", "-e", NODE_AGENT, URL], env=env, capture_output=True, text=True, timeout=60)
    return out.stdout.split()


def test_a_node_agent_gets_the_environment_stbproxy_env_prints(stb_proxy):
    printed = subprocess.run([sys.executable, "-m", "stbproxy", "env", "--port", str(stb_proxy.process.port),
                              "--confdir", str(stb_proxy.process.confdir)],
                             capture_output=True, text=True, check=True).stdout
    exported = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in printed.splitlines()
                    if not line.startswith("#"))  # its comment line says which real answers are replaced
    assert stb_proxy.env == exported
    env = {**os.environ, **stb_proxy.env}
    assert node(env) == ["200", "upstream"]
    without = {k: v for k, v in env.items() if k != "NODE_EXTRA_CA_CERTS"}
    assert node(without) == ["UNABLE_TO_VERIFY_LEAF_SIGNATURE"]  # what the fixture once gave
'''


@pytest.mark.integration
def test_the_fixture_gives_a_node_agent_what_stbproxy_env_prints(pytester, tls_upstream, test_ca):
    """stb_proxy.env is exactly `stbproxy env`'s variables for that proxy, NODE_EXTRA_CA_CERTS
    included: a Node 20 agent reaches an HTTPS API through it (and fails without that variable)."""
    if shutil.which("node") is None:
        pytest.skip("needs node on PATH")
    pytester.makepyfile(test_user=NODE_USER_TEST.replace("TARGET_URL", tls_upstream.url("/api/forecast?city=Oslo")))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--stb-record",
                                           f"--stb-serve-args=--upstream-ca {shlex.quote(str(test_ca.ca_file))}",
                                           timeout=120)
    result.assert_outcomes(passed=1)
