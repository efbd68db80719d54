"""Several users on one proxy (issue 38, item 10): behind --proxy-auth each user sees only
what it recorded (and an imported cache), reaches only its own sessions, and a replay miss
shows it no other user's request; --views credential gives each credential a view too."""

from __future__ import annotations

import json

import pytest
import requests
from passlib.apache import HtpasswdFile

from stbproxy.forensics.naming import scoped, session_ref, session_spec, shared_key, view_key, view_of
from stbproxy.front.views import view_for, view_mode
from stbproxy.keys import KeyRules
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

RULES = KeyRules(auth_salt=b"salt-of-this-store")


# -- pure parts --------------------------------------------------------------------------------


def test_a_user_s_sessions_and_the_sessions_it_forks_are_its_own():
    ref = session_ref(scoped("run-1;fork=run-0@3", "alice", "0f0f"))
    assert (ref.name, ref.fork.source, ref.fork.steps, ref.view) == ("alice+run-1", "alice+run-0", 3, "0f0f")
    # a client cannot name another user, nor pick a view: those parameters are the proxy's
    assert session_spec("run-1;user=bob;view=0f0f") == "run-1"
    assert session_ref(scoped(session_spec("x;user=bob") or "", "alice", None)).name == "alice+x"


def test_a_view_s_keys_end_in_it_and_give_the_shared_key_back():
    key = view_key("api/C/t_for_C/a/=0123~trial2", "ab12cd")
    assert key == "api/C/t_for_C/a/=0123~trial2~vab12cd" and view_key(key, "ab12cd") == key
    assert (view_of(key), shared_key(key)) == ("ab12cd", "api/C/t_for_C/a/=0123~trial2")
    assert view_of("http/h/GET/a~vb/0123") is None and shared_key("http/h/GET/x/1") == "http/h/GET/x/1"


def test_views_are_salted_digests_per_user_and_per_credential():
    bearer = lambda token: [("Authorization", f"Bearer {token}")]  # noqa: E731
    assert view_mode("auto", proxy_auth=True) == "user" and view_mode("auto", proxy_auth=False) == "shared"
    assert view_for("shared", "alice", bearer("A"), RULES) is None
    alice, bob = view_for("user", "alice", bearer("A"), RULES), view_for("user", "bob", bearer("A"), RULES)
    assert alice != bob and alice == view_for("user", "alice", bearer("B"), RULES)  # a rotated key: same view
    assert "alice" not in alice and len(alice) == 16
    a, b = view_for("credential", "alice", bearer("A"), RULES), view_for("credential", "alice", bearer("B"), RULES)
    assert len({a, b, alice}) == 3
    assert view_for("user", "alice", (), KeyRules(auth_salt=b"another store")) != alice
    assert view_for("user", None, (), RULES) is None  # nobody logged in: the shared view


# -- through a real proxy ----------------------------------------------------------------------


@pytest.fixture
def users(tmp_path):
    path = tmp_path / "users.htpasswd"
    table = HtpasswdFile(str(path), new=True)
    for name, password in (("alice", "alice-pw-1"), ("bob", "bob-pw-2")):
        table.set_password(name, password)
    table.save()
    return path


def through(proxy: ProxyProcess, user: str, password: str, url: str, **headers) -> requests.Response:
    via = f"http://{user}:{password}@127.0.0.1:{proxy.port}"
    return requests.get(url, proxies={"http": via}, headers=headers, timeout=30)


def test_each_user_sees_what_it_recorded_and_only_its_own_sessions(tmp_path, upstream, users):
    url = upstream.url("/echo/report?q=quarterly-numbers-of-alice")
    other = upstream.url("/echo/other?q=1")
    with ProxyProcess(tmp_path / "store", "--proxy-auth", f"@{users}") as proxy:
        first = through(proxy, "alice", "alice-pw-1", url, **{"X-Stb-Session": "alices-run"})
        again = through(proxy, "alice", "alice-pw-1", url, **{"X-Stb-Session": "alices-run"})
        bob = through(proxy, "bob", "bob-pw-2", url, **{"X-Stb-Session": "run-1"})
        # bob forks alice's session by its name: he reaches only a session of his own of that
        # name, which does not exist, so his call is answered as any other (here: his view's hit)
        forked = through(proxy, "bob", "bob-pw-2", other, **{"X-Stb-Session": "run-2", "X-Stb-Fork": "alices-run@1"})
        wrong = requests.get(url, proxies={"http": f"http://alice:nope@127.0.0.1:{proxy.port}"}, timeout=30)
    assert [r.headers["X-Stb-Source"] for r in (first, again, bob, forked)] == ["upstream", "cache", "upstream",
                                                                                 "upstream"]
    assert forked.json()["path"] == "/echo/other"  # not alice's recorded answer, which a fork would serve
    assert wrong.status_code == 407
    listed = {row["name"]: row for row in sessions(tmp_path / "store")}
    assert {"alice+alices-run", "bob+run-1", "bob+run-2"} <= set(listed)
    assert listed["alice+alices-run"]["calls"] == 2


