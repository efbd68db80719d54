"""Simulators: an answer for a call that the real API could not answer (the only importer of openai).

``LlmSimulator`` asks an OpenAI-compatible model to play the API (STB_FORMATS section 6):
the prompt carries the API's documentation, up to five stored examples of the same API
and the call's arguments, and the model must reply with one JSON object
``{"error": "", "response": ...}``. ``SchemaSimulator`` builds a deterministic answer
from the API's ``template_response`` with no network at all. ``OffSimulator`` refuses.

What an agent sees (``Simulation.response``) is what the API itself would have sent:
the ``response`` value as the body (JSON-encoded unless it is text, as
``bodies.api_body_response`` does for real ToolBench-style answers), with the model's
``error`` text kept in ``meta["error"]``. Only when the model answers an error and no
response is the whole ``{"error", "response"}`` object the body, so the agent still
reads why. ``meta`` holds ``simulator``, and for the LLM ``model``, ``prompt_tokens`` and
``completion_tokens`` (summed over attempts, since failed attempts cost too).

Secrets: a request may carry API keys. Prompts and logs are built from the redacted
request only, and never from headers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import importlib.util
import sys

from stbproxy import jsonsafe, keys
from stbproxy.stb.bodies import api_body_response, error_object_response
from stbproxy.stb.catalog import ApiDoc, Catalog, Param
from stbproxy.errors import ConfigError, StbError
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.models import Exchange, Request, Source
from stbproxy.redact import redact_request
from stbproxy.stb.api_requests import request_args
from stbproxy.sim.schema import virtual_answer
from stbproxy.sim.simulation import Simulation, SimulationRequest, Simulator

log = logging.getLogger("stbproxy")


def _lazy_import(name: str):
    """The module, loaded on first attribute use: openai takes ~0.5 s to import, which
    every `serve` would pay even when no LLM simulator is configured."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


openai = _lazy_import("openai")

