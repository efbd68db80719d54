"""stbproxy answers as StableToolBench's own virtual server does, step for step, by default.

What that server answered to every step of tests/stb_server/scenario.py, and how many real
API and simulator model calls it made by then, is kept in tests/stb_server/recorded.json
(written by scripts/stb/side_by_side.py from a run of an unmodified StableToolBench
checkout). Here the same scenario runs through a real ``stbproxy serve``:

- drop-in: the seed cache imported with ``import stb-cache``, the proxy as the virtual
  server, ``--toolbench-url`` at the same loopback real APIs and ``--simulator llm`` at the
  same fake model: every observation, status and count of real and model calls must be the
  recorded one, but for the one difference docs/stabletoolbench.md lists (chat_with_user,
  which StableToolBench's server fails on with HTTP 500);
- transparent: StableToolBench's server (played from its recorded answers) behind the
  proxy, the client sending through the proxy: every observation must be the recorded one,
  and no call StableToolBench's server would have made a real call for may be left out.

Then StableToolBench's inference pipeline (tests/pipeline_run.py) over the twelve queries:
the conversations must be the ones it had with StableToolBench's server, byte for byte.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from stbcore.toolbench_names import api_key_name, standardize
from tests.fakes.fake_openai import FakeOpenAI
from tests.loopback import LoopbackServer, QuietHandler
from tests.pipeline_run import PipelineLlm, Script, run_queries
from tests.servers import ProxyProcess
from tests.stb_server import scenario

pytestmark = pytest.mark.integration

CHAT_DEVIATION = "chat"  # docs/stabletoolbench.md: answered "Chat with user." where StableToolBench fails with 500


def imported_store(tmp_path, cache: dict) -> Any:
    store = tmp_path / "stb" / "store"
    root = scenario.write_cache(tmp_path / "cache", cache)
    done = subprocess.run([sys.executable, "-m", "stbproxy", "import", "stb-cache", str(root), "--store", str(store)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return store


def drop_in(store, real: scenario.RealApi, model: FakeOpenAI) -> ProxyProcess:
    return ProxyProcess(store, "--toolbench-url", real.url, "--simulator", "llm", "--sim-model", scenario.SIM_MODEL,
                        env=model.env())


def increments(recorded: dict[str, dict]) -> dict[str, int]:
    """The real calls StableToolBench's server made at each step."""
    made, before = {}, 0
    for name, seen in recorded.items():
        made[name], before = seen["real_calls"] - before, seen["real_calls"]
    return made


def test_the_drop_in_answers_every_call_as_stabletoolbench_does(tmp_path):
    recorded = scenario.Recorded.load().calls
    store = imported_store(tmp_path, scenario.CALLS_CACHE)
    with scenario.RealApi(scenario.calls_real_answer) as real, FakeOpenAI(scenario.simulator_model) as model, \
            drop_in(store, real, model) as proxy:
        seen = scenario.play(scenario.CALLS, f"{proxy.url}/virtual", real, model)
    differ = [name for name, step in seen.items() if name != CHAT_DEVIATION and step.to_dict() != {
        **recorded[name], "body": step.body}]  # FastAPI's JSON spacing is its own: the observation is compared
    assert not differ, "\n".join(f"{name}: {seen[name].to_dict()} != {recorded[name]}" for name in differ)
    assert [seen[n].source for n in ("hit", "cached-failure", "number-for-string", "real-500", "real-500-again")] == \
        ["cache", "cache", "upstream", "simulated", "cache"]
    chat = seen[CHAT_DEVIATION]
    assert recorded[CHAT_DEVIATION]["status"] == 500 and (chat.status, json.loads(chat.body)) == (
        200, {"error": "", "response": "Chat with user."})


def request_text(body: dict) -> str:
    return json.dumps({k: body[k] for k in ("category", "tool_name", "api_name", "tool_input")}, sort_keys=True)


class _RecordedHandler(QuietHandler):
    def do_POST(self) -> None:
        text = request_text(self.read_json())
        self.owner.calls.append(text)
        status, content_type, body = self.owner.answers.get(text, (404, "text/plain", "not in the recording"))
        self.answer(status, body.encode(), content_type)


class RecordedServer(LoopbackServer):
    """StableToolBench's server as recorded: each /virtual call answered with the bytes it
    answered to that call, and every call kept."""

    handler = _RecordedHandler

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers  # the request body's canonical text -> (status, content type, body)
        self.calls: list[str] = []
        super().__init__()

    @property
    def url(self) -> str:
        return f"{self.base_url}/virtual"


