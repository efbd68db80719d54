"""The MirrorAPI simulator itself, against the OpenAI-compatible fake: each kind of reply recovered
(--mirrorapi-parse recover), hopeless replies asked again then failed, what the meta says of an
answer, the trained settings kept or replaced, templates and system prompt files, and the prompt
serve's settings choose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stbproxy.errors import ConfigError
from stbproxy.keys import api_key
from stbproxy.models import Request
from stbproxy.sim.call_facts import CallFacts
from stbproxy.sim.prompt_file import PromptTemplate
from stbproxy.store.embedded import Store
from tests.fakes.fake_openai import FakeOpenAI
from tests.sim.mirrorapi_helpers import (
    COT,
    HEALTH,
    HEALTH_MESSAGE,
    PLAIN,
    TOOLBENCH_KEY,
    checkout,
    run_simulation,
)

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