def sessions(store) -> list[dict]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "stbproxy", "sessions", "--json", "--store", str(store)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_replay_miss_shows_a_user_no_other_user_s_request(tmp_path, upstream, users):
    store = tmp_path / "store"
    url = upstream.url("/echo/report?q=alice-private-query-value")
    with ProxyProcess(store, "--proxy-auth", f"@{users}", "--mode", "record") as proxy:
        assert through(proxy, "alice", "alice-pw-1", url).status_code == 200
    with ProxyProcess(store, "--proxy-auth", f"@{users}", "--mode", "replay") as proxy:
        hers = through(proxy, "alice", "alice-pw-1", url)
        his = through(proxy, "bob", "bob-pw-2", upstream.url("/echo/report?q=bob"))
        near = through(proxy, "alice", "alice-pw-1", upstream.url("/echo/report?q=other"))
    assert hers.headers["X-Stb-Source"] == "cache"
    assert his.status_code == 404 and "alice-private-query-value" not in his.text
    assert json.loads(his.text)["closest"] is None
    assert near.status_code == 404 and "alice-private-query-value" in json.loads(near.text)["closest"]["url"]


def test_an_imported_cache_is_seen_from_every_view(tmp_path, users):
    import subprocess
    import sys

    cache = tmp_path / "cache" / "Data" / "weather_for_Data"
    cache.mkdir(parents=True)
    (cache / "forecast.json").write_text(json.dumps({"{'city': 'Oslo'}": {"error": "", "response": "sunny"}}))
    store = tmp_path / "store"
    done = subprocess.run([sys.executable, "-m", "stbproxy", "import", "stb-cache", str(tmp_path / "cache"),
                           "--store", str(store)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    call = {"category": "Data", "tool_name": "weather", "api_name": "forecast", "tool_input": '{"city": "Oslo"}',
            "strip": "", "toolbench_key": ""}
    with ProxyProcess(store, "--proxy-auth", f"@{users}") as proxy:
        seen = [requests.post(f"http://127.0.0.1:{proxy.port}/virtual", json=call, timeout=30,
                              proxies={"http": f"http://{user}:{password}@127.0.0.1:{proxy.port}"})
                for user, password in (("alice", "alice-pw-1"), ("bob", "bob-pw-2"))]
    assert [(r.headers["X-Stb-Source"], r.json()["response"]) for r in seen] == [("cache", "sunny")] * 2


def test_credential_views_keep_one_user_s_keys_apart(tmp_path, upstream, users):
    url = upstream.url("/echo/me")
    with ProxyProcess(tmp_path / "store", "--proxy-auth", f"@{users}", "--views", "credential") as proxy:
        got = [through(proxy, "alice", "alice-pw-1", url, Authorization=f"Bearer {token}").headers["X-Stb-Source"]
               for token in ("token-A-0000000001", "token-B-0000000002", "token-A-0000000001")]
    assert got == ["upstream", "upstream", "cache"]


def test_without_proxy_auth_one_view_keeps_a_rotated_key_hitting(tmp_path, upstream):
    url = upstream.url("/echo/me")
    with ProxyProcess(tmp_path / "store") as proxy:
        got = [requests.get(url, proxies={"http": proxy.url}, headers={"Authorization": f"Bearer {token}"},
                            timeout=30).headers["X-Stb-Source"] for token in ("token-A-000001", "token-B-000002")]
    assert got == ["upstream", "cache"]


# -- what a simulator is shown and seeded with -----------------------------------------------------


def test_a_simulator_is_shown_the_shared_part_and_the_caller_s_own_view_only(tmp_path):
    import time

    from stbproxy.models import Exchange, Request, Response, Source
    from stbproxy.sim.call_facts import ExampleCache, call_facts
    from stbproxy.store.embedded import Store
    from stbproxy.synthesis.simulation import SimulationRequest

    def stored(key: str, text: str) -> Exchange:
        request = Request("GET", "http://127.0.0.1:9/report", (), b"")
        return Exchange(key, request, Response(200, (("Content-Type", "text/plain"),), text.encode()),
                        Source.UPSTREAM, time.time())

    prefix = "http/127.0.0.1:9/GET/report/"
    with Store(tmp_path / "store") as store:
        store.put(stored(prefix + "shared", "imported for everyone"))
        store.put(stored(view_key(prefix + "alices", "a11ce0000000000a"), "alice's private report"))
        store.put(stored(view_key(prefix + "bobs", "b0b0000000000000"), "bob's private report"))
        cache = ExampleCache(store, 5)

        def shown(key: str) -> set[str]:
            job = SimulationRequest(Request("GET", "http://127.0.0.1:9/report?x=1", (), b""), key, None, "test")
            return {ex.response.body.decode() for ex in cache.get(call_facts(job, None, RULES), key)}

        assert shown(view_key(prefix + "new", "b0b0000000000000")) == {"imported for everyone", "bob's private report"}
        assert shown(view_key(prefix + "new", "a11ce0000000000a")) == {"imported for everyone",
                                                                       "alice's private report"}
        assert shown(prefix + "new") == {"imported for everyone"}
    # and a made-up answer is seeded outside the view: the same whoever asks, whatever the store
    assert SimulationRequest(None, view_key(prefix + "new", "a11ce0000000000a"), None, "").seed == prefix + "new"
