"""The original evaluator's configuration: everything in a judge request but the prompt.

StableToolBench's evaluator folder holds a prompt template (read by prompts.py) and a
``config.yaml`` whose ``completions_kwargs`` make up the rest of each request: the
model, ``max_tokens``, the temperature, a timeout and ``functions``, the schema of each
judge function. A judge that is to give published numbers must get the same requests,
so stbeval reads that file at run time, as the original does, and keeps no copy of it.

How the original builds one request from it (judge.py does the same):

- every key of ``completions_kwargs`` but ``functions`` is passed to the chat completion
  call: ``timeout`` is the client's, the others become request fields;
- the judge function's schema is the one tool, and ``tool_choice`` forces it;
- a function the original asks for a reason (the pass rate's check_answer_status and
  parse_answer_status, the win rate's select_better_answer) gets a string property
  ``reason``, added after the others, and ``reason`` appended to ``required``. It asks
  check_task_solvable without one, so that schema is sent as the file has it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import TemplateError
from .prompts import CHECK_ANSWER, FUNCTIONS, PARSE_ANSWER, SELECT_BETTER

CONFIG_NAME = "config.yaml"
ASKED_WITH_REASON = (CHECK_ANSWER, PARSE_ANSWER, SELECT_BETTER)
# The property the original adds; its text is part of every request it sends.
REASON_PROPERTY = {"type": "string", "description": "explain your answer."}
# Keys of completions_kwargs that JudgeSettings holds; the rest go into the request as they are.
SETTINGS_KEYS = ("model", "temperature", "max_tokens", "timeout")


@dataclass(frozen=True)
class JudgeConfig:
    path: Path
    schemas: dict[str, dict[str, Any]]  # by function, as they are sent
    settings: dict[str, Any]  # those of SETTINGS_KEYS the file sets
    request: dict[str, Any] = field(default_factory=dict)  # other request fields, in the file's order
    template: Path | None = None  # the prompt template the file names, when it is beside it


def config_beside(template: str | Path) -> Path | None:
    """The evaluator configuration in the template's folder, as the original lays them out."""
    path = Path(template).parent / CONFIG_NAME
    return path if path.is_file() else None


def load_judge_config(path: str | Path) -> JudgeConfig:
    """The configuration file at ``path``; any problem is a TemplateError naming it."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TemplateError(f"{path}: cannot read the evaluator configuration ({exc})") from exc
    except yaml.YAMLError as exc:
        raise TemplateError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    kwargs = data.get("completions_kwargs") if isinstance(data, dict) else None
    if not isinstance(kwargs, dict):
        raise TemplateError(f"{path}: no completions_kwargs mapping (expected StableToolBench's evaluator config.yaml)")
    kwargs = copy.deepcopy(kwargs)
    schemas = _schemas(kwargs.pop("functions", None) or [], str(path))
    settings = {k: kwargs.pop(k) for k in SETTINGS_KEYS if k in kwargs}
    named = data.get("prompt_template")
    template = path.parent / named if isinstance(named, str) and (path.parent / named).is_file() else None
    return JudgeConfig(path, schemas, settings, kwargs, template)


def _schemas(functions: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(functions, list):
        raise TemplateError(f"{where}: completions_kwargs.functions is not a list")
    out: dict[str, dict[str, Any]] = {}
    for function in functions:
        name = function.get("name") if isinstance(function, dict) else None
        if name not in FUNCTIONS:
            raise TemplateError(f"{where}: unknown judge function {name!r} in functions "
                                f"(known: {', '.join(FUNCTIONS)})")
        out[name] = as_sent(function, where)
    return out


def as_sent(function: dict[str, Any], where: str = "config") -> dict[str, Any]:
    """The schema of one configured function as the original sends it (see the module docstring)."""
    name = function["name"]
    sent = copy.deepcopy(function)
    parameters = sent.get("parameters")
    if not isinstance(parameters, dict):
        parameters = {}  # no properties either: refused below
    properties = parameters.get("properties")
    if not isinstance(properties, dict) or FUNCTIONS[name].label_field not in properties:
        # Without it no reply could carry a label: every judgment would be unscored.
        raise TemplateError(f"{where}: {name} has no parameters.properties.{FUNCTIONS[name].label_field}")
    if name in ASKED_WITH_REASON:
        required = parameters.setdefault("required", [])
        if not isinstance(required, list):
            raise TemplateError(f"{where}: {name}: parameters.required is not a list")
        required.append("reason")
        properties["reason"] = dict(REASON_PROPERTY)
    return sent
