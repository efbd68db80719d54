"""What an LLM simulator says to the model and how it reads the reply (STB_FORMATS section 6).

The prompt carries the API's documentation, up to five stored examples of the same API
(trimmed to a shared budget) and the call's arguments, and the model must reply with one
JSON object ``{"error": "", "response": ...}``.

What an agent sees (``answer_response``) is what the API itself would have sent: the
``response`` value as the body (JSON-encoded unless it is text, as
``bodies.api_body_response`` does for real ToolBench-style answers), with the model's
``error`` text kept by the simulator in ``meta["error"]``. Only when the model answers an
error and no response is the whole ``{"error", "response"}`` object the body, so the
agent still reads why. Pure: no network, no openai.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from stbcore.tool_calls import answer_text
from stbproxy import jsonsafe
from stbproxy.keys import KeyRules
from stbproxy.models import Exchange
from stbproxy.sim.call_facts import CallFacts, body_text, call_args, wire_call, without_secrets
from stbproxy.stb.api_requests import request_args
from stbproxy.stb.bodies import api_body_response
from stbproxy.stb.catalog import Catalog, Param

MAX_REPLY_CHARS = 64 * 1024  # far beyond a useful answer: a runaway model, not an API
MAX_BODY_IN_PROMPT = 2000  # request body shown for an endpoint without docs
MAX_SCHEMA_IN_PROMPT = 4000  # an MCP tool's inputSchema or outputSchema


# -- examples ---------------------------------------------------------------------------------


def example_pairs(found: list[Exchange], catalog: Catalog | None, rules: KeyRules) -> list[tuple[str, str]]:
    """(arguments, answer) texts of stored exchanges, without secret arguments (an MCP
    tool's answer as its result's text, not the JSON-RPC envelope around it)."""
    return [(_json(without_secrets(call_args(ex.request, catalog), rules)), _answer_text(ex))
            for ex in found]


def _answer_text(example: Exchange) -> str:
    """A stored answer as its kind reads what the tool said (an MCP result's text)."""
    text = body_text(example.response.body)
    wire = wire_call(example.request, request_args(example.request))
    return answer_text(wire, text) if wire is not None else text


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
        given = trim(given, max(share // 2, share - len(output)))
        output = trim(output, share - len(given))
        fitted[i] = (given, output)
        remaining -= len(given) + len(output)
    return [fitted[i] for i in range(len(examples))]


def trim(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..." if limit >= 3 else ""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


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
            lines.append("Body: " + trim(body_text(request.body), MAX_BODY_IN_PROMPT))
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
    if doc.input_schema is not None:
        lines.append("Arguments, as a JSON Schema: " + trim(_json(doc.input_schema), MAX_SCHEMA_IN_PROMPT))
    if doc.output_schema is not None:
        lines.append('The answer ("response") must follow this JSON Schema: '
                     + trim(_json(doc.output_schema), MAX_SCHEMA_IN_PROMPT))
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


def reply_text(completion: Any, meta: dict[str, Any]) -> str | None:
    """The assistant text of a chat completion (parsed JSON); its model and tokens go to meta."""
    if not isinstance(completion, dict):
        raise BadReply(f"the backend answered {type(completion).__name__}, not a chat completion")
    counted = completion.get("usage")
    usage: dict[str, Any] = counted if isinstance(counted, dict) else {}
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
            raise BadReply(f"reply is not JSON: {trim(text.strip(), 80)!r}") from None
    if not isinstance(value, dict) or "error" not in value or "response" not in value:
        shape = sorted(value)[:5] if isinstance(value, dict) else type(value).__name__
        raise BadReply(f"reply is not an object with 'error' and 'response' (got {shape})")
    error, response = value["error"], value["response"]
    error = "" if error is None else error if isinstance(error, str) else _json(error)
    if not error and response in ("", None):
        raise BadReply("reply has neither a response nor an error")
    return error, response


def answer_response(error: str, response: Any):
    """The HTTP answer an agent sees for a parsed reply (see this module's docstring)."""
    if error and response in ("", None):
        return api_body_response({"error": error, "response": ""})
    return api_body_response(response)
