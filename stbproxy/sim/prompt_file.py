"""Prompts a simulator model was trained on, read at run time from the user's files: a
system prompt (``--sim-system-prompt FILE``, or StableToolBench's from a checkout with
``--stb-dir``, read without running its code), and a prompt template (``--sim-prompt FILE``)
whose placeholders take the call's doc, request and examples. Nothing of any model's prompt
ships with stbproxy.

A template is text with optional ``[system]`` and ``[user]`` lines starting its sections
(without them, the whole file is the user message). ``{name}`` is replaced for the names in
PLACEHOLDERS, and ``{{name}}`` written as ``{name}``; other braces (a JSON example) stay as
they are; an unknown ``{name}`` is refused when the file is read.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stbproxy.errors import ConfigError
from stbproxy.sim.call_facts import CallFacts
from stbproxy.sim.llm_prompt import documentation
from stbproxy.sim.mirror_api import api_doc, request_of

STB_PROMPTS = Path("server") / "system_prompts.py"  # in a StableToolBench checkout
STB_PROMPT_NAMES = {"plain": "SFT_SYSTEM", "cot": "COT_SYSTEM"}
PLACEHOLDERS = {
    "api_doc": "the API as StableToolBench's server describes it: a Python dict (api_name, api_description, "
               "required_parameters, optional_parameters, tool_description, tool_name, tool_category)",
    "api_doc_json": "the same as JSON",
    "documentation": "the API's documentation as the llm simulator writes it (parameters, schemas, template)",
    "request": "the call's arguments as a Python dict, without toolbench_key or secret fields",
    "request_json": "the same as JSON",
    "examples": "earlier stored calls of the same API and their answers, one pair per line (empty when none)",
}
_TOKEN = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECTION = re.compile(r"^\[(system|user)\]\s*$", re.M)


def read_text(path: Path, what: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc}") from exc
    if not text.strip():
        raise ConfigError(f"the {what} {path} is empty")
    return text


def stb_system_prompt(checkout: Path, style: str) -> str:
    """The system prompt StableToolBench's MirrorAPI server sends (``plain`` or ``cot``), read
    from ``server/system_prompts.py`` of a checkout: the string assigned to its name."""
    if style not in STB_PROMPT_NAMES:
        raise ConfigError(f"--stb-prompt must be one of {', '.join(STB_PROMPT_NAMES)}, not {style!r}")
    name = STB_PROMPT_NAMES[style]
    source = Path(checkout) / STB_PROMPTS
    text = read_text(source, "StableToolBench prompts file (is --stb-dir a StableToolBench checkout?)")
    try:
        tree = ast.parse(text, filename=str(source))
    except SyntaxError as exc:
        raise ConfigError(f"cannot read {source}: {exc}") from exc
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
            raise ConfigError(f"{source}: {name} is not a plain string")
    raise ConfigError(f"{source} assigns no {name} (the {style} prompt)")


@dataclass(frozen=True)
class PromptTemplate:
    system: str | None
    user: str
    source: str

    @classmethod
    def read(cls, path: Path) -> PromptTemplate:
        return cls.parse(read_text(path, "prompt template"), str(path))

    @classmethod
    def parse(cls, text: str, source: str = "the prompt template") -> PromptTemplate:
        sections: dict[str, str | None] = {"system": None, "user": None}
        marks = list(_SECTION.finditer(text))
        if not marks:
            sections["user"] = text.strip("\n")
        else:
            if text[:marks[0].start()].strip():
                raise ConfigError(f"{source}: text before its first [system] or [user] line")
            for n, mark in enumerate(marks):
                end = marks[n + 1].start() if n + 1 < len(marks) else len(text)
                if sections[mark.group(1)] is not None:
                    raise ConfigError(f"{source}: two [{mark.group(1)}] sections")
                sections[mark.group(1)] = text[mark.end():end].strip("\n")
        if not sections["user"]:
            raise ConfigError(f"{source}: no user message (a [user] section, or text without sections)")
        for part in sections.values():
            for token in _TOKEN.finditer(part or ""):
                name = token.group(2)
                if name is not None and name not in PLACEHOLDERS:
                    raise ConfigError(f"{source}: unknown placeholder {{{name}}}; the known ones are "
                                      + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
                                      + " (write {{name}} for a literal {name})")
        return cls(sections["system"], sections["user"], source)

    def messages(self, facts: CallFacts, examples: list[tuple[str, str]], system: str | None) -> list[dict]:
        """The chat messages for one call; ``system`` (used as it is: a prompt read from a file is
        no template) when the template has no system section of its own."""
        values = _values(facts, examples)
        chosen = _fill(self.system, values) if self.system is not None else system
        out = [{"role": "system", "content": chosen}] if chosen else []
        return [*out, {"role": "user", "content": _fill(self.user, values)}]


def _values(facts: CallFacts, examples: list[tuple[str, str]]) -> dict[str, str]:
    doc, request = api_doc(facts), request_of(facts)
    return {
        "api_doc": str(doc),
        "api_doc_json": _json(doc),
        "documentation": documentation(facts),
        "request": str(request),
        "request_json": _json(request),
        "examples": "\n".join(f"Call {n} arguments: {given}\nCall {n} answer: {output}"
                              for n, (given, output) in enumerate(examples, 1)),
    }


def _fill(text: str, values: dict[str, str]) -> str:
    def one(token: re.Match) -> str:
        if token.group(1) is not None:  # {{name}}: the name in single braces, as written
            return "{" + token.group(1) + "}"
        return values[token.group(2)]
    return _TOKEN.sub(one, text)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