def test_transparent_mode_passes_on_every_answer_of_stabletoolbench_s_server(tmp_path):
    recorded = scenario.Recorded.load().calls
    answers = {}
    for step in scenario.CALLS:
        seen = recorded[step.name]
        content_type = "application/json" if seen["status"] == 200 else "text/plain; charset=utf-8"
        answers.setdefault(request_text(step.body), (seen["status"], content_type, seen["body"]))
    with scenario.RealApi(scenario.calls_real_answer) as real, FakeOpenAI(scenario.simulator_model) as model, \
            RecordedServer(answers) as server, ProxyProcess(tmp_path / "store") as proxy:
        seen = scenario.play(scenario.CALLS, server.url, real, model, proxy=proxy.url)
    differ = [name for name, step in seen.items() if step.observation != recorded[name]["observation"]
              or step.status != recorded[name]["status"]]
    assert not differ, "\n".join(f"{name}: {seen[name].observation} != {recorded[name]['observation']}"
                                 for name in differ)
    # a call is sent on once (a repeat is a hit; so is the same call under a suffixed tool name,
    # which StableToolBench's server reads from the same file, and a tool_input that is not
    # JSON is answered as it answers it, with no call), and every call that server made a real
    # call for reached it: none was answered from a wider key than its own
    assert len(server.calls) == len(set(server.calls)) == 16
    made = increments(recorded)
    assert all(request_text(step.body) in server.calls for step in scenario.CALLS if made[step.name])
    assert seen["real-500"].source == "upstream" and seen["real-500-again"].source == "cache"
    assert seen["cached-failure"].source == "upstream" and seen["chat"].source == "upstream"


# -- StableToolBench's pipeline, end to end ---------------------------------------------------


def pipeline_recorded() -> dict:
    return scenario.Recorded.load().pipeline


def test_the_pipeline_has_the_same_conversations_through_the_drop_in(tmp_path, stb_real):
    script = Script.load(stb_real)
    recorded = pipeline_recorded()
    store = imported_store(tmp_path, scenario.pipeline_cache(script))
    with scenario.RealApi(lambda call: scenario.pipeline_real_answer(script, call)) as real, \
            FakeOpenAI(scenario.simulator_model) as model, FakeOpenAI(PipelineLlm(script)) as agent, \
            drop_in(store, real, model) as proxy:
        histories = run_queries(script, sorted(script.items), llm_base_url=agent.base_url, tools="virtual",
                                service_url=f"{proxy.url}/virtual")
    assert json.dumps(histories, sort_keys=True) == json.dumps(recorded["histories"], sort_keys=True)
    assert (len(real.calls), model.calls) == (recorded["real_calls"], recorded["model_calls"])


def test_the_pipeline_has_the_same_conversations_through_the_transparent_proxy(tmp_path, stb_real):
    script = Script.load(stb_real)
    recorded = pipeline_recorded()
    answers = {}
    for qid, history in recorded["histories"].items():
        item = script.items[qid]
        for turn in (m for m in history if m["role"] == "assistant"):
            for call in turn.get("tool_calls") or []:
                if call["function"]["name"] == "Finish":
                    continue
                category, tool, api = item.apis[call["function"]["name"]]
                observation = next(m["content"] for m in history if m.get("tool_call_id") == call["id"])
                body = {"category": category, "tool_name": standardize(tool), "api_name": api_key_name(api),
                        "tool_input": call["function"]["arguments"]}
                answers[request_text(body)] = (200, "application/json", observation)
    with RecordedServer(answers) as server, FakeOpenAI(PipelineLlm(script)) as agent, \
            ProxyProcess(tmp_path / "store") as proxy:
        histories = run_queries(script, sorted(script.items), llm_base_url=agent.base_url, tools="virtual",
                                service_url=server.url, tool_proxy=proxy.url)
        listed = subprocess.run([sys.executable, "-m", "stbproxy", "sessions", "--json", "--store",
                                 str(tmp_path / "store")], capture_output=True, text=True, timeout=60)
    assert json.dumps(histories, sort_keys=True) == json.dumps(recorded["histories"], sort_keys=True)
    assert len(server.calls) == len(answers)
    # every tool call went through the proxy as a /virtual call, and was kept as its server answered it
    (session,) = json.loads(listed.stdout)
    assert session["calls"] == len(answers) and session["by_source"] == {"upstream": len(answers)}
