"""StableToolBench's virtual server side by side with stbproxy: one scenario, played on any
server that speaks /virtual.

Two scenarios, each a seed cache in StableToolBench's layout and a sequence of calls:

- ``CALLS``: single /virtual calls that reach every rule of that server's calling path: a
  cached answer, a cached failure, arguments cached as strings but sent as numbers, in
  another order, a real API that answers HTTP 500, a message the substring rules let pass
  and one they do not, an answer object with extra members, an unknown API, a tool_input
  that is not JSON, ``chat_with_user``, a tool name already suffixed, a function name sent
  as the API name;
- ``PIPELINE``: the twelve queries StableToolBench's pipeline answered
  (tests/pipeline_run.py), with a seed cache made of their observations, four of them
  changed (a cached failure, string-typed arguments, arguments in another order, an API
  whose real server answers HTTP 500).

Around the server under test: ``RealApi``, a ToolBench-style server on loopback standing
for the real APIs behind it (``toolbench_url``), answering from a table and counting the
calls it gets; and a fake OpenAI-compatible model (tests/fakes/fake_openai.py) for the
simulator, which always answers the same object. What StableToolBench's own server
answered to each step, with the real and model calls it made, is kept in
``recorded.json`` beside this file, written by ``scripts/stb_side_by_side.py`` from a run of
that server (an unmodified checkout, ``uvicorn main:app``) on this very scenario.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from stbcore.toolbench_names import api_key_name, server_names, standardize
from tests.loopback import LoopbackServer, QuietHandler

RECORDED = Path(__file__).with_name("recorded.json")
TOOLBENCH_KEY = "tbk-side-by-side-0427"
SIMULATED = {"error": "", "response": "made up by the fake simulator model"}
SIM_MODEL = "fake-simulator"

# -- the single calls -----------------------------------------------------------------------

CONCERT = "Data/theclique_for_Data/songkick_concert.json"

CALLS_CACHE: dict[str, dict[str, Any]] = {
    CONCERT: {
        "{'id_conc': '1'}": {"error": "", "response": "concert one"},
        "{'id_conc': 'gone'}": {"error": "", "response": "API rate limit exceeded"},
        "{'id_conc': 'failed'}": {"error": "Function executing from my_tools.Data.theclique.api import "
                                           "songkick_concert error...\ntimed out", "response": ""},
        "{'id_conc': '294'}": {"error": "", "response": "concert 294 cached"},
        "{'id_conc': 'a', 'page': '2'}": {"error": "", "response": "page two cached"},
        "{'id_conc': 'extra'}": {"error": "", "response": "with a member more", "took": 0.5},
        "{'id_conc': 'reversed'}": {"response": "members the other way round", "error": ""},
        "{}": {"error": "", "response": "no arguments"},
    },
}


@dataclass(frozen=True)
class Step:
    name: str
    body: dict[str, Any]  # the /virtual call as ToolBench's client sends it
    why: str  # the rule of StableToolBench's server that this step reaches


def virtual_call(tool_input: Any, *, api: str = "Songkick concert", tool: str = "TheClique",
                 category: str = "Data") -> dict[str, Any]:
    return {"category": category, "tool_name": tool, "api_name": api,
            "tool_input": tool_input if isinstance(tool_input, str) else json.dumps(tool_input),
            "strip": "truncate", "toolbench_key": TOOLBENCH_KEY}


CALLS: tuple[Step, ...] = (
    Step("hit", virtual_call({"id_conc": "1"}), "a cached answer"),
    Step("cached-failure", virtual_call({"id_conc": "gone"}), "a cached failure is served as cached"),
    Step("cached-error", virtual_call({"id_conc": "failed"}), "a cached error object is served as cached"),
    Step("number-for-string", virtual_call({"id_conc": 294}), "cached under '294': 294 is another call"),
    Step("number-again", virtual_call({"id_conc": 294}), "the real answer was saved"),
    Step("string-as-cached", virtual_call({"id_conc": "294"}), "the cached text"),
    Step("other-order", virtual_call({"page": "2", "id_conc": "a"}), "arguments in another order are another call"),
    Step("real-500", virtual_call({"id_conc": "boom"}), "a real answer with status 500 is simulated over"),
    Step("real-500-again", virtual_call({"id_conc": "boom"}), "the simulated answer was saved"),
    Step("plain-no-such-api", virtual_call({"id_conc": "nope"}),
         "'API doesn't exists' in a text: the lower-cased test never matches, so it is valid"),
    Step("rapidapi-no-such-api", virtual_call({"id_conc": "rapid"}),
         "RapidAPI's {'message': \"API doesn't exists\"} object: invalid, simulated"),
    Step("extra-member", virtual_call({"id_conc": "extra"}), "a cached answer is served whole"),
    Step("reversed-members", virtual_call({"id_conc": "reversed"}), "member order kept"),
    Step("empty-input", virtual_call(""), "an empty tool_input is {}"),
    Step("bad-input", virtual_call("{oops"), "a tool_input that is not JSON"),
    Step("unknown-api", virtual_call({"q": "x"}, api="No such api"), "an API no file names: real, then simulated"),
    Step("suffixed-tool", virtual_call({"id_conc": "1"}, tool="theclique_for_Data"),
         "a tool name ending in _for_<category> is used as given"),
    Step("function-name", virtual_call({"id_conc": "1"}, api="songkick_concert_for_theclique"),
         "the API name is cut at _for_<tool name as sent>, which 'TheClique' is not: another file"),
    Step("typed-values", virtual_call({"id_conc": "1", "flag": True, "n": 1.5}), "str() of booleans and floats"),
    Step("chat", virtual_call("{}", api="chat_with_user"), "chat_with_user"),
)

# What the real APIs (behind toolbench_url) answer, by the call's arguments as str() writes
# them: (status, answer object). Any other call: a real API that does not know it.
CALLS_REAL: dict[str, tuple[int, dict[str, Any]]] = {
    "{'id_conc': 294}": (200, {"error": "", "response": "concert 294 live"}),
    "{'page': '2', 'id_conc': 'a'}": (200, {"error": "", "response": "page two live"}),
    "{'id_conc': 'boom'}": (500, {"error": "", "response": "a body that looks fine"}),
    "{'id_conc': 'nope'}": (200, {"error": "", "response": "this API doesn't exists, they say"}),
    "{'id_conc': 'rapid'}": (200, {"error": "", "response": {"message": "API doesn't exists"}}),
    "{'id_conc': '1', 'flag': True, 'n': 1.5}": (200, {"error": "", "response": "typed values live"}),
}
UNKNOWN = (200, {"error": "API not working error...", "response": ""})
FUNCTION_NAME = (200, {"error": "", "response": "the function name's own answer"})


def calls_real_answer(call: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if call["api_name"] == "songkick_concert_for_theclique":
        return FUNCTION_NAME
    return CALLS_REAL.get(str(call["tool_input"]), UNKNOWN)


# -- the pipeline ---------------------------------------------------------------------------

# How the pipeline's seed cache differs from its answer files' observations, by query id.
PIPELINE_CHANGES = {
    "588": "cached failure",  # cached as a failure: served as cached
    "2213": "strings",  # cached under string values; the agent sends numbers: real call, whose
    # answer ("simulated 7fe500b236bc") holds "500", so it is simulated over
    "2121": "other order",  # cached with its arguments in another order: real call
    "608": "real 500",  # not cached; its real API answers HTTP 500: simulated
}
PIPELINE_FAILURE = {"error": "", "response": "API rate limit exceeded"}


def tool_calls(item) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(function, arguments, observation) of each tool call of one answer file."""
    found = []
    for turn in item.assistant_turns:
        for call in turn.get("tool_calls") or []:
            if call["function"]["name"] == "Finish":
                continue
            observation = next(m["content"] for m in item.conversation if m.get("tool_call_id") == call["id"])
            found.append((call["function"]["name"], json.loads(call["function"]["arguments"]), json.loads(observation)))
    return found


