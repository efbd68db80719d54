"""Raw ToolBench answers (``<qid>_<method>.json``) converted to the judge's answer tree.

The rules follow StableToolBench's converter: a valid answer is read from its last
training conversation; an invalid one from a try (CoT) or the search tree (DFS), walking
to a leaf by random choices. Those choices come from a generator seeded by the query
id, so converting twice, or in another order, gives the same tree.

Conversations may be in the legacy message format or in today's (``tool_calls``,
``role: tool``; see messages.py), and the functions may be listed bare or wrapped as
``{"type": "function", "function": ...}``: the converted answer is the same either way.
Search trees (``trys`` chains, DFS ``tree``) look alike in both: a message with several
tool calls is a run of Action / Action Input nodes there.
"""

from __future__ import annotations

import random
from typing import Any

from .messages import read_steps
from .model import Answer, Problem, chain, function_schemas, tree_problem

# Some ToolBench methods log a tool-retrieval step under this name; it is not an API
# call of the agent, and the original drops it too.
_SELECTION = "function_selection"


class _Bad(Exception):
    """A raw answer that cannot be converted; the message says why."""


def convert_raw(data: dict[str, Any], *, qid: str, method: str, seed: int = 0, where: str = "") -> Answer | Problem:
    """Convert one raw answer file's content, or say why it cannot be."""
    try:
        gen = data["answer_generation"]
        if not isinstance(gen, dict):
            raise _Bad("answer_generation is not an object")
        for key in ("query", "function", "final_answer"):
            if key not in gen:
                raise _Bad(f"answer_generation has no {key!r}")
        if not isinstance(gen["function"], list):
            raise _Bad("answer_generation's 'function' is not a list")
        if gen.get("valid_data"):
            steps = _from_messages(gen.get("train_messages"))
        else:
            rng = random.Random(f"{seed}:{qid}")
            if isinstance(data.get("trys"), list):
                steps = _from_try(data["trys"], rng)
            elif isinstance(data.get("tree"), dict):
                steps = _from_tree(data["tree"], rng)
            else:
                raise _Bad("invalid answer with neither 'trys' (CoT) nor 'tree' (DFS)")
    except _Bad as exc:
        return Problem(qid, str(exc), where)
    except (KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
        return Problem(qid, f"malformed raw answer ({type(exc).__name__}: {exc})", where)

    # System and user messages are blanked, as the original does: the judge gets the
    # query separately and the system prompt is the same for every answer.
    steps = [s for s in steps if not (s["role"] == "tool" and s["message"].get("name") == _SELECTION)]
    details = chain([{"role": "system", "message": ""}, {"role": "user", "message": ""}, *steps])
    broken = tree_problem(details)
    if broken:
        return Problem(qid, f"broken answer tree: {broken}", where)
    final = gen["final_answer"]
    return Answer(
        query_id=qid,
        query=str(gen["query"]),
        available_tools=function_schemas(gen["function"]),
        method=method,
        total_steps=len(steps) + 2,
        final_answer=final if isinstance(final, str) else str(final),
        answer_details=details,
        source="toolbench",
    )


def _tool(name: Any, arguments: Any, response: Any) -> dict[str, Any]:
    return {"role": "tool", "message": {"name": name, "arguments": arguments, "response": response}}


def _from_messages(conversations: Any) -> list[dict[str, Any]]:
    if not isinstance(conversations, list) or not conversations or not isinstance(conversations[-1], list):
        raise _Bad("valid answer without train_messages")
    # Past the system prompt and the query; the text beside a call is dropped, as the
    # original converter does.
    return read_steps(conversations[-1][2:], thoughts=False).steps


def _from_try(trys: list[Any], rng: random.Random) -> list[dict[str, Any]]:
    if not trys:
        raise _Bad("invalid CoT answer with no tries")
    chain = rng.choice(trys).get("chain") or []
    steps: list[dict[str, Any]] = []
    i = 0
    while i < len(chain):
        node = chain[i]
        kind = node.get("node_type")
        if kind == "Action":
            given = chain[i + 1] if i + 1 < len(chain) else {}
            steps.append(_tool(node.get("description"), given.get("description", ""), given.get("observation", "")))
            i += 2
        elif kind == "Thought":
            steps.append({"role": "assistant", "message": node.get("description", "")})
            i += 1
        else:
            raise _Bad(f"unknown node_type {kind!r} in CoT chain")
    return steps


def _from_tree(tree: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    root = tree.get("tree")
    if not isinstance(root, dict):
        raise _Bad("DFS answer without a search tree")
    steps: list[dict[str, Any]] = []
    choices = _options(root)
    while choices:
        step, choices = rng.choice(choices)
        steps.append(step)
    return steps


Option = tuple[dict[str, Any], list[Any]]


def _options(node: dict[str, Any]) -> list[Option]:
    """The steps that can follow ``node``, each with the options after it.

    An Action and its Action Input form one tool step whose followers are the input's
    children (and any other children of the action); a Thought is an assistant step.
    """
    out: list[Option] = []
    for child in node.get("children") or []:
        kind = child.get("node_type")
        if kind == "Action":
            kids = child.get("children") or []
            given = next((c for c in kids if c.get("node_type") == "Action Input"), None)
            if given is None:
                out.append((_tool(child.get("description"), "", ""), _options(child)))
                continue
            after = _options(given) + _options({"children": [c for c in kids if c is not given]})
            out.append((_tool(child.get("description"), given.get("description", ""),
                              given.get("observation", "")), after))
        elif kind == "Thought":
            out.append(({"role": "assistant", "message": child.get("description", "")}, _options(child)))
        elif kind == "Action Input":
            out.extend(_options(child))  # a stray input carries no step; its followers still count
        else:
            raise _Bad(f"unknown node_type {kind!r} in DFS tree")
    return out
