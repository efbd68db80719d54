"""Run forensics through a real proxy: trials, forks, verify mode and ordered replay, with
an unmodified agent (tests/forensics_demo/agent.py), a loopback API whose answers change
between runs (world.py), and a scripted agent model that samples afresh on every call."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from tests.fakes.fake_openai import FakeOpenAI, ToolCall
from tests.forensics_demo.world import World
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration
AGENT = Path(__file__).resolve().parents[1] / "forensics_demo" / "agent.py"
SECRET = "world-secret-4242"
QUERY = "What is the weather in Paris?"


class SamplingModel:
    """The agent's model: every call draws from a seed taken from the request and its own
    count of draws, so each call samples afresh (a model at temperature 1) and a test is
    still reproducible. It asks for the weather, then answers (with ``p``) or gives up."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = p
        self.draws = 0
        self._lock = threading.Lock()

    def __call__(self, request: dict):
        with self._lock:
            self.draws += 1
            rng = random.Random(f"{request.get('seed')}-{self.draws}")
        last = request["messages"][-1]
        if last["role"] == "user":
            return ToolCall("get_weather", {"city": "Paris" if "Paris" in last["content"] else "Oslo"})
        reading = json.loads(last["content"])
        if rng.random() < self.p:
            return ToolCall("Finish", {"return_type": "give_answer",
                                       "final_answer": f"It is {reading['temp']} C in {reading['city']}."})
        return ToolCall("Finish", {"return_type": "give_up_and_restart"})


