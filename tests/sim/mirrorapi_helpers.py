"""What the MirrorAPI tests share: made-up system prompts and a StableToolBench checkout holding
them, the Health API and the user message StableToolBench's server writes for it, a store whose
catalog knows that API, a /virtual call of it, and one simulation against the OpenAI-compatible
fake."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from stbproxy.keys import api_key
from stbproxy.models import Request
from stbproxy.stb.catalog import ApiDoc, Param
from tests.fakes.fake_openai import FakeOpenAI
from tests.stb_client import stb_call

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
