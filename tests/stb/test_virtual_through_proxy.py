"""StableToolBench's client through a real `stbproxy serve`, both ways a user may set it up:
drop-in (SERVICE_URL at the proxy's own /virtual) and transparent (HTTP_PROXY at the
proxy, SERVICE_URL left at their own server). Both meet the same entries; misses of a
transparent call go to the server it was addressed to; real RapidAPI calls carry the
parameter names the API documents."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from urllib.parse import parse_qsl, urlsplit

import pytest

from stbproxy.settings import catalog_path_for
from stbproxy.stb.catalog import ApiDoc, Catalog, Param
from stbproxy.store.embedded import Store
from tests.proxy.test_integration_proxy import agent
from tests.servers import ProxyProcess
from tests.stb_client import stb_call, stb_client

pytestmark = pytest.mark.integration

TOOLBENCH_KEY = "tbk-transparent-secret-7731"
RAPIDAPI_KEY = "rk-loopback-secret-5510"


def stored_bytes(store) -> bytes:
    return b"".join(open(os.path.join(r, f), "rb").read() for r, _, fs in os.walk(store) for f in fs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sessions(store) -> dict:
    listed = subprocess.run([sys.executable, "-m", "stbproxy", "sessions", "--json", "--store", str(store)],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    return {row["name"]: row for row in json.loads(listed.stdout)}


def team(team_id, **more) -> dict:
    # query 2399 of G1_instruction: Sports / Free NBA / Get a Specific Team, parameter "id",
    # which the agent is shown (and sends) as "is_id"
    return stb_call("Sports", "free_nba", "get_a_specific_team", {"is_id": team_id, **more}, TOOLBENCH_KEY)


def test_transparent_and_drop_in_virtual_calls_meet_one_entry(tmp_path, stb_data, upstream):
    store = tmp_path / "stb" / "store"
    imported = subprocess.run([sys.executable, "-m", "stbproxy", "import", "tools", "--store", str(store),
                               str(stb_data / "solvable_queries/test_instruction/G1_instruction.json")],
                              capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    gone = free_port()
    with ProxyProcess(store, "--simulator", "schema") as proxy:
        ready = "".join(proxy.output)
        transparent = {**proxy.client_env(), "SERVICE_URL": upstream.url("/virtual")}  # their own server
        drop_in = {"SERVICE_URL": f"{proxy.url}/s/stb-run/virtual"}  # a session named in the URL
        first = stb_client(transparent, [team("5")])
        own = stb_client(drop_in, [team("5"), team("6")])
        again = stb_client(transparent, [team("6"), team("5"), team("8", fail=True)])
        dead = stb_client({**proxy.client_env(), "SERVICE_URL": f"http://127.0.0.1:{gone}/virtual"}, [team("7")])
        # a POST to a /virtual path whose body is no /virtual call stays plain HTTP
        (plain,) = agent(proxy.client_env(), [{"method": "POST", "url": upstream.url("/echo/virtual"),
                                               "headers": {"Content-Type": "application/json"},
                                               "data": '{"hello": "world"}'}])
        named = sessions(store)

    assert "real /virtual calls: none (the catalog lists no URL)" in ready  # query files give none
    # their server answered the first call; the same call on the proxy's port is a hit, and
    # a call first made there (no URL, no key: simulated) is a hit when made transparently
    assert [r["source"] for r in first + own + again + dead] == \
        ["upstream", "cache", "simulated", "cache", "cache", "upstream", "error"]
    assert json.loads(first[0]["observation"]) == \
        {"error": "", "response": {"api": "get_a_specific_team", "args": {"is_id": "5"}, "from": "toolbench"}}
    assert own[0]["observation"] == again[1]["observation"] == first[0]["observation"]
    assert own[1]["observation"] == again[0]["observation"]
    # what their server answers is the benchmark's answer, a failure too: kept, never simulated over
    assert json.loads(again[2]["observation"]) == {"error": "", "response": "API rate limit exceeded"}
    for seen in first + own + again:  # every answer is an object ToolBench's client reads
        assert seen["status"] == 200 and set(json.loads(seen["observation"])) == {"error", "response"}
    # a server that cannot be reached gave no answer: the client is told, nothing is made up
    assert dead[0]["status"] == 502
    # one real call for team 5 and one for team 8, sent on as the client sent them
    assert [json.loads(call["tool_input"]) for _headers, call in upstream.virtual_calls] == \
        [{"is_id": "5"}, {"is_id": "8", "fail": True}]
    headers, sent = upstream.virtual_calls[0]
    assert sent == {"category": "Sports", "tool_name": "free_nba", "api_name": "get_a_specific_team",
                    "tool_input": '{"is_id": "5"}', "strip": "truncate", "toolbench_key": TOOLBENCH_KEY}
    assert headers["toolbench_key"] == TOOLBENCH_KEY
    assert plain["source"] == "upstream" and json.loads(plain["body"])["body"] == '{"hello": "world"}'
    assert named["stb-run"]["calls"] == 2
    raw = stored_bytes(store)
    assert TOOLBENCH_KEY.encode() not in raw
    with Store(store) as opened:  # one entry per call, whichever way it came; none for the server that was gone
        entries = list(opened.scan("api/Sports/free_nba_for_Sports/get_a_specific_team/"))
    assert sorted(e.source.value for e in entries) == ["simulated", "upstream", "upstream"]


@pytest.mark.parametrize("stb_keys", ["exact", "canonical"])
def test_real_calls_carry_documented_names_and_http_meets_virtual(tmp_path, upstream, stb_keys):
    """An HTTP call meets a /virtual call of the same API: under exact keys when the agent's
    arguments are the strings a query carries, in the order the doc lists them (its function
    schema's order); under canonical keys in any order and type."""
    exact = stb_keys == "exact"
    store = tmp_path / "stb" / "store"
    store.mkdir(parents=True)
    Catalog([
        ApiDoc(category="Sports", tool="Loop Ball", api="Team players", method="GET", url=upstream.url("/api/team"),
               required_parameters=(Param("id"), Param("from")), optional_parameters=(Param("playerId"),)),
        ApiDoc(category="Sports", tool="Loop Ball", api="Player", method="GET",
               url=upstream.url("/api/player/{playerId}"), required_parameters=(Param("playerId"),),
               optional_parameters=(Param("from"),)),
    ]).save(catalog_path_for(store))
    team_players = lambda **args: stb_call("Sports", "loop_ball", "team_players", args, TOOLBENCH_KEY)  # noqa: E731
    with ProxyProcess(store, "--simulator", "off", "--stb-keys", stb_keys,
                      env={"STBPROXY_RAPIDAPI_KEY": RAPIDAPI_KEY}) as proxy:
        ready = "".join(proxy.output)
        drop_in = {"SERVICE_URL": f"{proxy.url}/virtual"}
        over_virtual = stb_client(drop_in, [
            team_players(is_id="42" if exact else 42, is_from="2020-01-01", playerid="p7", Extra_Arg="x"),
            stb_call("Sports", "loop_ball", "player_for_loop_ball", {"playerid": "p9", "is_from": "2021"},
                     TOOLBENCH_KEY),
        ])
        over_http = agent(proxy.client_env(), [
            {"method": "GET", "url": upstream.url("/api/team?playerId=p7&Extra_Arg=x&from=2020-01-01&id=42")},
            {"method": "GET", "url": upstream.url("/api/player/p9?from=2021")},
            {"method": "GET", "url": upstream.url("/api/team?id=43&from=2019&playerId=p8")},
        ])
        later = stb_client(drop_in, [team_players(is_id="43", is_from="2019", playerid="p8") if exact
                                     else team_players(playerid="p8", is_id=43, is_from="2019")])

    assert "real /virtual calls: to the catalog's URLs (2 APIs on 1 host)" in ready
    assert [r["source"] for r in over_virtual + over_http + later] == \
        ["upstream", "upstream", "cache", "cache", "upstream", "cache"]
    real = [(urlsplit(path).path, dict(parse_qsl(urlsplit(path).query)), headers)
            for _m, path, headers, _b in upstream.requests]
    # the API got the names it documents; an argument it does not list kept the agent's name
    assert real[0][:2] == ("/api/team", {"id": "42", "from": "2020-01-01", "playerId": "p7", "Extra_Arg": "x"})
    assert real[1][:2] == ("/api/player/p9", {"from": "2021"})
    assert real[0][2]["X-RapidAPI-Key"] == RAPIDAPI_KEY and len(real) == 3
    answer = json.loads(over_virtual[0]["observation"])["response"]
    assert answer["query"] == {"id": "42", "from": "2020-01-01", "playerId": "p7", "Extra_Arg": "x"}
    assert json.loads(over_http[0]["body"]) == answer
    raw = stored_bytes(store)
    assert RAPIDAPI_KEY.encode() not in raw and TOOLBENCH_KEY.encode() not in raw
