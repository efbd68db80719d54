"""StableToolBench's MirrorAPI server, the default, written down here as data from its server's
rules: replies read as it reads them (once), its request member for member, the tool and
category it names for a /virtual call, an API it does not know failed as it fails, an unreachable
model, and a real `stbproxy serve` answering as it answers."""

from __future__ import annotations

import json

import pytest
import requests

from stbproxy.keys import api_key
from stbproxy.models import Request
from stbproxy.sim.call_facts import CallFacts
from stbproxy.sim.mirror_api import user_message
from tests.fakes.fake_openai import FakeOpenAI
from tests.servers import ProxyProcess
from tests.sim.mirrorapi_helpers import (
    HEALTH,
    HEALTH_MESSAGE,
    PLAIN,
    TOOLBENCH_KEY,
    checkout,
    health,
    run_simulation,
    tools_store,
)
from tests.stb_client import stb_call, stb_client

# -- StableToolBench's MirrorAPI server, the default ---------------------------------------------------

NO_ANSWER = {"error": "Failed to generate fake response", "response": ""}
# What StableToolBench's server answers for each reply of its model: it reads the reply with
# json.loads, else (not JSON) with one of two patterns (the chain-of-thought one when
# "mechanism_of_the_api" is anywhere in it), once; it answers the object found, NO_ANSWER when
# neither member holds anything, and fails (HTTP 500) on JSON that is no object with both
# members and on an answer JSON cannot carry.
STB_READS = [
    ('{"error": "", "response": "{\\"status\\": \\"up\\"}"}', {"error": "", "response": '{"status": "up"}'}),
    ('{"mechanism_of_the_api": "m", "error": "", "response": "up"}', {"error": "", "response": "up"}),
    # not JSON: the error up to its first quote, the response to the reply's end, as written
    ('```json\n{"error": "", "response": "up"}\n```', {"error": "", "response": 'up"}\n```'}),
    ('{"error": "", "response": "up"} Let me know.', {"error": "", "response": 'up"} Let me know.'}),
    ('{"error": "", "response": "{\\"status\\": \\"u', {"error": "", "response": '{\\"status\\": \\"u'}),
    ('```json\n{"mechanism_of_the_api": "It says "up".", "error": "", "response": "{\\"up\\": true}"}\n```',
     {"error": "", "response": '{\\"up\\": true}"}\n```'}),
    ('{"error": "bad", "response": null}', {"error": "bad", "response": None}),
    ('{"error": null, "response": "up"}', {"error": None, "response": "up"}),
    ('{"error": {"code": 1}, "response": ""}', {"error": {"code": 1}, "response": ""}),
    # nothing the patterns take, or nothing in what they take
    ('{"error": "Param "x" is bad", "response": ""}', NO_ANSWER),
    ('{"error" : "", "response": "up"} x', NO_ANSWER),  # the plain pattern has no space before its colon
    ("{'error': '', 'response': 'up'}", NO_ANSWER),
    ("The API is healthy.", NO_ANSWER),
    ("", NO_ANSWER),
    ('{"error": "", "response": ""}', NO_ANSWER),
    ('{"response": "up"}', 500),
    ("[1]", 500),
    ('{"error": "", "response": NaN}', 500),
    ({"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": None}}]}, 500),
    ({"id": "c", "choices": []}, 500),
]
SERVER_ERROR = (500, "Internal Server Error")  # FastAPI's answer to the server's exception


def served(made) -> tuple[int, object]:
    """What the proxy's /virtual answers for a simulation: 200 and the answer object, or
    a status of its own and its body's text."""
    from stbproxy.models import Source
    from stbproxy.stb.virtual_calls import reply_from_answer

    source = Source.SIMULATED if made.ok else Source.SIMULATED_ERROR
    reply = reply_from_answer(made.response, source, made.meta)
    return (200, reply.document) if reply.status == 200 else (reply.status, reply.body().decode())


@pytest.mark.parametrize("reply,answer", STB_READS)
def test_replies_are_read_as_stabletoolbench_reads_them_once(reply, answer):
    with FakeOpenAI(lambda _request: reply) as server:
        made = run_simulation(server, {"verbose": True})
        assert server.calls == 1
    assert served(made) == (SERVER_ERROR if answer == 500 else (200, answer))
    assert made.ok == (answer not in (500, NO_ANSWER))  # kept only when it is an answer
    assert (made.meta.get("virtual_status") == 500) == (answer == 500)


def test_the_request_is_stabletoolbench_s_member_for_member():
    with FakeOpenAI(lambda _request: '{"error": "", "response": "up"}') as server:
        run_simulation(server, {"verbose": True, "toolbench_key": TOOLBENCH_KEY}, model=None, temperature=None)
        (sent,) = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    # its openai client's order (chat.completions.create), the model its server asks for unless
    # configured, the temperature its configuration ships with
    assert list(json.loads(sent)) == ["messages", "model", "max_tokens", "seed", "temperature"]
    assert json.loads(sent) == {"messages": [{"role": "system", "content": PLAIN},
                                             {"role": "user", "content": HEALTH_MESSAGE}],
                                "model": "simulation-250123-qwen25-mixed", "max_tokens": 2048, "seed": 42,
                                "temperature": 0.1}