def pipeline_cache(script) -> dict[str, dict[str, Any]]:
    """The seed cache: each query's tool call under str() of the agent's arguments, answered
    with the observation its file shows, but for PIPELINE_CHANGES."""
    cache: dict[str, dict[str, Any]] = {}
    for qid, item in script.items.items():
        change = PIPELINE_CHANGES.get(qid)
        for function, args, observation in tool_calls(item):
            if change == "real 500":
                continue
            key = str(args)
            if change == "strings":
                key = str({name: str(value) for name, value in args.items()})
            elif change == "other order":
                key = str(dict(reversed(list(args.items()))))
            elif change == "cached failure":
                observation = PIPELINE_FAILURE
            raw_category, raw_tool, raw_api = item.apis[function]
            category, tool, api = server_names(raw_category, standardize(raw_tool), api_key_name(raw_api))
            cache.setdefault(f"{category}/{tool}/{api}.json", {})[key] = observation
    return cache


def pipeline_real_answer(script, call: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The real API behind a pipeline call (as a virtual server sends it on: the tool's own
    name, the API key, the arguments as an object): the observation its file shows, but
    HTTP 500 for the query whose API is down."""
    for qid, item in script.items.items():
        for function, args, observation in tool_calls(item):
            _category, tool, api = item.apis[function]
            if (standardize(tool), api_key_name(api), args) == (
                    call["tool_name"], call["api_name"], call["tool_input"]):
                return (500, {"error": "", "response": "down"}) if PIPELINE_CHANGES.get(qid) == "real 500" \
                    else (200, observation)
    return UNKNOWN


# -- the servers around the server under test ------------------------------------------------


class _RealApiHandler(QuietHandler):
    def do_POST(self) -> None:
        call = self.read_json()
        self.owner.calls.append(call)
        status, answer = self.owner.answer(call)
        self.answer(status, json.dumps(answer).encode())


class RealApi(LoopbackServer):
    """The real APIs behind a virtual server: a ToolBench-style /virtual endpoint on loopback
    that answers from ``answer(call) -> (status, object)`` and keeps every call it got."""

    handler = _RealApiHandler

    def __init__(self, answer) -> None:
        self.answer = answer
        self.calls: list[dict[str, Any]] = []
        super().__init__()

    @property
    def url(self) -> str:
        return f"{self.base_url}/virtual"


def simulator_model(_request: dict[str, Any]) -> str:
    """The fake simulator model's reply, whatever it is asked."""
    return json.dumps(SIMULATED)


# -- playing a scenario -----------------------------------------------------------------------


@dataclass
class Seen:
    """What one step got: the HTTP answer, the observation ToolBench's client makes of it,
    and how many real API and simulator model calls the run had made by then."""

    status: int
    body: str
    observation: str
    real_calls: int
    model_calls: int
    source: str | None = None  # X-Stb-Source, when stbproxy answered

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "body": self.body, "observation": self.observation,
                "real_calls": self.real_calls, "model_calls": self.model_calls}


