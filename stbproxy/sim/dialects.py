"""How a simulator model is spoken to (``Dialect``): the messages one call becomes, how its
replies are read, the request settings its training fixed, and whether what it cannot
answer is failed as StableToolBench's MirrorAPI server fails it. The ``llm`` simulator's own
(llm_prompt.py), StableToolBench's MirrorAPI (mirror_api.py), and any model's template
(prompt_file.py). Pure: LlmSimulator (llm_simulator.py) sends what a dialect makes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from stbproxy.sim import mirror_api
from stbproxy.sim.call_facts import CallFacts
from stbproxy.sim.llm_prompt import build_messages, parse_reply
from stbproxy.sim.prompt_file import PromptTemplate

Examples = list[tuple[str, str]]  # (arguments, answer) texts of stored calls of the same API


@dataclass(frozen=True)
class Dialect:
    name: str  # what a simulated answer's meta calls its simulator
    messages: Callable[[CallFacts, Examples], list[dict[str, str]]]
    read: Callable[[str | None], tuple[str, Any, list[str]]]  # (error, response, how it was recovered)
    uses_examples: bool = True
    json_mode: bool = True  # ask for response_format json_object (until the backend refuses it)
    seed: int | None = None  # when the settings name none
    max_tokens: int | None = None  # None: the settings'
    attempts: int | None = None  # replies asked for until one reads; None: the simulator's own (3)
    # Answers and failures as StableToolBench's MirrorAPI server gives them (read_reply_stb's
    # answers; NO_ANSWER for a reply without them; its HTTP 500 where it fails).
    stb_server: bool = False
    refuses_unknown: bool = False  # an API StableToolBench's tool docs do not hold: its HTTP 500, unasked


def _strict_read(text: str | None) -> tuple[str, Any, list[str]]:
    error, response = parse_reply(text)
    return error, response, []


def llm(system: str | None = None) -> Dialect:
    """stbproxy's own prompt (documentation, examples, the call), with another system prompt if given."""
    if system is None:
        return Dialect("llm", build_messages, _strict_read)
    return Dialect("llm", lambda facts, examples: _with_system(build_messages(facts, examples), system),
                   _strict_read)


def mirrorapi(system: str, parse: str = "stb", unknown: str = "fail") -> Dialect:
    """The request StableToolBench's MirrorAPI server sends its model, and nothing else."""
    return Dialect(
        "mirrorapi",
        lambda facts, _examples: [{"role": "system", "content": system},
                                  {"role": "user", "content": mirror_api.user_message(facts)}],
        uses_examples=False, json_mode=False, seed=mirror_api.SEED, max_tokens=mirror_api.MAX_TOKENS,
        **_mirrorapi_rules(parse, unknown))


def templated(name: str, template: PromptTemplate, system: str | None, parse: str = "recover",
              unknown: str = "prompt") -> Dialect:
    """A model's own prompt; its replies read as leniently as MirrorAPI's (a model trained on
    another prompt need not write clean JSON). MirrorAPI's seed, token limit and rules stay with it."""
    fixed = {"seed": mirror_api.SEED, "max_tokens": mirror_api.MAX_TOKENS, **_mirrorapi_rules(parse, unknown)} \
        if name == "mirrorapi" else {"read": mirror_api.read_reply}
    return Dialect(name, lambda facts, examples: template.messages(facts, examples, system), json_mode=False,
                   **fixed)


def _mirrorapi_rules(parse: str, unknown: str) -> dict[str, Any]:
    """--mirrorapi-parse stb: replies read as StableToolBench's server reads them, once, and
    what it cannot answer failed as it fails; --mirrorapi-unknown fail: no call for an API its
    tool docs do not hold."""
    rules: dict[str, Any] = {"refuses_unknown": unknown == "fail", "read": mirror_api.read_reply}
    if parse == "stb":
        rules.update(read=mirror_api.read_reply_stb, attempts=1, stb_server=True)
    return rules


def _with_system(messages: list[dict[str, str]], system: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system} if m["role"] == "system" else m for m in messages]

