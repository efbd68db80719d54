"""``LlmSimulator``: asks an OpenAI-compatible chat model to play the API (the only importer
of openai). What it says to the model and how it reads the replies is its dialect's
(dialects.py): stbproxy's own prompt (llm_prompt.py), StableToolBench's MirrorAPI, or a
template.

A simulation's ``meta`` holds ``simulator`` (the dialect's name), ``model``,
``prompt_tokens`` and ``completion_tokens`` (summed over attempts, since failed attempts
cost too), ``attempts``, the model's ``error`` text when it gave one, and ``recovered``
when a malformed reply was read leniently (how). Where StableToolBench's MirrorAPI server
would fail (a dialect with ``stb_server`` or ``refuses_unknown``), the simulation fails as
its HTTP 500, ``virtual_status`` 500 in its meta and the cause in ``cause``. Prompts and logs
are built from the redacted request only, and never from headers (call_facts.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from stbproxy.errors import ConfigError
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.sim import dialects, mirror_api
from stbproxy.sim.call_facts import ExampleCache, call_facts
from stbproxy.sim.config import SimulatorConfig
from stbproxy.sim.dialects import Dialect
from stbproxy.sim.llm_prompt import BadReply, answer_response, example_pairs, fit_examples, reply_text, trim
from stbproxy.sim.mirror_api import ServerFailure
from stbproxy.stb.bodies import VIRTUAL_STATUS, error_object_response
from stbproxy.stb.catalog import Catalog
from stbproxy.synthesis.simulation import Simulation, SimulationRequest

log = logging.getLogger("stbproxy")


def _lazy_import(name: str) -> ModuleType:
    """The module, loaded on first attribute use: openai takes ~0.5 s to import, which
    every `serve` would pay even when no LLM simulator is configured."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import openai
else:
    openai = _lazy_import("openai")

MAX_ATTEMPTS = 3  # bad replies; transport errors are retried by the openai client itself
CONNECTIONS_PER_CLIENT = 8  # LLM calls per HTTP client (see LlmSimulator.__init__)
JSON_MODE = {"response_format": {"type": "json_object"}}