def observation_of(response: requests.Response) -> str:
    """The observation ToolBench's client (rapidapi_wrapper._step) makes of an answer."""
    if response.status_code != 200:
        return json.dumps({"error": f"request invalid, data error. status_code={response.status_code}",
                           "response": ""})
    try:
        return json.dumps(response.json())
    except ValueError:
        return json.dumps({"error": "request invalid, data error", "response": ""})


def play(steps, service_url: str, real: RealApi, model, *, proxy: str | None = None) -> dict[str, Seen]:
    """Each step POSTed as ToolBench's client posts it, in order; ``proxy``: through it."""
    web = requests.Session()
    web.trust_env = False
    if proxy:
        web.proxies = {"http": proxy, "https": proxy}
    seen = {}
    try:
        for step in steps:
            response = web.post(service_url, json=step.body, headers={"toolbench_key": TOOLBENCH_KEY}, timeout=60)
            seen[step.name] = Seen(response.status_code, response.text, observation_of(response), len(real.calls),
                                   model.calls, response.headers.get("X-Stb-Source"))
    finally:
        web.close()
    return seen


@dataclass
class Recorded:
    """StableToolBench's server's answers to a scenario, as recorded.json keeps them."""

    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    pipeline: dict[str, Any] = field(default_factory=dict)
    about: str = ""

    @classmethod
    def load(cls) -> Recorded:
        document = json.loads(RECORDED.read_text())
        return cls(document["calls"], document["pipeline"], document.get("about", ""))


def write_cache(root: Path, cache: dict[str, dict[str, Any]]) -> Path:
    for relative, entries in cache.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(entries, indent=4))
    return root