def virtual_facts(category: str, tool: str, api: str, args: dict, doc=HEALTH) -> CallFacts:
    """A /virtual call as the simulator sees it, with the names its client wrote."""
    from stbproxy.keys import DEFAULT_RULES
    from stbproxy.sim.call_facts import call_facts
    from stbproxy.synthesis.simulation import SimulationRequest

    body = json.dumps({"category": category, "tool_name": tool, "api_name": api, "tool_input": json.dumps(args),
                       "strip": "", "toolbench_key": TOOLBENCH_KEY}).encode()
    request = Request("POST", "http://127.0.0.1:8080/virtual", (("Content-Type", "application/json"),), body)
    ref = doc.ref if doc is not None else HEALTH.ref
    job = SimulationRequest(request, api_key(ref, args), ref, "the API is down", doc=doc, args=args)
    return call_facts(job, None, DEFAULT_RULES)


# The doc's tool_name and tool_category as StableToolBench's MirrorAPI server writes them for the
# names a /virtual client sent: the tool as written, cut at its first "_for_"; the category's key.
STB_DOC_NAMES = [
    (("Logistics", "Suivi-Colis"), ("Suivi-Colis", "Logistics")),
    (("Logistics", "suivi_colis"), ("suivi_colis", "Logistics")),
    (("Logistics", "suivi_colis_for_Logistics"), ("suivi_colis", "Logistics")),
    (("Sports", "Free NBA"), ("Free NBA", "Sports")),
    (("News, Media", "Data for Good"), ("Data for Good", "News_Media")),
    (("Business Software", "data_for_good"), ("data", "Business_Software")),
]


@pytest.mark.parametrize("sent,named", STB_DOC_NAMES)
def test_the_doc_names_the_tool_as_the_virtual_client_sent_it(sent, named):
    from stbproxy.sim.mirror_api import api_doc

    described = api_doc(virtual_facts(*sent, "health", {"verbose": True}))
    assert (described["tool_name"], described["tool_category"]) == named


def test_the_user_message_of_a_virtual_call_is_stabletoolbench_s():
    facts = virtual_facts("Logistics", "Suivi-Colis", "health", {"verbose": True, "toolbench_key": TOOLBENCH_KEY})
    assert user_message(facts) == HEALTH_MESSAGE.replace("'suivi_colis'", "'Suivi-Colis'")


# Whether StableToolBench's MirrorAPI server finds an API in its tool docs: it reads the file of
# the tool as sent, standardized and cut at its first "_for_", and compares the API name it reads
# from the call (standardized, ToolBench's reserved words renamed, cut before "_for_" and the tool
# as sent) with each documented name standardized; else it fails.
STB_FINDS = [
    (("Logistics", "suivi_colis", "health"), ("Suivi-Colis", "Health"), True),
    (("Logistics", "Suivi-Colis", "Health"), ("Suivi-Colis", "Health"), True),
    (("Logistics", "suivi_colis_for_Logistics", "health"), ("Suivi-Colis", "Health"), True),
    (("Logistics", "suivi_colis", "health_for_suivi_colis"), ("Suivi-Colis", "Health"), True),
    (("Logistics", "Suivi-Colis", "health_for_suivi_colis"), ("Suivi-Colis", "Health"), False),  # no cut
    (("Logistics", "suivi_colis", "is_id"), ("Suivi-Colis", "ID"), False),  # "is_id" looked for, "id" documented
    (("Logistics", "suivi_colis", "id"), ("Suivi-Colis", "ID"), False),
    (("Logistics", "suivi_colis", "id_for_suivi_colis"), ("Suivi-Colis", "ID"), True),
    (("Logistics", "suivi_colis", "2nd check"), ("Suivi-Colis", "2nd check"), True),
    (("Science", "materials_platform_for_data_science", "get_data"), ("Materials Platform for Data Science",
                                                                     "Get data"), False),  # materials_platform.json
]


@pytest.mark.parametrize("sent,documented,found", STB_FINDS)
def test_an_api_is_found_as_stabletoolbench_s_server_finds_it(sent, documented, found):
    from dataclasses import replace

    from stbproxy.sim.mirror_api import stb_finds

    doc = replace(HEALTH, category=sent[0], tool=documented[0], api=documented[1])
    assert stb_finds(virtual_facts(*sent, {}, doc=doc)) is found


def test_calls_of_other_kinds_are_not_judged_by_its_tool_docs():
    from stbproxy.mcp.tools import tool_doc
    from stbproxy.models import ApiRef
    from stbproxy.sim.mirror_api import stb_finds

    mcp = tool_doc("weather-srv", {"name": "id", "inputSchema": {"type": "object"}})
    request = Request("POST", "http://127.0.0.1/mcp")
    assert stb_finds(CallFacts(request, mcp, {}, (), ApiRef("weather-srv", "id", "id")))
    assert stb_finds(CallFacts(request, None, {}, (), ApiRef("weather-srv", "nope", "nope")))
    assert stb_finds(CallFacts(Request("GET", "https://api.example.test/x"), None, {}, ()))