KINDS = ("llm", "schema", "off")
DEFAULT_MODEL = "gpt-4o-mini"
MAX_ATTEMPTS = 3  # bad replies; transport errors are retried by the openai client itself
MAX_REPLY_CHARS = 64 * 1024  # far beyond a useful answer: a runaway model, not an API
EXAMPLE_SCAN_LIMIT = 200  # stored entries looked at per prefix (the scan runs on the event loop)
EXAMPLE_CACHE_SECONDS = 30.0  # examples picked for an API are reused this long
EXAMPLE_CACHE_SIZE = 4096  # APIs whose examples are remembered
CONNECTIONS_PER_CLIENT = 8  # LLM calls per HTTP client (see LlmSimulator.__init__)
MAX_BODY_IN_PROMPT = 2000  # request body shown for an endpoint without docs
REAL_SOURCES = frozenset({Source.UPSTREAM, Source.IMPORTED})


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulatorConfig:
    kind: str | None = None  # "llm", "schema", "off"; None lets choose_kind() decide
    model: str | None = None  # None: DEFAULT_MODEL
    temperature: float = 0.0
    max_tokens: int | None = 1024
    seed: int | None = None
    concurrency: int = 16  # LLM calls in flight at most
    timeout: float = 60.0  # seconds per LLM HTTP call
    max_retries: int = 2  # the openai client's own retries of transport errors, 429 and 5xx
    example_budget: int = 2048  # characters shared by all examples in a prompt
    max_examples: int = 5
    base_url: str | None = None  # None: the client reads OPENAI_BASE_URL
    api_key: str | None = None  # None: the client reads OPENAI_API_KEY

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise ConfigError(f"unknown simulator {self.kind!r}: choose one of {', '.join(KINDS)}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ConfigError(f"simulator temperature {self.temperature} must be between 0 and 2")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError("simulator max tokens must be 1 or more")
        if self.concurrency < 1:
            raise ConfigError("simulator concurrency must be 1 or more")
        if self.timeout <= 0:
            raise ConfigError("simulator timeout must be positive")
        if self.max_retries < 0 or self.max_examples < 0 or self.example_budget < 0:
            raise ConfigError("simulator retries, examples and example budget cannot be negative")

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODEL

    def llm_configured(self, env: Mapping[str, str] | None = None) -> bool:
        env = os.environ if env is None else env
        return bool(self.model or self.base_url or self.api_key
                    or env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"))

    def choose_kind(self, env: Mapping[str, str] | None = None) -> str:
        """The kind asked for, else "llm" when an LLM is configured, else the offline "schema"."""
        if self.kind is not None:
            return self.kind
        return "llm" if self.llm_configured(env) else "schema"


def build_simulator(config: SimulatorConfig, catalog: Catalog | None, store, *,
                    rules: KeyRules = DEFAULT_RULES) -> Simulator:
    """The simulator ``config`` asks for. ``rules`` must be the engine's, so that its extra
    secret fields stay out of prompts too."""
    kind = config.choose_kind()
    if kind == "off":
        return OffSimulator()
    if kind == "schema":
        return SchemaSimulator(catalog, store, rules=rules)
    return LlmSimulator(config, catalog, store, rules=rules)


# -- what every simulator needs: the API's docs, the call's arguments, stored examples -----------


@dataclass(frozen=True)
class CallFacts:
    """A call as a simulator may see it: redacted, no headers in anything it shows."""

    request: Request  # redacted
    doc: ApiDoc | None
    args: dict[str, Any]
    prefixes: tuple[str, ...]  # store prefixes holding answers of the same API or endpoint

    @property
    def name(self) -> str:
        """For logs and error texts."""
        return str(self.doc.ref) if self.doc else f"{self.request.method} {self.request.url}"


def call_facts(job: SimulationRequest, catalog: Catalog | None, rules: KeyRules) -> CallFacts:
    request = redact_request(job.request, rules)
    doc = catalog.get(job.api) if catalog is not None and job.api is not None else None
    if doc is None and catalog is not None:
        doc = _route(catalog, job.request)
    # The call's own key minus its digest is its API (api/...) or endpoint (http/...) prefix.
    prefixes = [job.key.rsplit("/", 1)[0] + "/"]
    if doc is not None and keys.api_prefix(doc.ref) not in prefixes:
        prefixes.insert(0, keys.api_prefix(doc.ref))
    args = _without_secrets(call_args(request, catalog), rules)
    return CallFacts(request, doc, args, tuple(prefixes))


def _route(catalog: Catalog, request: Request) -> ApiDoc | None:
    match = catalog.route(request.method, request.url, request.headers)
    return match.doc if match else None


def call_args(request: Request, catalog: Catalog | None) -> dict[str, Any]:
    """Query, body and (when the catalog routes the URL) path parameters.

    /virtual calls reach the engine as the real API's request, or as a stand-in whose JSON
    body is the arguments (api_requests.stored_request), so both read the same way.
    """
    args = request_args(request)
    match = catalog.route(request.method, request.url, request.headers) if catalog else None
    if match is not None:
        args.update(match.path_params)
    return args


def _without_secrets(args: dict[str, Any], rules: KeyRules) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k.lower() not in rules.secret_fields}


def stored_examples(store, facts: CallFacts, skip_key: str, limit: int) -> list[Exchange]:
    """Up to ``limit`` stored answers of the same API: real ones first, then simulated ones.

    Error answers (HTTP >= 400) teach nothing about the API's content and are left out.
    """
    real: list[Exchange] = []
    simulated: list[Exchange] = []
    seen: set[str] = {skip_key}
    for prefix in facts.prefixes:
        try:
            for n, ex in enumerate(store.scan(prefix)):
                if n >= EXAMPLE_SCAN_LIMIT or len(real) >= limit:
                    break
                # "http/h/GET/a/" also prefixes "http/h/GET/a/b/...": keep the same endpoint only.
                if ex.key in seen or ex.key.rsplit("/", 1)[0] + "/" != prefix or ex.response.status >= 400:
                    continue
                seen.add(ex.key)
                if ex.source in REAL_SOURCES:
                    real.append(ex)
                elif ex.source is Source.SIMULATED:
                    simulated.append(ex)
        except StbError as exc:  # a damaged entry: simulate with what was found so far
            log.warning("simulator: scanning stored examples under %s stopped: %s", prefix, exc)
    return (real + simulated)[:limit]


class ExampleCache:
    """``stored_examples`` remembered per API for a while.

    Scanning and decoding up to a few hundred entries takes milliseconds on the event loop
    that also serves cache hits; examples need not be fresher than this.
    """

    def __init__(self, store, limit: int) -> None:
        self.store = store
        self.limit = limit
        self._picked: dict[tuple[str, ...], tuple[float, list[Exchange]]] = {}

    def get(self, facts: CallFacts, key: str) -> list[Exchange]:
        now = time.monotonic()
        cached = self._picked.get(facts.prefixes)
        if cached is None or cached[0] < now:
            if len(self._picked) >= EXAMPLE_CACHE_SIZE:
                self._picked.clear()
            picked = stored_examples(self.store, facts, key, self.limit + 1)  # a spare for the skip below
            cached = self._picked[facts.prefixes] = (now + EXAMPLE_CACHE_SECONDS, picked)
        return [ex for ex in cached[1] if ex.key != key][: self.limit]


def fit_examples(examples: list[tuple[str, str]], budget: int) -> list[tuple[str, str]]:
    """(input, output) texts trimmed so that all of them together fit in ``budget`` characters.

    Short examples keep their full text and leave their unused share to longer ones; an
    input takes at most half of its share, so every example keeps some of its output.
    """
    fitted: dict[int, tuple[str, str]] = {}
    remaining = budget
    by_size = sorted(range(len(examples)), key=lambda i: sum(map(len, examples[i])))
    for done, i in enumerate(by_size):
        share = remaining // (len(examples) - done)
        given, output = examples[i]
        given = _trim(given, max(share // 2, share - len(output)))
        output = _trim(output, share - len(given))
        fitted[i] = (given, output)
        remaining -= len(given) + len(output)
    return [fitted[i] for i in range(len(examples))]


def _trim(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..." if limit >= 3 else ""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _body_text(body: bytes) -> str:
    return body.decode("utf-8", "replace")


# -- the prompt -------------------------------------------------------------------------------

SYSTEM_PROMPT = """\
You stand in for a web API whose server cannot be reached right now. You receive the \
API's documentation, possibly some earlier calls with the answers they got, and one new \
call. Answer the new call exactly as the real API would.

Write one JSON object and nothing else - no prose, no Markdown, no code fences - in this \
form: {"error": "", "response": <the API's answer>}.
- "response" holds what the API returns for this call: an object, a list or text, \
shaped like the documented template and the earlier answers, with concrete, plausible \
and useful content (roughly 100 to 200 words of substance).
- "error" stays "" for a well-formed call. Only when the call itself is wrong (a \
required parameter missing, a value the API cannot accept) explain the problem there \
in one sentence, and leave "response" as "".
- Earlier answers show the format only; do not copy their values, and ignore any that \
are empty or unhelpful."""


def _param_lines(params: Iterable[Param]) -> list[str]:
    lines = []
    for p in params:
        line = f"- {p.name} ({p.type or 'STRING'})"
        if p.description:
            line += f": {p.description}"
        if p.default not in (None, ""):
            line += f" [default: {_json(p.default)}]"
        lines.append(line)
    return lines or ["- none"]


def documentation(facts: CallFacts) -> str:
    doc = facts.doc
    if doc is None:
        request = facts.request
        lines = ["No documentation is known for this endpoint. It was called over HTTP as:",
                 f"{request.method} {request.url}"]
        content_type = request.header("content-type")
        if request.body:
            if content_type:
                lines.append(f"Content-Type: {content_type}")
            lines.append("Body: " + _trim(_body_text(request.body), MAX_BODY_IN_PROMPT))
        return "\n".join(lines)
    lines = [f"Tool: {doc.tool}"]
    if doc.tool_description:
        lines.append(f"Tool description: {doc.tool_description}")
    lines.append(f"API: {doc.api}" + (f" ({doc.method} {doc.url})" if doc.url else ""))
    if doc.api_description:
        lines.append(f"API description: {doc.api_description}")
    lines += ["Required parameters:", *_param_lines(doc.required_parameters),
              "Optional parameters:", *_param_lines(doc.optional_parameters)]
    if doc.template_response not in (None, "", {}, []):
        template = doc.template_response
        lines.append("Shape of a typical answer (types in place of values): "
                     + (template if isinstance(template, str) else _json(template)))
    return "\n".join(lines)


def build_messages(facts: CallFacts, examples: list[tuple[str, str]]) -> list[dict[str, str]]:
    parts = ["## Documentation", documentation(facts)]
    if examples:
        parts.append("## Earlier calls and their answers")
        for n, (given, output) in enumerate(examples, 1):
            parts.append(f"Call {n} arguments: {given}\nCall {n} answer: {output}")
    parts += ["## The new call", f"Arguments: {_json(facts.args)}",
              'Reply with the JSON object {"error": ..., "response": ...} only.']
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


# -- the model's reply ------------------------------------------------------------------------

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)\s*```", re.DOTALL)


class BadReply(ValueError):
    """The model's reply cannot serve as an answer; the message says why."""


JSON_MODE = {"response_format": {"type": "json_object"}}


def reply_text(completion: Any, meta: dict[str, Any]) -> str | None:
    """The assistant text of a chat completion (parsed JSON); its model and tokens go to meta."""
    if not isinstance(completion, dict):
        raise BadReply(f"the backend answered {type(completion).__name__}, not a chat completion")
    usage = completion.get("usage") if isinstance(completion.get("usage"), dict) else {}
    meta["model"] = completion.get("model") or meta["model"]
    for name in ("prompt_tokens", "completion_tokens"):
        meta[name] += usage.get(name) if isinstance(usage.get(name), int) else 0
    try:
        content = completion["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise BadReply("the backend's reply has no message content") from None
    if content is not None and not isinstance(content, str):
        raise BadReply("the backend's message content is not text")
    return content


def parse_reply(text: str | None) -> tuple[str, Any]:
    """(error, response) of a reply, or BadReply."""
    if text is None or not text.strip():
        raise BadReply("empty reply")
    if len(text) > MAX_REPLY_CHARS:
        raise BadReply(f"reply of {len(text)} characters is over the {MAX_REPLY_CHARS}-character cap")
    fenced = _FENCE.search(text)
    body = (fenced.group(1) if fenced else text).strip()
    try:
        value = jsonsafe.loads(body)
    except ValueError:
        # Models sometimes wrap the object in a sentence: try the outermost braces.
        start, end = body.find("{"), body.rfind("}")
        try:
            value = jsonsafe.loads(body[start:end + 1]) if 0 <= start < end else None
        except ValueError:
            value = None
        if value is None:
            raise BadReply(f"reply is not JSON: {_trim(text.strip(), 80)!r}") from None
    if not isinstance(value, dict) or "error" not in value or "response" not in value:
        shape = sorted(value)[:5] if isinstance(value, dict) else type(value).__name__
        raise BadReply(f"reply is not an object with 'error' and 'response' (got {shape})")
    error, response = value["error"], value["response"]
    error = "" if error is None else error if isinstance(error, str) else _json(error)
    if not error and response in ("", None):
        raise BadReply("reply has neither a response nor an error")
    return error, response


def answer_response(error: str, response: Any):
    """The HTTP answer an agent sees for a parsed reply (see the module docstring)."""
    if error and response in ("", None):
        return api_body_response({"error": error, "response": ""})
    return api_body_response(response)


# -- the LLM simulator ------------------------------------------------------------------------


class LlmSimulator:
    """Asks an OpenAI-compatible chat model to answer as the API would.

    Everything runs on the caller's event loop, the one that also serves cache hits, so
    the per-call work is kept small: examples are picked once per API for a while, replies
    stay plain JSON, and calls are spread over small clients.
    """

    def __init__(self, config: SimulatorConfig, catalog: Catalog | None, store, *,
                 rules: KeyRules = DEFAULT_RULES) -> None:
        self.config = config
        self.catalog = catalog
        self.rules = rules
        self.model = config.model_name
        self._slots = asyncio.Semaphore(config.concurrency)
        self._examples = ExampleCache(store, config.max_examples)
        self._json_mode = True  # until the backend refuses response_format
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
        meta: dict[str, Any] = {"simulator": "llm", "model": self.model, "prompt_tokens": 0,
                                "completion_tokens": 0}
        name = str(job.api) if job.api else job.key
        try:
            facts = call_facts(job, self.catalog, self.rules)
            name = facts.name
            found = self._examples.get(facts, job.key)
            pairs = [(_json(_without_secrets(call_args(ex.request, self.catalog), self.rules)),
                      _body_text(ex.response.body)) for ex in found]
            messages = build_messages(facts, fit_examples(pairs, self.config.example_budget))
            async with self._slots:
                return await self._ask(messages, name, meta)
        except openai.OpenAIError as exc:
            reason = llm_error_reason(exc, self.config.timeout)
        except Exception as exc:  # a bug must not take the proxy's answer away
            log.exception("simulator: unexpected failure for %s", name)
            reason = f"internal error ({type(exc).__name__})"
        log.warning("simulation of %s failed: %s", name, reason)
        return Simulation(error_object_response(f"Failed to simulate {name}: {reason}"), ok=False, meta=meta)

    async def _ask(self, messages: list[dict[str, str]], name: str, meta: dict[str, Any]) -> Simulation:
        """Up to MAX_ATTEMPTS calls until a reply parses; openai errors propagate."""
        reason = ""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            completion = await self._complete(messages)
            try:
                text = reply_text(completion, meta)
                error, response = parse_reply(text)
            except BadReply as exc:
                reason = str(exc)
                log.warning("simulation of %s: attempt %d/%d gave a bad reply: %s", name, attempt, MAX_ATTEMPTS,
                            reason)
                continue
            meta["attempts"] = attempt
            if error:
                meta["error"] = error
            return Simulation(answer_response(error, response), ok=True, meta=meta)
        meta["attempts"] = MAX_ATTEMPTS
        reason = f"no usable reply in {MAX_ATTEMPTS} attempts (last: {reason})"
        log.warning("simulation of %s failed: %s", name, reason)
        return Simulation(error_object_response(f"Failed to simulate {name}: {reason}"), ok=False, meta=meta)

    async def _complete(self, messages: list[dict[str, str]]):
        request: dict[str, Any] = {"model": self.model, "messages": messages,
                                   "temperature": self.config.temperature}
        if self.config.max_tokens is not None:
            request["max_tokens"] = self.config.max_tokens
        if self.config.seed is not None:
            request["seed"] = self.config.seed
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
        return f"the LLM backend answered HTTP {exc.status_code}" + (f": {_trim(str(message), 200)}" if message else "")
    return f"LLM client error ({type(exc).__name__})"


# -- offline simulators -----------------------------------------------------------------------


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
        template = facts.doc.template_response if facts.doc else None
        example = None
        if template in (None, "", {}, []):
            real = [ex for ex in self._examples.get(facts, job.key) if ex.source in REAL_SOURCES]
            example = _parsed(real[0].response.body) if real else None
        answer = virtual_answer(template, job.key, example)
        return Simulation(api_body_response(answer["response"]), ok=True, meta={"simulator": "schema"})


def _parsed(body: bytes) -> Any:
    try:
        return jsonsafe.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _body_text(body)


class OffSimulator:
    """``--simulator off``: a clear error object instead of an invented answer."""

    async def aclose(self) -> None:
        pass

    async def simulate(self, job: SimulationRequest) -> Simulation:
        return Simulation(
            error_object_response(f"The real API is unavailable ({job.reason}) and simulation is off "
                                  "(--simulator off)."),
            ok=False, meta={"simulator": "off"}, attempted=False)
