"""Building blocks for stbeval tests: small answers, and a judge scripted per query and round."""

from __future__ import annotations

import copy
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from stbeval.judge import Judge, JudgeSettings
from stbeval.judgelog import LOG_NAME, JudgeLog
from stbeval.prompts import Prompts
from tests.fakes.fake_openai import HttpError, ToolCall

REPO = Path(__file__).resolve().parents[2]
from tests.stb_samples import stb_data_path  # noqa: E402

STB_DATA = stb_data_path()


def node(role: str, message: Any, *children: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "message": message, "next": list(children)}


def converted_entry(query: str, final_text: str | None = "done", *, finish: bool = True,
                    give_up: bool = False, marker: str = "") -> dict[str, Any]:
    """One converted answer: a tool call, then Finish (or not) with ``final_text``."""
    args = {"return_type": "give_up_and_restart"} if give_up else {"return_type": "give_answer",
                                                                  "final_answer": f"{final_text}{marker}"}
    final_answer = json.dumps(args) if (finish and final_text is not None) or give_up else ""
    last = node("tool", {"name": "Finish", "arguments": final_answer, "response": ""}) if finish else \
        node("tool", {"name": "get_thing_for_tool", "arguments": "{}",
                      "response": "{\"error\": \"\", \"response\": \"x\"}"})
    tree = [node("system", "", node("user", "", node("tool", {"name": "get_thing_for_tool", "arguments": "{}",
                                                             "response": "{\"error\": \"\", \"response\": \"ok\"}"},
                                                    node("assistant", f"thinking{marker}", last))))]
    return {
        "query": query,
        "available_tools": [{"name": "get_thing_for_tool", "description": "d", "parameters": {}},
                            {"name": "Finish", "description": "f", "parameters": {}}],
        "answer": {"method": "test", "total_steps": 5, "final_answer": final_answer, "answer_details": tree},
    }


def legacy_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A conversation in today's format rewritten in the legacy one, call by call.

    An assistant message with several ``tool_calls`` becomes one ``function_call``
    message per call (its text on the first), each followed by its result as ``role:
    function``; results the conversation lacks stay absent.
    """
    results = {m["tool_call_id"]: m for m in messages if m.get("role") == "tool" and m.get("tool_call_id")}
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "tool":
            continue  # placed after its call below
        calls = message.get("tool_calls") or []
        if message.get("role") != "assistant" or not calls:
            out.append({k: v for k, v in message.items() if k not in ("tool_calls", "function_call")})
            continue
        for i, call in enumerate(calls):
            fn = call["function"]
            out.append({"role": "assistant", "content": message.get("content") if i == 0 else None,
                        "function_call": {"name": fn["name"], "arguments": fn["arguments"]}})
            if call["id"] in results:
                out.append({"role": "function", "name": fn["name"], "content": results[call["id"]]["content"]})
    return out


def to_legacy(raw: dict[str, Any]) -> dict[str, Any]:
    """A raw ToolBench answer written by today's pipeline, as the legacy pipeline writes it.

    Functions are listed bare and every conversation is rewritten; search trees
    (``trys``, ``tree``) do not depend on the message format and stay as they are.
    """
    legacy = copy.deepcopy(raw)
    gen = legacy["answer_generation"]
    gen["function"] = [f["function"] if f.get("type") == "function" else f for f in gen["function"]]
    gen["train_messages"] = [legacy_messages(conversation) for conversation in gen.get("train_messages") or []]
    return legacy


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def make_judge(fake: Any, out: Path, **settings: Any) -> Judge:
    options = {"model": "judge-x", "base_url": fake.base_url, "api_key": "test", "timeout": 10.0, "max_retries": 0}
    options.update(settings)
    return Judge(JudgeSettings(**options), Prompts(), JudgeLog(out / LOG_NAME))


class Script:
    """A fake-judge handler whose labels are scripted per query, side and round.

    ``labels[query]`` lists check_answer_status labels per round; ``trace[query]`` the
    parse_answer_status labels used after an Unsure; ``picks[query]`` the winner of
    each round's comparison, "cand" or "ref". Answers carry the markers "@cand" and
    "@ref" in their text, so the handler tells the sides apart whatever their order.
    Rounds are counted per (function, query, side): stbeval runs rounds in order.
    """

    def __init__(self, labels: dict[str, list[Any]] | None = None, *, trace: dict[str, list[Any]] | None = None,
                 picks: dict[str, list[str]] | None = None, solvable: dict[str, dict[str, str]] | None = None,
                 ref_labels: dict[str, list[Any]] | None = None) -> None:
        self.labels = labels or {}
        self.ref_labels = ref_labels or {}
        self.trace = trace or {}
        self.picks = picks or {}
        self.solvable = solvable or {}
        self.seen: Counter[tuple[str, str, str]] = Counter()
        self._lock = threading.Lock()

    def _query(self, prompt: str, known: Any) -> str:
        found = [q for q in known if q in prompt]
        assert len(found) == 1, f"prompt matches {found} of the scripted queries"
        return found[0]

    def __call__(self, request: dict[str, Any]) -> Any:
        fn = request["tool_choice"]["function"]["name"]
        prompt = request["messages"][0]["content"]
        if fn == "check_task_solvable":
            query = self._query(prompt, self.solvable)
            return ToolCall(fn, {"reason": "scripted", "task_status": self.solvable[query][request["model"]]})
        if fn == "select_better_answer":
            query = self._query(prompt, self.picks)
            r = self._count(fn, query, "")
            pick = self.picks[query][r]
            if pick not in ("cand", "ref"):
                return pick  # a scripted failure or garbage text
            cand_first = prompt.index("@cand") < prompt.index("@ref")
            wants_cand = pick == "cand"
            return ToolCall(fn, {"reason": "scripted", "index": 0 if cand_first == wants_cand else 1})
        side = "ref" if "@ref" in prompt else "cand"
        table = self.ref_labels if side == "ref" else (self.trace if fn == "parse_answer_status" else self.labels)
        if side == "ref" and fn == "parse_answer_status":
            table = self.trace
        query = self._query(prompt, table)
        r = self._count(fn, query, side)
        reply = table[query][r]
        if isinstance(reply, (HttpError, str)) and reply not in ("Solved", "Unsolved", "Unsure"):
            return reply  # a scripted failure or garbage text
        return ToolCall(fn, {"reason": f"scripted round {r}", "answer_status": reply})

    def _count(self, fn: str, query: str, side: str) -> int:
        with self._lock:
            r = self.seen[(fn, query, side)]
            self.seen[(fn, query, side)] += 1
            return r


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every Markdown table row in ``markdown`` (rules left out)."""
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in markdown.splitlines()
            if line.startswith("|") and not line.startswith("|-")]
