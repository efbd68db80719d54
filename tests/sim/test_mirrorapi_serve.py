"""A real `stbproxy serve` with StableToolBench's trained simulator (MirrorAPI) or a prompt
template, against the OpenAI-compatible fake: replies read leniently (--mirrorapi-parse recover)
and bad ones asked again, the prompt a model was trained on, error answers served as
StableToolBench serves them, and prompt mistakes stopping serve before it is ready."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import requests

from stbproxy.store.embedded import Store
from tests.fakes.fake_openai import FakeOpenAI
from tests.servers import ProxyProcess
from tests.sim.mirrorapi_helpers import (
    COT,
    HEALTH_MESSAGE,
    PLAIN,
    TOOLBENCH_KEY,
    checkout,
    health,
    tools_store,
)
from tests.stb_client import stb_client

# -- a real proxy ------------------------------------------------------------------------------------


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