class LlmSimulator:
    """Asks an OpenAI-compatible chat model to answer as the API would.

    Everything runs on the caller's event loop, the one that also serves cache hits, so
    the per-call work is kept small: examples are picked once per API for a while, replies
    stay plain JSON, and calls are spread over small clients.
    """

    def __init__(self, config: SimulatorConfig, catalog: Catalog | None, store, *,
                 rules: KeyRules = DEFAULT_RULES, dialect: Dialect | None = None) -> None:
        self.config = config
        self.catalog = catalog
        self.rules = rules
        self.dialect = dialect or dialects.llm()
        self.model = config.model_name
        self._slots = asyncio.Semaphore(config.concurrency)
        self._examples = ExampleCache(store, config.max_examples)
        self._json_mode = self.dialect.json_mode  # until the backend refuses response_format
        api_key = config.api_key
        if api_key is None and not os.environ.get("OPENAI_API_KEY") and (
                config.base_url or os.environ.get("OPENAI_BASE_URL")):
            api_key = "unused"  # self-hosted backends (vLLM, llama.cpp) often need no key
        # httpcore's pool does work per request that grows with its number of connections
        # (encode/httpcore#1035): spread the calls over several small clients.
        shards = -(-config.concurrency // CONNECTIONS_PER_CLIENT)
        try:
            self._clients = [openai.AsyncOpenAI(api_key=api_key, base_url=config.base_url, timeout=config.timeout,
                                                max_retries=config.max_retries) for _ in range(shards)]
        except openai.OpenAIError as exc:
            raise ConfigError("the LLM simulator needs OPENAI_API_KEY (or OPENAI_BASE_URL for a "
                              "backend without keys); or use --simulator schema") from exc
        self._busy = [0] * shards  # calls in flight per client

    async def aclose(self) -> None:
        for client in self._clients:
            await client.close()

    async def simulate(self, job: SimulationRequest) -> Simulation:
        meta: dict[str, Any] = {"simulator": self.dialect.name, "model": self.model, "prompt_tokens": 0,
                                "completion_tokens": 0}
        name = str(job.api) if job.api else job.key
        try:
            facts = call_facts(job, self.catalog, self.rules)
            name = facts.name
            if self.dialect.refuses_unknown and not mirror_api.stb_finds(facts):
                return _server_failure(name, "StableToolBench's server finds no such API in its tool docs", meta)
            pairs = []
            if self.dialect.uses_examples:
                pairs = example_pairs(self._examples.get(facts, job.key), self.catalog, self.rules)
            messages = self.dialect.messages(facts, fit_examples(pairs, self.config.example_budget))
            async with self._slots:
                return await self._ask(messages, name, meta, virtual=self._as_virtual_server(job))
        except openai.OpenAIError as exc:
            reason = llm_error_reason(exc, self.config.timeout)
            if self.dialect.stb_server or self._as_virtual_server(job):
                return _server_failure(name, reason, meta)
        except Exception as exc:  # a bug must not take the proxy's answer away
            log.exception("simulator: unexpected failure for %s", name)
            reason = f"internal error ({type(exc).__name__})"
        log.warning("simulation of %s failed: %s", name, reason)
        return Simulation(error_object_response(f"Failed to simulate {name}: {reason}"), ok=False, meta=meta)

    def _as_virtual_server(self, job: SimulationRequest) -> bool:
        """Whether this simulation fails as StableToolBench's virtual server (main.py) fails
        its own: a /virtual call simulated by a model with stbproxy's prompt or a template
        (mirrorapi's dialect says for itself). Its client then sees the same failure."""
        return job.names is not None and self.dialect.name != "mirrorapi"

    async def _ask(self, messages: list[dict[str, str]], name: str, meta: dict[str, Any], *,
                   virtual: bool = False) -> Simulation:
        """Up to the dialect's attempts until a reply reads; openai errors propagate.
        ``virtual``: no usable reply is answered as StableToolBench's server answers it."""
        reason = ""
        attempts = self.dialect.attempts or MAX_ATTEMPTS
        for attempt in range(1, attempts + 1):
            completion = await self._complete(messages)
            meta["attempts"] = attempt
            try:
                error, response, how = self._read(completion, meta)
            except ServerFailure as exc:
                return _server_failure(name, str(exc), meta)
            except BadReply as exc:
                reason = str(exc)
                log.warning("simulation of %s: attempt %d/%d gave a bad reply: %s", name, attempt, attempts, reason)
                continue
            if how:
                meta["recovered"] = ", ".join(how)
            if self.dialect.stb_server:  # the answer object as that server gives it, member for member
                body, kept = mirror_api.stb_answer(error, response)
                return Simulation(body, ok=True, meta={**meta, **kept})
            if error:
                meta["error"] = error
            return Simulation(answer_response(error, response), ok=True, meta=meta)
        if self.dialect.stb_server or virtual:
            log.warning("simulation of %s: %s; answered %r, as StableToolBench's server does", name, reason,
                        mirror_api.NO_ANSWER)
            return Simulation(error_object_response(mirror_api.NO_ANSWER), ok=False, meta=meta)
        reason = f"no usable reply in {attempts} attempts (last: {reason})"
        log.warning("simulation of %s failed: %s", name, reason)
        return Simulation(error_object_response(f"Failed to simulate {name}: {reason}"), ok=False, meta=meta)

    def _read(self, completion: Any, meta: dict[str, Any]) -> tuple[Any, Any, list[str]]:
        """(error, response, how) of a completion; a completion without a message is a failure
        of StableToolBench's server, for a dialect that answers as it does."""
        try:
            text = reply_text(completion, meta)
        except BadReply as exc:
            raise (ServerFailure(str(exc)) if self.dialect.stb_server else exc) from None
        return self.dialect.read(text)

    async def _complete(self, messages: list[dict[str, str]]):
        # Members in the order of the openai client's chat.completions.create(), as
        # StableToolBench's server sends them: the same request is the same bytes.
        request: dict[str, Any] = {"messages": messages, "model": self.model}
        max_tokens = self.dialect.max_tokens or self.config.max_tokens
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        seed = self.config.seed if self.config.seed is not None else self.dialect.seed
        if seed is not None:
            request["seed"] = seed
        request["temperature"] = self.config.sampling_temperature
        shard = self._busy.index(min(self._busy))  # the least busy client
        self._busy[shard] += 1
        try:
            return await self._post(self._clients[shard], request)
        finally:
            self._busy[shard] -= 1

    async def _post(self, client: openai.AsyncOpenAI, request: dict[str, Any]) -> Any:
        # The client's generic post (its retries, timeouts and error types) with the reply
        # left as parsed JSON: chat.completions.create() walks every message through type
        # introspection and builds pydantic objects, which doubles the CPU a call costs.
        if not self._json_mode:
            return await client.post("/chat/completions", body=request, cast_to=object)
        try:
            return await client.post("/chat/completions", body=request | JSON_MODE, cast_to=object)
        except openai.BadRequestError as exc:
            log.info("simulator: the LLM backend refused JSON mode (HTTP %s); asking without it",
                     exc.status_code)
        completion = await client.post("/chat/completions", body=request, cast_to=object)
        # Only now is it clear the 400 was about JSON mode and not the request itself.
        self._json_mode = False
        return completion


def _server_failure(name: str, cause: str, meta: dict[str, Any]) -> Simulation:
    """Where StableToolBench's MirrorAPI server fails: its HTTP 500, never stored."""
    log.warning("simulation of %s: %s; answered HTTP 500, as StableToolBench's server does", name, cause)
    return Simulation(mirror_api.SERVER_ERROR, ok=False, meta={**meta, VIRTUAL_STATUS: 500, "cause": cause})


def llm_error_reason(exc: openai.OpenAIError, timeout: float) -> str:
    """A short, secret-free reason for a failed LLM call."""
    if isinstance(exc, openai.APITimeoutError):
        return f"the LLM backend did not answer within {timeout:g} s"
    if isinstance(exc, openai.APIConnectionError):
        return "cannot connect to the LLM backend"
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code in (401, 403):  # their messages may quote part of the key
            return f"the LLM backend refused the credentials (HTTP {exc.status_code})"
        message = exc.body.get("message") if isinstance(exc.body, dict) else None
        return f"the LLM backend answered HTTP {exc.status_code}" + (f": {trim(str(message), 200)}" if message else "")
    return f"LLM client error ({type(exc).__name__})"
