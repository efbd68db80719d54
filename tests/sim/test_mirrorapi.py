"""StableToolBench's trained simulator (MirrorAPI) and prompt templates: the exact request its
model gets, its replies read as StableToolBench's MirrorAPI server reads them (by default) or
leniently (--mirrorapi-parse recover), an API it does not know failed as it fails, its system
prompt read from a StableToolBench checkout without running it, and a real `stbproxy serve`
using it. StableToolBench's behaviour is written down here as data, from its server's rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from stbproxy.errors import ConfigError
from stbproxy.keys import api_key
from stbproxy.models import Request
from stbproxy.sim.call_facts import CallFacts
from stbproxy.sim.llm_prompt import BadReply
from stbproxy.sim.mirror_api import read_reply, user_message
from stbproxy.sim.prompt_file import PromptTemplate, stb_system_prompt
from stbproxy.stb.catalog import ApiDoc, Param
from stbproxy.store.embedded import Store
from tests.fakes.fake_openai import FakeOpenAI
from tests.servers import ProxyProcess
from tests.stb_client import stb_call, stb_client

# Made up for these tests: StableToolBench's own prompts are read from a checkout at run time.
PLAIN = "You are a pretend API server (plain).\nAnswer {\"error\": ..., \"response\": ...} only."
COT = "You are a pretend API server (thinking first).\nWrite mechanism_of_the_api, error, response."
TOOLBENCH_KEY = "tbk-mirror-secret-3317"

HEALTH = ApiDoc(category="Logistics", tool="Suivi-Colis", api="Health", url="https://suivi-colis.p.rapidapi.com/health",
                method="GET", tool_description="Track parcels.", api_description="Get the API's health",
                optional_parameters=(Param("verbose", "BOOLEAN", "more detail", "false"),))
# What StableToolBench's server writes for this call: str() of two dicts, keys in this order.
HEALTH_MESSAGE = (
    "API doc:\n"
    "{'api_name': 'Health', 'api_description': \"Get the API's health\", 'required_parameters': [], "
    "'optional_parameters': [{'name': 'verbose', 'type': 'BOOLEAN', 'description': 'more detail', "
    "'default': 'false'}], 'tool_description': 'Track parcels.', 'tool_name': 'suivi_colis', "
    "'tool_category': 'Logistics'}\n\n"
    "Request:\n{'verbose': True}")


def checkout(root: Path, body: str | None = None) -> Path:
    """A StableToolBench checkout as far as the simulator reads it: server/system_prompts.py."""
    (root / "server").mkdir(parents=True, exist_ok=True)
    (root / "server" / "system_prompts.py").write_text(body if body is not None else (
        'raise SystemExit("this file must never run")\n'
        f"COT_SYSTEM = {COT!r}\n"
        f"SFT_SYSTEM = {PLAIN!r}\n"))
    return root


def facts(args, doc=HEALTH) -> CallFacts:
    return CallFacts(Request("POST", "http://127.0.0.1/virtual"), doc, args, ())


# -- the request ------------------------------------------------------------------------------------


def test_the_user_message_is_the_one_the_model_was_trained_on():
    assert user_message(facts({"verbose": True, "toolbench_key": TOOLBENCH_KEY})) == HEALTH_MESSAGE


def test_an_api_nobody_described_is_named_by_its_request():
    message = user_message(CallFacts(Request("GET", "https://api.example.test/v2/items?q=1"), None, {"q": "1"}, ()))
    assert message.startswith("API doc:\n{'api_name': 'GET /v2/items', 'api_description': ''")
    assert "'tool_name': 'api.example.test'" in message and message.endswith("Request:\n{'q': '1'}")


def test_tool_and_category_are_named_as_stabletoolbench_names_them():
    from stbproxy.sim.mirror_api import api_doc

    doc = ApiDoc(category="Business Software", tool="Data for Good", api="Get Stats", url="https://x.example/s")
    described = api_doc(CallFacts(Request("GET", "https://x.example/s"), doc, {}, ()))
    # the category standardized; the tool standardized, cut at its first "_for_" as the server cuts
    # what the client sends (data_for_good); the API by its documented name
    assert (described["tool_category"], described["tool_name"], described["api_name"]) == (
        "Business_Software", "data", "Get Stats")


def test_an_mcp_tool_is_described_from_its_own_doc():
    from stbproxy.mcp.tools import tool_doc

    doc = tool_doc("weather-srv", {"name": "get_forecast", "description": "Forecast for a city", "inputSchema": {
        "type": "object", "required": ["city"],
        "properties": {"city": {"type": "string", "description": "City"}, "days": {"type": "integer", "default": 3}}}})
    message = user_message(CallFacts(Request("POST", "http://127.0.0.1/mcp"), doc, {"city": "Oslo", "days": 2}, ()))
    assert message == (
        "API doc:\n{'api_name': 'get_forecast', 'api_description': 'Forecast for a city', 'required_parameters': "
        "[{'name': 'city', 'type': 'STRING', 'description': 'City', 'default': None}], 'optional_parameters': "
        "[{'name': 'days', 'type': 'INTEGER', 'description': '', 'default': 3}], 'tool_description': "
        "'the MCP server weather-srv', 'tool_name': 'weather_srv', 'tool_category': 'mcp'}\n\n"
        "Request:\n{'city': 'Oslo', 'days': 2}")


def test_the_system_prompt_is_read_from_the_checkout_without_running_it(tmp_path):
    root = checkout(tmp_path / "StableToolBench")
    assert stb_system_prompt(root, "plain") == PLAIN
    assert stb_system_prompt(root, "cot") == COT
    with pytest.raises(ConfigError, match="assigns no COT_SYSTEM"):
        stb_system_prompt(checkout(tmp_path / "other", "SFT_SYSTEM = 'x'\n"), "cot")
    with pytest.raises(ConfigError, match="is --stb-dir a StableToolBench checkout"):
        stb_system_prompt(tmp_path / "nowhere", "plain")
    with pytest.raises(ConfigError, match="SFT_SYSTEM is not a plain string"):
        stb_system_prompt(checkout(tmp_path / "made", "SFT_SYSTEM = make()\n"), "plain")


# -- reading replies ---------------------------------------------------------------------------------


@pytest.mark.parametrize("reply,error,response,how", [
    ('{"error": "", "response": "{\\"status\\": \\"ok\\"}"}', "", '{"status": "ok"}', ""),
    ('```json\n{"error": "", "response": {"status": "ok"}}\n```', "", {"status": "ok"}, "code fence"),
    ('{"mechanism_of_the_api": "It reports health.", "error": "", "response": "{\\"status\\": \\"ok\\"}"}',
     "", '{"status": "ok"}', "mechanism field left out"),
    # the model's own unescaped quotes in the mechanism, then the output cut off inside the response
    ('{"mechanism_of_the_api": "It says "up" or "down"", "error": "", "response": "{\\"status\\": \\"o',
     "", '{"status": "o', "mechanism field left out, members read one by one, unclosed string"),
    ('{"error": "", "response": "The service is up."}\nHope this helps!', "", "The service is up.",
     "text around the object left out"),
    ('{"error": "", "response": {"checks": [{"db": "ok"}, {"cache": "sl', "", {"checks": [{"db": "ok"}]},
     "members read one by one, truncated JSON closed after its last complete member"),
    ('```\n{"error": "", "response": "fine"', "", "fine", "code fence, members read one by one"),
    ('{"error": "Missing required parameter: city", "response": ""}', "Missing required parameter: city", "", ""),
    # a string holding JSON cut at the token limit: its complete members, closed, in the model's own spelling
    ('{"error":"","response":"{\\"results\\":[{\\"id\\":1},{\\"id\\":2', "", '{"results":[{"id":1}]}',
     "members read one by one, unclosed string, truncated JSON closed after its last complete member"),
    # the answer's JSON written with its quotes unescaped: kept whole, not cut at its first quote
    ('{"error": "", "response": "{"status": "ok", "n": 1}"}', "", '{"status": "ok", "n": 1}',
     "members read one by one, unescaped quotes kept"),
    ('{"error": "Param "x" is bad", "response": ""}', 'Param "x" is bad', "",
     "members read one by one, unescaped quotes kept"),
    ('{"error": "", "response": "{"a": {"b": "c"}}"}\nHope this "helps"', "", '{"a": {"b": "c"}}',
     "members read one by one, unescaped quotes kept"),
    # raw newlines in a string (not JSON, but what the model meant): no trailing quote and brace kept
    ('{"error": "", "response": "line 1\nline 2"}', "", "line 1\nline 2", "raw control characters in strings read"),
    ("{\"error\": \"\", \"response\": \"it\\'s \\u00e9t\\u00e9 \\ud83d\\ude00\"}", "", "it's \u00e9t\u00e9 \U0001f600",
     "members read one by one"),
    ('{"error": "", "response": "caf\\u00e9 \\u00', "", "caf\u00e9 ", "members read one by one, unclosed string"),
    ("{'error': '', 'response': {'ok': True, 'n': None}}", "", {"ok": True, "n": None}, "python literal"),
    ('Sure {see below}: {"error": "", "response": {"a": 1}} Done.', "", {"a": 1}, "text around the object left out"),
    # member names inside other values are not members: the mechanism's prose, the answer's own "error"
    ('{"mechanism_of_the_api": "It says "error": "x" at times", "error": "", "response": "ok"',
     "", "ok", "mechanism field left out, members read one by one"),
    ('{"response": "{"error": "inner"}"}', "", '{"error": "inner"}', "members read one by one, unescaped quotes kept"),
])
def test_malformed_replies_are_read_as_far_as_they_go(reply, error, response, how):
    got_error, got_response, notes = read_reply(reply)
    assert (got_error, got_response, ", ".join(notes)) == (error, response, how)


@pytest.mark.parametrize("reply", ["", "   ", "I am sorry, I cannot help with that.", '{"error": "", "response": ""}',
                                   '{"result": 1}', "x" * 70_000,
                                   # cut before its first complete member: nothing honest to keep
                                   '{"error": "", "response": {"status": "u',
                                   '```json\n{"mechanism_of_the_api": "It reports the status of'])
def test_replies_with_nothing_to_recover_are_bad(reply):
    with pytest.raises(BadReply):
        read_reply(reply)


# -- templates ---------------------------------------------------------------------------------------


def test_a_template_fills_known_placeholders_and_leaves_other_braces():
    template = PromptTemplate.parse(
        "[system]\nYou are {api_doc_json}'s server.\n[user]\nDoc: {api_doc}\nCall: {request_json}\n"
        'Reply as {"error": "", "response": {}} with {{request}} literal.\n{examples}', "t.txt")
    system, user = template.messages(facts({"verbose": True}), [("{}", "up")], "ignored: the template has one")
    assert system["role"] == "system" and system["content"].startswith('You are {"api_name": "Health"')
    assert user["content"].split("\n")[0] == "Doc: " + HEALTH_MESSAGE.split("\n")[1]
    assert 'Call: {"verbose": true}' in user["content"]
    assert 'Reply as {"error": "", "response": {}} with {request} literal.' in user["content"]
    assert user["content"].endswith("Call 1 arguments: {}\nCall 1 answer: up")


def test_a_template_without_sections_is_the_user_message_and_takes_the_given_system_prompt():
    template = PromptTemplate.parse("API doc:\n{api_doc}\n\nRequest:\n{request}")
    assert template.messages(facts({"verbose": True}), [], PLAIN) == [
        {"role": "system", "content": PLAIN}, {"role": "user", "content": HEALTH_MESSAGE}]
    assert template.messages(facts({"verbose": True}), [], None) == [{"role": "user", "content": HEALTH_MESSAGE}]


@pytest.mark.parametrize("text,words", [
    ("Call {api_name}", "unknown placeholder {api_name}; the known ones are {api_doc}, {api_doc_json}"),
    ("[user]\n{{api_doc}} is fine, {Request} is not", "unknown placeholder {Request}"),
    ("[system]\nonly a system\n", "no user message"),
    ("preamble\n[user]\nx", "text before its first [system] or [user] line"),
    ("[user]\na\n[user]\nb", "two [user] sections"),
])
def test_bad_templates_are_refused_with_the_reason(text, words):
    with pytest.raises(ConfigError) as caught:
        PromptTemplate.parse(text, "t.txt")
    assert words in str(caught.value)


# -- a real proxy ------------------------------------------------------------------------------------


def tools_store(tmp_path: Path) -> Path:
    """A store whose catalog knows the Health API (ToolBench's tools/<Category>/<tool>.json)."""
    tool = tmp_path / "tools" / "Logistics" / "suivi_colis.json"
    tool.parent.mkdir(parents=True)
    tool.write_text(json.dumps({"tool_name": "Suivi-Colis", "tool_description": "Track parcels.", "api_list": [{
        "name": "Health", "url": "https://suivi-colis.p.rapidapi.com/health", "method": "GET",
        "description": "Get the API's health", "required_parameters": [],
        "optional_parameters": [{"name": "verbose", "type": "BOOLEAN", "description": "more detail",
                                 "default": "false"}]}]}))
    store = tmp_path / "store"
    done = subprocess.run([sys.executable, "-m", "stbproxy", "import", "tools", str(tmp_path / "tools"),
                           "--store", str(store)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return store


def health(verbose) -> dict:
    return stb_call("Logistics", "suivi_colis", "health", {"verbose": verbose}, TOOLBENCH_KEY)


def test_serve_with_mirrorapi_recover_reads_further_and_asks_again(tmp_path):
    store = tools_store(tmp_path)
    root = checkout(tmp_path / "StableToolBench")

    def model(request: dict):
        if "False" in request["messages"][1]["content"]:  # hopeless every time: retried, then failed
            return "The API is healthy, I think."
        return ('{"mechanism_of_the_api": "It reports whether the service is up.", "error": "", '
                '"response": "{\\"status\\": \\"up\\", \\"checks\\": 3}"}')

    with FakeOpenAI(model) as llm:
        env = {"OPENAI_BASE_URL": f"{llm.url}/v1", "OPENAI_API_KEY": "sk-mirror-test"}
        with ProxyProcess(store, "--simulator", "mirrorapi", "--stb-dir", str(root), "--stb-prompt", "cot",
                          "--sim-model", "simulation-qwen", "--sim-temperature", "0.1", "--mirrorapi-parse", "recover",
                          env=env) as proxy:
            assert "simulator mirrorapi simulation-qwen" in "".join(proxy.output)
            drop_in = {"SERVICE_URL": f"{proxy.url}/virtual"}
            first, again, hopeless = stb_client(drop_in, [health(True), health(True), health(False)])
            seen = requests.post(f"{proxy.url}/virtual", json=health(True), timeout=30).headers
        asked = llm.chat_requests()
    assert [r["source"] for r in (first, again)] == ["simulated", "cache"]
    assert (seen["X-Stb-Origin"], seen["X-Stb-Simulator"]) == ("simulated", "mirrorapi simulation-qwen")
    assert json.loads(first["observation"]) == {"error": "", "response": '{"status": "up", "checks": 3}'}
    assert again["observation"] == first["observation"]
    # Exactly what StableToolBench's MirrorAPI server sends, with the cot prompt from the checkout.
    assert asked[0] == {"model": "simulation-qwen", "temperature": 0.1, "max_tokens": 2048, "seed": 42,
                        "messages": [{"role": "system", "content": COT},
                                     {"role": "user", "content": HEALTH_MESSAGE}]}
    assert len(asked) == 1 + 3  # one answer, then three bad replies for the hopeless call
    assert json.loads(hopeless["observation"])["error"].startswith("Failed to simulate")
    assert hopeless["source"] == "simulated-error"
    with Store(store, readonly=True) as db:
        kept = [e for e in db.scan("api/") if e.source.value == "simulated"]
        failed = list(db.scan("log/simulated-error/"))
    assert len(kept) == 1 and len(failed) == 1
    assert kept[0].meta["simulator"] == "mirrorapi" and kept[0].meta["recovered"] == "mechanism field left out"
    assert TOOLBENCH_KEY not in json.dumps([r["messages"] for r in asked])


def test_a_template_gives_an_llm_the_prompt_it_was_trained_on(tmp_path):
    store = tools_store(tmp_path)
    template = tmp_path / "prompt.txt"
    template.write_text("[system]\nPlay {api_doc_json}.\n[user]\n{request_json}")
    with FakeOpenAI(lambda _request: '```json\n{"error": "", "response": {"status": "up"}}\n```') as llm:
        env = {"OPENAI_BASE_URL": f"{llm.url}/v1", "OPENAI_API_KEY": "sk-template-test"}
        with ProxyProcess(store, "--simulator", "llm", "--sim-prompt", str(template), "--sim-model", "m",
                          env=env) as proxy:
            (answer,) = stb_client({"SERVICE_URL": f"{proxy.url}/virtual"}, [health(True)])
        (asked,) = llm.chat_requests()
    assert json.loads(answer["observation"])["response"] == {"status": "up"}
    assert asked["messages"][0]["content"].startswith('Play {"api_name": "Health"')
    assert asked["messages"][1]["content"] == '{"verbose": true}'
    assert "response_format" not in asked


def test_an_error_answer_reaches_a_virtual_client_as_stabletoolbench_serves_it(tmp_path):
    store = tools_store(tmp_path)
    root = checkout(tmp_path / "StableToolBench")
    with FakeOpenAI(lambda _request: '{"error": "Missing required parameter: city", "response": ""}') as llm:
        env = {"OPENAI_BASE_URL": f"{llm.url}/v1", "OPENAI_API_KEY": "sk-mirror-test"}
        with ProxyProcess(store, "--simulator", "mirrorapi", "--stb-dir", str(root), env=env) as proxy:
            (answer,) = stb_client({"SERVICE_URL": f"{proxy.url}/virtual"}, [health(True)])
    assert json.loads(answer["observation"]) == {"error": "Missing required parameter: city", "response": ""}


@pytest.mark.parametrize("args,words", [
    (["--simulator", "mirrorapi"], "the mirrorapi simulator needs the system prompt its model was trained on"),
    (["--simulator", "schema", "--stb-dir", "CHECKOUT"], "prompt options (--sim-prompt, --sim-system-prompt, "
                                                         "--stb-dir) are for the llm and mirrorapi simulators"),
    (["--simulator", "mirrorapi", "--stb-dir", "EMPTY"], "is --stb-dir a StableToolBench checkout?"),
    (["--simulator", "llm", "--sim-prompt", "BADTEMPLATE"], "unknown placeholder {tool}"),
    (["--simulator", "mirrorapi", "--stb-dir", "PLAINONLY", "--stb-prompt", "cot"], "assigns no COT_SYSTEM"),
    (["--simulator", "mirrorapi", "--sim-system-prompt", "FILE", "--stb-prompt", "cot"],
     "--stb-prompt chooses one of the prompts of a StableToolBench checkout: give --stb-dir DIR too"),
    (["--simulator", "mirrorapi", "--sim-system-prompt", "FILE", "--stb-dir", "CHECKOUT"],
     "give --sim-system-prompt or --stb-dir, not both"),
    (["--simulator", "schema", "--mirrorapi-parse", "recover"],
     "--mirrorapi-parse and --mirrorapi-unknown are for the mirrorapi simulator, not schema"),
    (["--simulator", "llm", "--mirrorapi-unknown", "prompt"],
     "--mirrorapi-parse and --mirrorapi-unknown are for the mirrorapi simulator, not llm"),
])
def test_prompt_mistakes_stop_serve_before_it_is_ready(tmp_path, args, words):
    places = {"CHECKOUT": checkout(tmp_path / "StableToolBench"), "EMPTY": tmp_path / "empty",
              "BADTEMPLATE": tmp_path / "bad.txt", "FILE": tmp_path / "system.txt",
              "PLAINONLY": checkout(tmp_path / "old", f"SFT_SYSTEM = {PLAIN!r}\n")}
    places["EMPTY"].mkdir()
    places["BADTEMPLATE"].write_text("Play {tool}")
    places["FILE"].write_text("Be the API.")
    args = [str(places[a]) if a in places else a for a in args]
    done = subprocess.run([sys.executable, "-m", "stbproxy", "serve", "--port", "0", "--store",
                           str(tmp_path / "store"), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPENAI_API_KEY": "sk-x"})
    assert done.returncode != 0 and "ready" not in done.stdout
    assert words in done.stderr, done.stderr


# -- the simulator itself, against the OpenAI-compatible fake --------------------------------------

RECOVERED = {
    "well formed": ('{"error": "", "response": "{\\"status\\": \\"up\\"}"}', '{"status": "up"}', None),
    "code fence": ('```json\n{"error": "", "response": "up"}\n```', "up", "code fence"),
    "mechanism first": ('{"mechanism_of_the_api": "m", "error": "", "response": "up"}', "up",
                        "mechanism field left out"),
    "unclosed string": ('{"error": "", "response": "{\\"status\\": \\"u', '{"status": "u',
                        "members read one by one, unclosed string"),
    "trailing prose": ('{"error": "", "response": "up"} Let me know if you need more.', "up",
                       "text around the object left out"),
}


def run_simulation(server: FakeOpenAI, args: dict, store=None, doc=HEALTH, **settings):
    import asyncio

    from stbproxy.sim.config import SimulatorConfig
    from stbproxy.sim.simulators import build_simulator
    from stbproxy.synthesis.simulation import SimulationRequest

    config = SimulatorConfig(**{"name": "mirrorapi", "model": "mirror", "base_url": server.base_url, "api_key": "k",
                                "temperature": 0.2, "system_prompt": PLAIN, "max_retries": 0, **settings})
    simulator = build_simulator(config, None, store)
    ref = HEALTH.ref if doc is None else doc.ref
    job = SimulationRequest(Request("GET", "https://suivi-colis.p.rapidapi.com/health"), api_key(ref, args),
                            ref, "the API is down", doc=doc, args=args)

    async def once():
        try:
            return await simulator.simulate(job)
        finally:
            await simulator.aclose()
    return asyncio.run(once())


@pytest.mark.parametrize("name", list(RECOVERED))
def test_each_kind_of_reply_recovered_through_the_fake(name):
    reply, response, how = RECOVERED[name]
    with FakeOpenAI(lambda _request: reply) as server:
        made = run_simulation(server, {"verbose": True, "toolbench_key": TOOLBENCH_KEY}, mirrorapi_parse="recover")
        (asked,) = server.chat_requests()
    assert made.ok and made.response.body.decode() == response
    assert made.meta["simulator"] == "mirrorapi" and made.meta.get("recovered") == how
    assert asked == {"model": "mirror", "temperature": 0.2, "max_tokens": 2048, "seed": 42,
                     "messages": [{"role": "system", "content": PLAIN}, {"role": "user", "content": HEALTH_MESSAGE}]}


def test_a_reply_with_nothing_to_recover_is_asked_again_then_fails_with_recover():
    replies = iter(["Sorry, no.", "```\nnothing here\n```", "I am an API server."])
    with FakeOpenAI(lambda _request: next(replies)) as server:
        made = run_simulation(server, {"verbose": False}, mirrorapi_parse="recover")
        assert server.calls == 3
    assert not made.ok and made.meta["attempts"] == 3
    assert "no usable reply in 3 attempts" in made.response.body.decode()


def test_the_meta_says_who_made_the_answer_how_and_at_what_cost():
    # a hopeless first reply, then one in a fence, mechanism first, its closing brace lost
    replies = iter(["No idea.",
                    '```json\n{"mechanism_of_the_api": "m", "error": "", "response": "{\\"up\\": true}"\n```'])
    with FakeOpenAI(lambda _request: next(replies)) as server:
        made = run_simulation(server, {"verbose": True}, mirrorapi_parse="recover")
        first, second = server.chat_requests()
    assert made.ok and made.response.body == b'{"up": true}'
    meta = made.meta
    assert (meta["simulator"], meta["model"], meta["attempts"]) == ("mirrorapi", "mirror", 2)
    assert meta["recovered"] == "code fence, mechanism field left out, members read one by one"
    assert meta["prompt_tokens"] > 0 and meta["completion_tokens"] > 0
    assert first == second  # asked again the same way: seed 42, the same messages


def test_an_error_answer_keeps_its_text():
    with FakeOpenAI(lambda _request: '{"error": "Missing required parameter: city", "response": ""}') as server:
        made = run_simulation(server, {"verbose": True})
    assert made.ok and made.meta["error"] == "Missing required parameter: city"
    assert json.loads(made.response.body) == {"error": "Missing required parameter: city", "response": ""}


def test_the_seed_setting_replaces_the_trained_seed_but_not_the_token_limit():
    with FakeOpenAI(lambda _request: '{"error": "", "response": "up"}') as server:
        run_simulation(server, {"verbose": True}, seed=7, max_tokens=100)
        (asked,) = server.chat_requests()
    assert (asked["seed"], asked["max_tokens"]) == (7, 2048)


def test_a_mirrorapi_template_keeps_the_trained_settings_and_fills_the_examples(tmp_path):
    from stbproxy.models import Exchange, Response, Source

    with Store(tmp_path / "store") as store:
        store.put(Exchange(api_key(HEALTH.ref, {"verbose": "false"}), Request("GET", HEALTH.url + "?verbose=false"),
                           Response(200, (("Content-Type", "application/json"),), b'{"status": "up"}'),
                           Source.UPSTREAM, 0.0, api=HEALTH.ref))
        template = PromptTemplate.parse("[system]\nBe {{the}} API.\n[user]\n{examples}\n---\n{request}")
        with FakeOpenAI(lambda _request: "{'error': '', 'response': 'up'}") as server:
            made = run_simulation(server, {"verbose": True}, store=store, template=template, system_prompt=None,
                                  mirrorapi_parse="recover")
            (asked,) = server.chat_requests()
    assert made.ok and made.meta["recovered"] == "python literal"
    assert asked["messages"] == [{"role": "system", "content": "Be {the} API."},
                                 {"role": "user", "content": 'Call 1 arguments: {"verbose": "false"}\n'
                                                             'Call 1 answer: {"status": "up"}\n---\n'
                                                             "{'verbose': True}"}]
    assert (asked["seed"], asked["max_tokens"], "response_format" in asked) == (42, 2048, False)


def test_the_llm_simulator_takes_a_system_prompt_file_and_keeps_its_own_user_message(tmp_path):
    from stbproxy.sim.llm_prompt import build_messages

    with Store(tmp_path / "store") as store, FakeOpenAI(lambda _request: '{"error": "", "response": "up"}') as server:
        made = run_simulation(server, {"verbose": True}, store=store, name="llm", system_prompt="Play the API.")
        (asked,) = server.chat_requests()
    ours = build_messages(CallFacts(Request("GET", HEALTH.url), HEALTH, {"verbose": True}, ()), [])
    assert made.ok and made.meta["simulator"] == "llm"
    assert asked["messages"] == [{"role": "system", "content": "Play the API."}, ours[1]]
    assert asked["response_format"] == {"type": "json_object"} and "seed" not in asked


def settings(tmp_path: Path, **given):
    from stbproxy.settings import Settings

    return Settings(store=tmp_path / "store", simulator="mirrorapi", **given)


def test_serve_settings_read_the_prompt_the_user_chose(tmp_path):
    from stbproxy.runtime import system_prompt_of

    root = checkout(tmp_path / "StableToolBench")
    (tmp_path / "system.txt").write_text("From a file.\n")
    assert system_prompt_of(settings(tmp_path, stb_dir=root)) == PLAIN  # plain unless told
    assert system_prompt_of(settings(tmp_path, stb_dir=root, stb_prompt="cot")) == COT
    assert system_prompt_of(settings(tmp_path, sim_system_prompt=tmp_path / "system.txt")) == "From a file.\n"
    assert system_prompt_of(settings(tmp_path)) is None
    with pytest.raises(ConfigError, match="give --sim-system-prompt or --stb-dir, not both"):
        system_prompt_of(settings(tmp_path, stb_dir=root, sim_system_prompt=tmp_path / "system.txt"))
    with pytest.raises(ConfigError, match="--stb-prompt must be one of plain, cot"):
        system_prompt_of(settings(tmp_path, stb_dir=root, stb_prompt="fancy"))


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
