"""`stbproxy env` keeps the client's own trust: HTTPS reached directly (NO_PROXY) and HTTPS
through the proxy both verify with the one bundle it exports, over real TLS on loopback.

The "trusted roots" of the test are a throw-away CA that signs a loopback HTTPS server. The
user trusts it as users trust a company CA: SSL_CERT_FILE names it before `env` runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.cli.test_cli_process import env_lines, stbproxy
from tests.fakes.fake_openai import FakeOpenAI
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

# Clients that read the exported variables as they are, each printing status and X-Stb-Source
# (none: the request did not pass through the proxy).
CLIENTS = textwrap.dedent("""
    import json, os, sys, urllib.request
    import httpx, requests
    url, seen = sys.argv[1], {}
    r = requests.get(url, timeout=20)
    seen["requests"] = [r.status_code, r.headers.get("X-Stb-Source")]
    r = httpx.get(url, timeout=20)
    seen["httpx"] = [r.status_code, r.headers.get("X-Stb-Source")]
    with urllib.request.urlopen(url, timeout=20) as r:
        seen["urllib"] = [r.status, r.headers.get("X-Stb-Source")]
    print(json.dumps(seen))
""")


def clean_environment(**extra: str) -> dict[str, str]:
    """The caller's environment without any proxy or CA setting: only what the test gives."""
    dropped = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and not k.startswith("STBPROXY_") and k not in dropped}
    return env | extra


def run_clients(env: dict[str, str], url: str) -> dict[str, list]:
    result = subprocess.run([sys.executable, "-c", CLIENTS, url], env=env, capture_output=True, text=True,
                            timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def curl_source(env: dict[str, str], url: str) -> tuple[str, str]:
    """curl's status and X-Stb-Source ('' when absent), the same way."""
    result = subprocess.run(["curl", "-sS", "--fail", "-D", "-", "-o", "/dev/null", url], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    headers = dict(line.split(": ", 1) for line in result.stdout.splitlines()[1:] if ": " in line)
    return result.stdout.split()[1], {k.lower(): v for k, v in headers.items()}.get("x-stb-source", "").strip()


def test_the_exported_bundle_verifies_hosts_reached_directly_and_through_the_proxy(tmp_path, test_ca, tls_upstream):
    user = clean_environment(SSL_CERT_FILE=str(test_ca.ca_file))  # the user's own roots
    confdir = tmp_path / "conf"
    with ProxyProcess(tmp_path / "store", "--upstream-ca", str(test_ca.ca_file), confdir=confdir) as proxy:
        exported = env_lines(stbproxy("env", "--port", str(proxy.port), "--confdir", str(confdir), env=user).stdout)
        client = user | exported
        url = tls_upstream.url("/echo?trust=1")

        direct = run_clients(client | {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}, url)
        assert direct == {name: [200, None] for name in ("requests", "httpx", "urllib")}
        proxied = run_clients(client | {"NO_PROXY": "", "no_proxy": ""}, url)
        assert {name: seen[0] for name, seen in proxied.items()} == {"requests": 200, "httpx": 200, "urllib": 200}
        assert all(seen[1] in ("upstream", "cache") for seen in proxied.values()), proxied

        assert curl_source(client | {"NO_PROXY": "127.0.0.1"}, url) == ("200", "")
        assert curl_source(client | {"NO_PROXY": ""}, url)[0] == "200"
    # Node adds NODE_EXTRA_CA_CERTS to its own roots, so the proxy's CA alone is enough there.
    assert exported["NODE_EXTRA_CA_CERTS"] == str(confdir / "mitmproxy-ca-cert.pem")


def test_a_second_env_in_the_same_shell_leaves_the_bundle_as_it_was(tmp_path, test_ca):
    confdir = tmp_path / "conf"
    first = env_lines(stbproxy("env", "--confdir", str(confdir), env=clean_environment(
        SSL_CERT_FILE=str(test_ca.ca_file))).stdout)
    bundle = first["SSL_CERT_FILE"]
    before = open(bundle).read()
    again = env_lines(stbproxy("env", "--confdir", str(confdir), env=clean_environment(**first)).stdout)
    assert again["SSL_CERT_FILE"] == bundle and open(bundle).read() == before  # it never reads itself in


# -- recording an agent whose LLM is a local server -----------------------------------------------


AGENT = textwrap.dedent("""
    import json, sys, openai, requests
    llm_url, virtual_url = sys.argv[1:]
    client = openai.OpenAI(base_url=llm_url, api_key="sk-local", max_retries=0)
    reply = client.chat.completions.create(model="local", messages=[{"role": "user", "content": "hi"}])
    tool = requests.post(virtual_url, json={"category": "Data", "tool_name": "t", "api_name": "a",
                                            "tool_input": "{}", "strip": "", "toolbench_key": ""}, timeout=20)
    print(json.dumps([reply.choices[0].message.content, tool.status_code]))
""")


def sessions_of(store) -> dict[str, int]:
    rows = json.loads(stbproxy("sessions", "--json", "--store", str(store)).stdout)
    return {row["name"]: row["calls"] for row in rows}


def test_the_recording_recipe_records_a_local_llm_and_the_old_one_did_not(tmp_path):
    """README's drop-in recipe: `eval "$(stbproxy env --session S)"` and no NO_PROXY. The
    /virtual calls reach the proxy through itself; the loopback LLM is recorded too. With the
    former `NO_PROXY=127.0.0.1,localhost` the LLM's calls never reached the proxy."""
    store = tmp_path / "store"
    with FakeOpenAI(lambda request: "hello from the local model") as llm:
        with ProxyProcess(store) as proxy:
            for session, no_proxy in (("recipe", ""), ("old-recipe", "127.0.0.1,localhost")):
                exported = env_lines(stbproxy("env", "--port", str(proxy.port), "--session", session).stdout)
                env = clean_environment(**exported, NO_PROXY=no_proxy, no_proxy=no_proxy)
                result = subprocess.run([sys.executable, "-c", AGENT, llm.base_url, f"{proxy.url}/virtual"],
                                        env=env, capture_output=True, text=True, timeout=90)
                assert result.returncode == 0, result.stderr[-3000:]
                assert json.loads(result.stdout) == ["hello from the local model", 200]
        assert llm.calls == 2
    recorded = sessions_of(store)
    assert recorded["recipe"] == 2 and "old-recipe" not in recorded, recorded
