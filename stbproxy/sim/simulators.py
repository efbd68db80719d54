"""The simulators, and ``build_simulator``, which picks one for a ``SimulatorConfig``.

A simulator gives an answer for a call that the real API could not answer.
``LlmSimulator`` (llm_simulator.py, the only importer of openai) asks an OpenAI-compatible
model to play the API, in stbproxy's prompt (``llm``), in the one StableToolBench's trained
MirrorAPI model expects (``mirrorapi``), or in a template of the user's (dialects.py).
``SchemaSimulator`` builds a deterministic answer from the API's documented answer schema
(from_schema.py) or ``template_response``, with no network at all. ``OffSimulator``
refuses. All see a call through call_facts.py: redacted, and never its headers.
"""

from __future__ import annotations

from typing import Any

from stbproxy import jsonsafe
from stbproxy.errors import ConfigError
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.sim import dialects
from stbproxy.sim.call_facts import REAL_SOURCES, ExampleCache, body_text, call_facts
from stbproxy.sim.config import MODEL_SIMULATORS, SimulatorConfig
from stbproxy.sim.llm_simulator import LlmSimulator
from stbproxy.stb.bodies import api_body_response, error_object_response
from stbproxy.stb.catalog import Catalog
from stbproxy.synthesis.from_schema import value_for
from stbproxy.synthesis.simulation import Simulation, SimulationRequest, Simulator
from stbproxy.synthesis.templates import virtual_answer


def build_simulator(config: SimulatorConfig, catalog: Catalog | None, store, *,
                    rules: KeyRules = DEFAULT_RULES) -> Simulator:
    """The simulator ``config`` asks for. ``rules`` must be the engine's, so that its extra
    secret fields stay out of prompts too."""
    name = config.chosen()
    if name not in MODEL_SIMULATORS and (config.template is not None or config.system_prompt is not None):
        raise ConfigError(f"prompt options (--sim-prompt, --sim-system-prompt, --stb-dir) are for the llm and "
                          f"mirrorapi simulators, not {name}", setting="simulator")
    if name != "mirrorapi" and not config.mirrorapi_defaults:  # else they would silently do nothing
        raise ConfigError(f"--mirrorapi-parse and --mirrorapi-unknown are for the mirrorapi simulator, not {name}",
                          setting="simulator")
    if name == "off":
        return OffSimulator()
    if name == "schema":
        return SchemaSimulator(catalog, store, rules=rules)
    return LlmSimulator(config, catalog, store, rules=rules, dialect=dialect_for(name, config))


def dialect_for(name: str, config: SimulatorConfig) -> dialects.Dialect:
    """How the ``llm`` or ``mirrorapi`` simulator speaks to its model, with the user's prompts."""
    rules = (config.mirrorapi_parse, config.mirrorapi_unknown)
    system, template = config.system_prompt, config.template
    if template is not None:
        if name == "mirrorapi" and system is None and template.system is None:
            raise _no_trained_prompt()
        return dialects.templated(name, template, system, *rules)
    if name == "mirrorapi":
        if system is None:
            raise _no_trained_prompt()
        return dialects.mirrorapi(system, *rules)
    return dialects.llm(system)


def _no_trained_prompt() -> ConfigError:
    return ConfigError("the mirrorapi simulator needs the system prompt its model was trained on: give "
                       "--stb-dir DIR (your StableToolBench checkout; --stb-prompt plain|cot chooses the "
                       "prompt) or --sim-system-prompt FILE", setting="simulator")


class SchemaSimulator:
    """Deterministic answers from the API's template_response, or the shape of a stored real
    answer, or a small generic object: the same request gets the same bytes (seeded by its key)."""

    def __init__(self, catalog: Catalog | None, store, *, rules: KeyRules = DEFAULT_RULES) -> None:
        self.catalog = catalog
        self.rules = rules
        self._examples = ExampleCache(store, 1)

    async def aclose(self) -> None:
        pass

    async def simulate(self, job: SimulationRequest) -> Simulation:
        facts = call_facts(job, self.catalog, self.rules)
        if facts.doc is not None and facts.doc.output_schema is not None:  # the answer's documented shape
            value = value_for(facts.doc.output_schema, job.seed)
            return Simulation(api_body_response(value), ok=True, meta={"simulator": "schema"})
        template = facts.doc.template_response if facts.doc else None
        example = None
        if template in (None, "", {}, []):
            real = [ex for ex in self._examples.get(facts, job.key) if ex.source in REAL_SOURCES]
            example = _parsed(real[0].response.body) if real else None
        answer = virtual_answer(template, job.seed, example)
        return Simulation(api_body_response(answer["response"]), ok=True, meta={"simulator": "schema"})


def _parsed(body: bytes) -> Any:
    try:
        return jsonsafe.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body_text(body)


class OffSimulator:
    """``--simulator off``: a clear error object instead of an invented answer."""

    async def aclose(self) -> None:
        pass

    async def simulate(self, job: SimulationRequest) -> Simulation:
        return Simulation(
            error_object_response(f"The real API is unavailable ({job.reason}) and simulation is off "
                                  "(--simulator off)."),
            ok=False, meta={"simulator": "off"}, attempted=False)