def test_an_api_stabletoolbench_does_not_know_fails_as_there_without_asking():
    from stbproxy.sim.mirror_api import stb_finds

    assert not stb_finds(virtual_facts("Logistics", "suivi_colis", "health", {}, doc=None))
    with FakeOpenAI(lambda _request: '{"error": "", "response": "up"}') as server:
        made = run_simulation(server, {"verbose": True}, doc=None)
        assert server.calls == 0
    assert not made.ok and served(made) == SERVER_ERROR and made.meta["virtual_status"] == 500
    assert made.response.header("content-type") == "text/plain; charset=utf-8"
    with FakeOpenAI(lambda _request: '{"error": "", "response": "up"}') as server:
        asked = run_simulation(server, {"verbose": True}, doc=None, mirrorapi_unknown="prompt")
        assert server.calls == 1
    assert asked.ok and served(asked) == (200, {"error": "", "response": "up"})


def test_a_model_that_cannot_be_reached_fails_as_stabletoolbench_fails():
    from tests.fakes.fake_openai import HttpError

    with FakeOpenAI(lambda _request: HttpError(503)) as server:
        made = run_simulation(server, {"verbose": True})
        recovering = run_simulation(server, {"verbose": True}, mirrorapi_parse="recover")
    assert served(made) == SERVER_ERROR and made.meta["cause"].startswith("the LLM backend answered HTTP 503")
    status, answer = served(recovering)
    assert status == 200 and answer["error"].startswith("Failed to simulate")


def test_serve_with_mirrorapi_answers_as_stabletoolbench_by_default(tmp_path):
    store = tools_store(tmp_path)
    root = checkout(tmp_path / "StableToolBench")

    def model(request: dict):
        if "False" in request["messages"][1]["content"]:
            return "The API is healthy, I think."
        return '```json\n{"error": "", "response": "{\\"status\\": \\"up\\"}"}\n```'

    unknown = stb_call("Logistics", "suivi_colis", "no_such_api", {}, TOOLBENCH_KEY)
    with FakeOpenAI(model) as llm:
        env = {"OPENAI_BASE_URL": f"{llm.url}/v1", "OPENAI_API_KEY": "sk-mirror-test"}
        with ProxyProcess(store, "--simulator", "mirrorapi", "--stb-dir", str(root), env=env) as proxy:
            assert "simulator mirrorapi simulation-250123-qwen25-mixed" in "".join(proxy.output)
            fenced, hopeless, failed = stb_client({"SERVICE_URL": f"{proxy.url}/virtual"},
                                                  [health(True), health(False), unknown])
            raw = requests.post(f"{proxy.url}/virtual", json=unknown, timeout=30)
        asked = llm.chat_requests()
    assert json.loads(fenced["observation"]) == {"error": "", "response": '{\\"status\\": \\"up\\"}"}\n```'}
    assert json.loads(hopeless["observation"]) == NO_ANSWER and hopeless["source"] == "simulated-error"
    assert json.loads(failed["observation"]) == {"error": "request invalid, data error. status_code=500",
                                                 "response": ""}
    assert (raw.status_code, raw.text) == SERVER_ERROR
    assert len(asked) == 2  # one attempt each; the unknown API is never asked
    assert asked[0] == {"messages": [{"role": "system", "content": PLAIN}, {"role": "user", "content": HEALTH_MESSAGE}],
                        "model": "simulation-250123-qwen25-mixed", "max_tokens": 2048, "seed": 42,
                        "temperature": 0.1}


def test_a_virtual_call_reaches_the_model_under_the_tool_name_its_client_wrote(tmp_path):
    """The call is stored under its keys, but StableToolBench's MirrorAPI server writes the
    tool's name as the /virtual client sent it: the names travel with the call."""
    store = tools_store(tmp_path)
    root = checkout(tmp_path / "StableToolBench")
    written = stb_call("Logistics", "Suivi-Colis", "health", {"verbose": True}, TOOLBENCH_KEY)
    with FakeOpenAI(lambda _request: '{"error": "", "response": "up"}') as llm:
        env = {"OPENAI_BASE_URL": f"{llm.url}/v1", "OPENAI_API_KEY": "sk-mirror-test"}
        with ProxyProcess(store, "--simulator", "mirrorapi", "--stb-dir", str(root), env=env) as proxy:
            (seen,) = stb_client({"SERVICE_URL": f"{proxy.url}/virtual"}, [written])
        (asked,) = llm.chat_requests()
    assert json.loads(seen["observation"]) == {"error": "", "response": "up"} and seen["source"] == "simulated"
    assert asked["messages"][1]["content"] == HEALTH_MESSAGE.replace("'suivi_colis'", "'Suivi-Colis'")