def stbproxy(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("STBPROXY_")}
    done = subprocess.run([sys.executable, "-m", "stbproxy", *args], capture_output=True, text=True, timeout=180,
                          env={**clean, **(env or {})})
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def run_agent(proxy: ProxyProcess, world: World, llm: FakeOpenAI, session: str | None = None,
              query: str = QUERY, headers: dict | None = None) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env = {**clean, **proxy.client_env(session), "AGENT_LLM": llm.url, "WORLD": world.base}
    done = subprocess.run([sys.executable, str(AGENT), query], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def session_rows(store: Path) -> dict:
    return {row["name"]: row for row in json.loads(stbproxy("sessions", "--json", "--store", str(store)).stdout)}


def records(store: Path, name: str) -> list[dict]:
    from stbproxy.store.embedded import Store

    with Store(store, readonly=True) as db:
        return list(db.session_records(name))


# -- trials -------------------------------------------------------------------------------------


def test_trials_sample_the_agent_model_afresh_and_share_tool_answers(tmp_path):
    store = tmp_path / "stb" / "store"
    with World() as world, FakeOpenAI(SamplingModel()) as llm, ProxyProcess(store) as proxy:
        env = {"AGENT_LLM": llm.url, "WORLD": world.base}
        done = stbproxy("run", "--trials", "3", "--session", "react", "--port", str(proxy.port),
                        "--confdir", str(proxy.confdir), "--", sys.executable, str(AGENT), QUERY, env=env)
        # Each trial asked the model afresh (two calls each); the tool answered once, for all three.
        assert llm.calls == 6 and world.calls["/weather"] == 1
        assert "session react.t1" in done.stderr and "react.t1 .. react.t3" in done.stderr
        # A rerun of the same trials is served from the store: nothing is asked again.
        stbproxy("run", "--trials", "3", "--session", "react", "--port", str(proxy.port),
                 "--confdir", str(proxy.confdir), "--", sys.executable, str(AGENT), QUERY, env=env)
        assert llm.calls == 6 and world.calls["/weather"] == 1
        # Without a trial index nothing changes: a plain run is trial 1's twin.
        plain = run_agent(proxy, world, llm, session="plain")
        assert llm.calls == 6
    rows = session_rows(store)
    assert {"react.t1", "react.t2", "react.t3", "plain"} <= set(rows)
    # First run, then the rerun: trial 2's tool answer was trial 1's from the start.
    assert rows["react.t1"]["by_source"] == {"upstream": 3, "cache": 3}
    assert rows["react.t2"]["by_source"] == {"upstream": 2, "cache": 4}
    finals = []
    for trial in (1, 2, 3):
        llm_records = [r for r in records(store, f"react.t{trial}") if "chat/completions" in (r.get("key") or "")]
        assert len(llm_records) == 4  # two calls, in the first run and in the rerun
        finals.append(llm_records[1]["key"])
    assert len(set(finals)) == 3 and finals[1].endswith("~trial2") and "~trial" not in finals[0]
    assert plain["seen"][0]["temp"] == 21.0


def test_run_reports_failed_trials_and_still_runs_the_others(tmp_path):
    store = tmp_path / "stb" / "store"
    script = "import os, sys; sys.exit(3 if os.environ['STBPROXY_TRIAL'] == '2' else 0)"
    with ProxyProcess(store) as proxy:
        done = stbproxy("run", "--trials", "3", "--session", "flaky", "--port", str(proxy.port),
                        "--confdir", str(proxy.confdir), "--", sys.executable, "-c", script, check=False)
    assert done.returncode == 1
    assert "trial 3/3" in done.stderr and "1 failed: trial 2 (session flaky.t2) exited with 3" in done.stderr


def test_run_without_a_proxy_says_so(tmp_path):
    done = stbproxy("run", "--port", "9", "--confdir", str(tmp_path / "certs"), "--", "true", check=False)
    assert done.returncode == 2 and "no proxy is listening on 127.0.0.1:9" in done.stderr


def test_a_trial_named_by_header_keys_only_llm_calls(tmp_path):
    store = tmp_path / "stb" / "store"
    with World() as world, FakeOpenAI(SamplingModel()) as llm, ProxyProcess(store) as proxy:
        proxies = {"http": proxy.url}
        body = {"model": "m", "messages": [{"role": "user", "content": QUERY}], "seed": 7}
        for trial in ("1", "2", "2"):
            requests.post(f"{llm.url}/v1/chat/completions", json=body, proxies=proxies, timeout=30,
                          headers={"X-Stb-Session": "h", "X-Stb-Trial": trial})
            requests.get(f"{world.base}/weather?city=Paris", proxies=proxies, timeout=30,
                         headers={"X-Stb-Session": "h", "X-Stb-Trial": trial})
        assert llm.calls == 2 and world.calls["/weather"] == 1
        assert not any("x-stb-trial" in h for h in world.seen_headers)


# -- forks ---------------------------------------------------------------------------------------


def test_a_fork_replays_the_first_k_calls_then_goes_live(tmp_path):
    store = tmp_path / "stb" / "store"
    with World() as world:
        with FakeOpenAI(SamplingModel(p=1.0)) as llm, ProxyProcess(store, "--mode", "record") as proxy:
            recorded = run_agent(proxy, world, llm, session="base")
            assert llm.calls == 2 and world.calls["/weather"] == 1
        world.temps["Paris"] = 30.0  # the world moved on: a fork still sees the recorded state
        with FakeOpenAI(SamplingModel(p=1.0)) as other_model, \
                ProxyProcess(store, "--mode", "record", "--fork", "base@2") as proxy:
            forked = run_agent(proxy, world, other_model, session="resumed")
            # Steps 1 (the model's tool choice) and 2 (the weather) came from the recording;
            # step 3 went to the new model, live.
            assert other_model.calls == 1 and world.calls["/weather"] == 1
    assert forked["seen"] == recorded["seen"] and forked["final"]["final_answer"] == "It is 21.0 C in Paris."
    rows = session_rows(store)
    assert rows["resumed"]["fork"] == {"from": "base", "at": 2, "replayed": 2, "stopped": None}
    assert rows["resumed"]["by_source"] == {"cache": 2, "upstream": 1}
    assert [r.get("forked") for r in records(store, "resumed")] == ["base#1", "base#2", None]
    # The trajectory rebuilt from the session says where its first calls came from.
    converted = stbproxy("eval", "convert", "--answers", "resumed", "--store", str(store),
                         "--out", str(tmp_path / "resumed.json"))
    assert "session resumed is a fork of base@2: its first 2 calls are base's recorded answers" in converted.stderr


def test_a_fork_that_diverges_stops_with_one_line(tmp_path):
    store = tmp_path / "stb" / "store"
    with World() as world:
        with FakeOpenAI(SamplingModel(p=1.0)) as llm, ProxyProcess(store, "--mode", "record") as proxy:
            run_agent(proxy, world, llm, session="base")
        with ProxyProcess(store) as proxy:
            # This client calls the tool first, where the recording's first call is the model's.
            answer = requests.get(f"{world.base}/weather?city=Oslo", proxies={"http": proxy.url}, timeout=30,
                                  headers={"X-Stb-Session": "odd", "X-Stb-Fork": "base@2"})
            assert answer.json()["city"] == "Oslo" and answer.headers["X-Stb-Source"] == "upstream"
    lines = [line for line in proxy.output if "stops following" in line]
    assert len(lines) == 1
    port = world.base.rsplit(":", 1)[1]
    assert ("session odd stops following base@2: step 1: expected an agent LLM call (to 127.0.0.1:" in lines[0]
            and f"), got a tool call (read) to 127.0.0.1:{port}; from here" in lines[0])
    row = session_rows(store)["odd"]
    assert row["fork"]["replayed"] == 0 and row["fork"]["stopped"].startswith("step 1: expected")


def test_serve_refuses_a_fork_of_an_unknown_session(tmp_path):
    store = tmp_path / "stb" / "store"
    with ProxyProcess(store, "--session", "seed") as proxy:
        requests.get(f"{proxy.url}/nothing", timeout=10)
    proxy = ProxyProcess(store, "--fork", "ghost@3").launch()
    try:
        code = proxy.process.wait(timeout=60)
    finally:
        proxy.stop()
    text = "\n".join(proxy.output)
    assert code == 2 and "fork ghost@3: the store holds no session 'ghost'" in text and "listening" not in text


# -- verify mode and drift ----------------------------------------------------------------------


def test_verify_serves_the_stored_answers_and_reports_what_changed(tmp_path):
    store = tmp_path / "stb" / "store"
    with World() as world, FakeOpenAI(SamplingModel(p=1.0)) as llm:
        with World() as gone, ProxyProcess(store, "--mode", "record") as proxy:
            recorded = run_agent(proxy, world, llm, session="base")
            requests.get(f"{gone.base}/job/1", proxies={"http": proxy.url}, timeout=30)
        world.temps["Paris"] = 25.0
        with ProxyProcess(store, "--mode", "verify", "--session", "check") as proxy:
            verified = run_agent(proxy, world, llm)
            # The run is stable: the agent saw what was recorded, though the real API was asked.
            assert verified["seen"] == recorded["seen"] and world.calls["/weather"] == 2
            # An API that is gone: the stored answer; a call nothing answered before: the real one.
            stale = requests.get(f"{gone.base}/job/1", proxies={"http": proxy.url}, timeout=30)
            fresh = requests.get(f"{world.base}/job/2", proxies={"http": proxy.url}, timeout=30)
            assert stale.json()["state"] == "queued" and stale.headers["X-Stb-Source"] == "cache"
            assert fresh.json()["state"] == "queued" and fresh.headers["X-Stb-Source"] == "upstream"
    verdicts = [r["drift"]["verdict"] for r in records(store, "check")]
    # model, weather, model, gone, new (the model's answers carry fresh ids: their verdicts vary)
    assert len(verdicts) == 5 and verdicts[1] == "values" and verdicts[3:] == ["unreachable", "new"]
    report = json.loads(stbproxy("drift", "--store", str(store), "--session", "check", "--json").stdout)
    weather = next(api for api in report["apis"] if "/weather" in api["api"])
    # The temperature changed; the time observed and the request id (default rules) did not count.
    assert weather["counts"] == {"values": 1}
    assert weather["first_change"] | {"seq": None} == {"verdict": "values", "path": "/temp", "stored": "21.0",
                                                      "live": "25.0", "origin": "upstream", "session": "check",
                                                      "seq": None}
    text = stbproxy("drift", "--store", str(store)).stdout
    assert "values changed at /temp: stored 21.0, now 25.0" in text
    strict = stbproxy("drift", "--store", str(store), "--strict", check=False)
    assert strict.returncode == 1
    nothing = stbproxy("drift", "--store", str(store), "--session", "base", "--strict", check=False)
    assert nothing.returncode == 2 and "no verified calls to judge" in nothing.stderr
    everything = json.dumps(records(store, "check")) + text + json.dumps(report)
    assert SECRET not in everything


def test_verify_update_replaces_changed_answers_and_keeps_the_old_ones(tmp_path):
    from stbproxy.store.embedded import Store

    store = tmp_path / "stb" / "store"
    with World() as world:
        with ProxyProcess(store, "--mode", "record", "--session", "base") as proxy:
            requests.get(f"{world.base}/job/7", proxies={"http": proxy.url}, timeout=30)  # queued
        with ProxyProcess(store, "--mode", "verify", "--update", "--session", "check") as proxy:
            served = requests.get(f"{world.base}/job/7", proxies={"http": proxy.url}, timeout=30).json()
            assert served["state"] == "queued"  # this run still gets the stored answer
        with ProxyProcess(store, "--mode", "replay", "--session", "later") as proxy:
            later = requests.get(f"{world.base}/job/7", proxies={"http": proxy.url}, timeout=30).json()
    assert later["state"] == "running"  # the store now holds the newer real answer
    with Store(store, readonly=True) as db:
        history = list(db.scan("log/history/"))
    assert len(history) == 1 and json.loads(history[0].response.body)["state"] == "queued"
    [record] = records(store, "check")
    assert record["drift"]["verdict"] == "values" and record["drift"]["updated"] is True


def test_verify_options_are_checked_at_start(tmp_path):
    for args, message in ((["--update"], "--update: updating the store from the real APIs needs mode verify"),
                          (["--mode", "verify", "--drift-ignore", "nope"], "--drift-ignore: drift rule 'nope'"),
                          (["--mode", "verify", "--ordered"], "--ordered: mode verify asks the real API")):
        done = stbproxy("serve", "--store", str(tmp_path / "s"), "--port", "0", *args, check=False)
        assert done.returncode == 2 and message in done.stderr, done.stderr


# -- ordered replay ---------------------------------------------------------------------------------


def test_ordered_replay_serves_polling_in_the_order_recorded(tmp_path):
    store = tmp_path / "stb" / "store"
    with World() as world:
        with ProxyProcess(store, "--mode", "record", "--ordered") as proxy:
            polled = [requests.get(f"{world.base}/job/9", proxies={"http": proxy.url}, timeout=30,
                                   headers={"X-Stb-Session": "poll"}).json()["state"] for _ in range(3)]
        assert polled == ["queued", "running", "done"]
        with ProxyProcess(store, "--mode", "replay", "--ordered") as proxy:
            ordered = [requests.get(f"{world.base}/job/9", proxies={"http": proxy.url}, timeout=30,
                                    headers={"X-Stb-Session": "poll"}).json()["state"] for _ in range(4)]
            other = requests.get(f"{world.base}/job/9", proxies={"http": proxy.url}, timeout=30,
                                 headers={"X-Stb-Session": "someone-else"}).json()["state"]
        with ProxyProcess(store, "--mode", "replay") as proxy:
            unordered = [requests.get(f"{world.base}/job/9", proxies={"http": proxy.url}, timeout=30,
                                      headers={"X-Stb-Session": "poll"}).json()["state"] for _ in range(2)]
    assert ordered == ["queued", "running", "done", "done"]  # past the end: the last one
    assert other == "done" and unordered == ["done", "done"]  # no namesake, or not ordered: the stored entry
    assert world.calls["/job/9"] == 3


def test_trials_of_an_unmodified_agent_give_pass_k_from_traffic_alone(tmp_path):
    from math import comb

    from click.testing import CliRunner

    from stbproxy.cli import main

    store = tmp_path / "stb" / "store"
    queries = {"1": "What is the weather in Paris?", "2": "What is the weather in Oslo?"}
    finals: dict[str, list[bool]] = {}
    with World() as world, FakeOpenAI(SamplingModel()) as llm, ProxyProcess(store) as proxy:
        for qid, query in queries.items():
            done = stbproxy("run", "--trials", "4", "--session", "agent", "--port", str(proxy.port),
                            "--confdir", str(proxy.confdir), "--", sys.executable, str(AGENT), query,
                            env={"AGENT_LLM": llm.url, "WORLD": world.base})
            printed = [json.loads(line) for line in done.stdout.splitlines()]
            finals[qid] = [p["final"]["return_type"] == "give_answer" for p in printed]
    assert all(len(passes) == 4 for passes in finals.values())
    assert any(0 < sum(p) < 4 for p in finals.values())  # the trials differ where the model sampled
    query_file = tmp_path / "G1_query.json"
    query_file.write_text(json.dumps([{"query_id": int(q), "query": text} for q, text in queries.items()]))
    (tmp_path / "ids").mkdir()
    (tmp_path / "ids" / "G1_instruction.json").write_text(json.dumps({q: 0 for q in queries}))

    def judge(request: dict):  # an answer that states the weather solves its query
        solved = " C in " in request["messages"][0]["content"]
        return ToolCall(request["tool_choice"]["function"]["name"],
                        {"reason": "scripted", "answer_status": "Solved" if solved else "Unsolved"})

    with FakeOpenAI(judge) as judge_server:
        result = CliRunner().invoke(main, [
            "eval", "pass-rate", "--answers", "agent", "--store", str(store), "--queries", str(query_file),
            "--ids", str(tmp_path / "ids"), "--out", str(tmp_path / "eval"), "--rounds", "1", "--no-progress",
            "--no-chart", "--base-url", judge_server.base_url, "--api-key", "judge-key"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    overall = json.loads((tmp_path / "eval" / "summary.json").read_text())["trials"]["overall"]
    for k in range(1, 5):  # from the agent's own printed finals, by the formulas
        expected_hat = sum(comb(sum(p), k) / comb(4, k) for p in finals.values()) / 2
        expected_at = sum(1 - comb(4 - sum(p), k) / comb(4, k) for p in finals.values()) / 2
        assert overall["pass^k"][str(k)] == pytest.approx(expected_hat)
        assert overall["pass@k"][str(k)] == pytest.approx(expected_at)
    assert "pass^4" in result.output and "pass@4" in result.output
    # The report lists each query with its verdict in each trial, and draws pass^k.
    from stbeval.report_data import build_document

    run = build_document([tmp_path / "eval"])["runs"][0]
    assert run["pass_k"]["k"] == [1, 2, 3, 4] and run["pass_k"]["pass^k"] == [overall["pass^k"][str(k)]
                                                                               for k in range(1, 5)]
    assert [m["label"] for m in run["metrics"]] == ["SoPR", "pass^4", "pass@4"]
    statuses = {q["id"]: q["status"] for q in run["queries"]}
    assert statuses == {qid: ["solved" if p else "unsolved" for p in finals[qid]] for qid in queries}
    assert run["status_of"] == "trials" and all(len(q["reasons"]) == 4 for q in run["queries"])
    from stbeval.html_report import render

    assert "(4 trials)" in render(build_document([tmp_path / "eval"]))


def test_trials_and_ordered_replay_hold_with_several_workers(tmp_path):
    store = tmp_path / "stb" / "store"
    with World() as world, FakeOpenAI(SamplingModel()) as llm:
        with ProxyProcess(store, "--mode", "record") as proxy:
            for _ in range(3):
                requests.get(f"{world.base}/job/5", proxies={"http": proxy.url}, timeout=30,
                             headers={"X-Stb-Session": "poll"})
        with ProxyProcess(store, "--mode", "virtual", "--ordered", "--workers", "2") as proxy:
            # A connection per request: they land on either worker, and the order still holds.
            states = [requests.get(f"{world.base}/job/5", proxies={"http": proxy.url}, timeout=30,
                                  headers={"X-Stb-Session": "poll"}).json()["state"] for _ in range(4)]
            body = {"model": "m", "messages": [{"role": "user", "content": QUERY}], "seed": 7}
            for trial in ("1", "2", "1", "2", "2"):
                requests.post(f"{llm.url}/v1/chat/completions", json=body, proxies={"http": proxy.url}, timeout=30,
                              headers={"X-Stb-Session": "w", "X-Stb-Trial": trial})
    assert states == ["queued", "running", "done", "done"] and world.calls["/job/5"] == 3
    assert llm.calls == 2


def test_verify_names_a_tls_failure_as_a_setting_to_fix_and_serves_the_stored_answer(tmp_path, tls_upstream, test_ca):
    store = tmp_path / "stb" / "store"
    url = tls_upstream.url("/echo?who=tls")
    with ProxyProcess(store, "--mode", "record", "--upstream-ca", str(test_ca.ca_file), "--session", "base") as proxy:
        recorded = requests.get(url, proxies={"https": proxy.url}, verify=str(proxy.ca_file), timeout=30)
    # Verified without the upstream's CA: no real answer can come, and the proxy says why.
    with ProxyProcess(store, "--mode", "verify", "--session", "check") as proxy:
        served = requests.get(url, proxies={"https": proxy.url}, verify=str(proxy.ca_file), timeout=30)
    assert served.headers["X-Stb-Source"] == "cache" and served.content == recorded.content
    assert any("can be verified until this is fixed" in line for line in proxy.output)
    [record] = records(store, "check")
    assert record["drift"]["verdict"] == "unreachable" and record["drift"]["error_kind"] == "tls"
