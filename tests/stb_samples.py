"""StableToolBench's files for tests: where the real ones are, and small ones written by tests.

The real files (a StableToolBench data folder: ``solvable_queries/``, ``data_example/``,
``reference_answers_gpt-3.5-turbo_CoT/``, ``pipeline_answers_tool_calls/``,
``evaluator_template/``) are read from ``$STBPROXY_STB_DATA`` when it is set, else from
``../shared/data/stabletoolbench`` beside the repository. Only this module resolves that
folder; a test that needs it and cannot find it skips with :data:`SKIP_REASON`.

So that a plain clone still checks every format, :func:`write_sample_stb` writes a small
folder of the same layout with made-up tools, queries and answers (our own names and
values; only the formats are StableToolBench's, see STB_FORMATS.md). A sample folder holds
a ``SAMPLE`` marker file: :func:`is_sample` tells tests which kind they were given, for the
few assertions that hold only for the real numbers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

STB_DATA_ENV = "STBPROXY_STB_DATA"
REPO = Path(__file__).resolve().parent.parent
BESIDE_THE_REPO = REPO.parent / "shared" / "data" / "stabletoolbench"
GROUPS = ("G1_instruction", "G1_category", "G1_tool", "G2_instruction", "G2_category", "G3_instruction")
QUERIES = Path("solvable_queries") / "test_instruction"
MARKER = "SAMPLE"


def stb_data_path() -> Path:
    """Where StableToolBench's real files are expected: $STBPROXY_STB_DATA, else beside the repository."""
    given = os.environ.get(STB_DATA_ENV)
    return Path(given).expanduser() if given else BESIDE_THE_REPO


def real_stb_data() -> Path | None:
    path = stb_data_path()
    return path if path.is_dir() else None


def skip_reason() -> str:
    given = os.environ.get(STB_DATA_ENV)
    where = f" ({STB_DATA_ENV}={given} is not a folder)" if given else ""
    return (f"StableToolBench's real files not found{where}: set {STB_DATA_ENV} to a StableToolBench data "
            f"folder, or put it at {BESIDE_THE_REPO}")


SKIP_REASON = skip_reason()


def require_real_stb_data() -> Path:
    """The real data folder, or skip the calling test saying where it was looked for."""
    import pytest

    path = real_stb_data()
    if path is None:
        pytest.skip(skip_reason())
    return path


def is_sample(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def write_json(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


# -- query files (solvable_queries/test_instruction/G*_*.json) ------------------------------------


def param(name: str, kind: str = "STRING", default: Any = "", description: str = "") -> dict[str, Any]:
    return {"name": name, "type": kind, "description": description, "default": default}


def api(category: str, tool: str, name: str, *, required=(), optional=(), method: str = "GET",
        template: Any = None, description: str = "") -> dict[str, Any]:
    """One ``api_list`` item of a query file (no URL: query files carry none)."""
    return {"category_name": category, "tool_name": tool, "api_name": name,
            "api_description": description or f"{name} of {tool}",
            "required_parameters": list(required), "optional_parameters": list(optional), "method": method,
            "template_response": {} if template is None else template}


# Hand-picked APIs whose names exercise the naming rules (spaces, capitals, digits, reserved
# parameter names such as id/from, a category with a space); tests refer to some by name.
NAMED_APIS = [
    api("Data", "TheClique", "Songkick concert", required=[param("id_conc", default="1-band-at-a-hall")],
        template={"date": "str", "name": "str", "venue_name": "str",
                  "line_up": [{"link": "str", "name": "str", "_list_length": 2}]}),
    api("Data", "TheClique", "Songkick artist", required=[param("artist_id", default="7-a-band")],
        template={"name": "str", "fans_num": "int", "posters": ["list of str with length 3"],
                  "upcoming": [{"city": "str", "when": {"start": "str", "end": "str"}, "_list_length": 4}]}),
    api("Sports", "Free NBA", "Get a Specific Team", required=[param("id", default="1")],
        template={"id": "int", "abbreviation": "str", "city": "str", "conference": "str", "full_name": "str"}),
    api("Sports", "Free NBA", "Get All Games", optional=[param("page", "NUMBER", 0), param("per_page", "NUMBER", 25),
                                                         param("from", default="2020-01-01")],
        template={"data": [{"id": "int", "home_team_score": "int", "season": "int", "_list_length": 25}],
                  "meta": {"total_pages": "int", "next_page": "int"}}),
    api("Business Software", "Ledger-Box 2", "List Invoices", method="POST",
        required=[param("accountId")], optional=[param("pageSize", "NUMBER", 10), param("return")],
        template={"invoices": [{"number": "str", "total": "float", "paid": "bool", "_list_length": 3}]}),
    api("Finance", "9 Rates", "Convert", required=[param("from", default="EUR"), param("to", default="USD"),
                                                  param("amount", "NUMBER", 1)],
        template={"rate": "float", "result": "float", "date": "str"}),
    api("Entertainment", "Joke Box", "random joke", template={}),  # {} says nothing about the answer
    api("Travel", "Trip Planner", "Search/Hotels (v2)", required=[param("city"), param("checkIn")],
        optional=[param("class", default="any")], template={"hotels": [{"name": "str", "stars": "int",
                                                                          "_list_length": 6}], "count": "int"}),
    # a template cut off in the middle, kept as text (query files hold such)
    api("Media", "Clip Finder", "Find Clips", required=[param("q")],
        template='{"clips": [{"title": "str", "length_seconds": "int", "_list_length": 3}], "next_cur'),
]

_THINGS = ("Weather", "Forecast", "Quote", "Recipe", "Flight", "Station", "Movie", "Book", "Lyric")
_CATEGORIES = ("Data", "Tools", "Science", "Media", "Logistics")


def generated_apis(count: int = 32) -> list[dict[str, Any]]:
    """``count`` more APIs over a few tools: enough for tests that sample tens of APIs."""
    out = []
    for i in range(count):
        thing = _THINGS[i % len(_THINGS)]
        category = _CATEGORIES[i % len(_CATEGORIES)]
        tool = f"{thing} Hub {i // 4}"
        name = f"{'Get' if i % 2 else 'List'} {thing} {i}"
        required = [param("query", default=thing.lower())] if i % 3 else []
        optional = [param("limit", "NUMBER", 5)] if i % 4 == 1 else []
        template = {"items": [{"title": "str", "score": "float", "_list_length": 1 + i % 3}], "total": "int"} \
            if i % 5 else {"message": "str"}
        out.append(api(category, tool, name, required=required, optional=optional,
                       method="POST" if i % 7 == 3 else "GET", template=template))
    return out


def sample_queries(group: str = "G1_instruction", first_id: int = 100) -> list[dict[str, Any]]:
    """A query file's content: queries over the hand-picked and generated APIs."""
    apis = NAMED_APIS + generated_apis()
    out = []
    for n, start in enumerate(range(0, len(apis), 4)):
        chunk = apis[start:start + 4]
        out.append({
            "query": f"Sample request {n} of {group}: please use {chunk[0]['tool_name']} to help me.",
            "query_id": first_id + n,
            "relevant APIs": [[a["tool_name"], a["api_name"]] for a in chunk[:2]],
            "api_list": chunk,
        })
    return out


def write_query_files(root: Path, groups=GROUPS) -> Path:
    """Query files and their id files for ``groups``; returns the query folder."""
    for g, group in enumerate(groups):
        queries = sample_queries(group, first_id=100 * (g + 1))
        write_json(root / QUERIES / f"{group}.json", queries)
        write_json(root / "solvable_queries" / "test_query_ids" / f"{group}.json",
                   {str(q["query_id"]): 0 for q in queries})
    return root / QUERIES


def write_sample_stb(root: Path) -> Path:
    """A small StableToolBench data folder of made-up content, marked as a sample."""
    root.mkdir(parents=True, exist_ok=True)
    write_query_files(root)
    write_pipeline_answers(root)
    write_evaluator_template(root)
    (root / MARKER).write_text("written by tests/stb_samples.py; not StableToolBench's data\n")
    return root


# -- raw answers in today's message format (pipeline_answers_tool_calls/G1_instruction/<qid>_CoT@1.json)


def _schema(name: str, tool: str, properties: dict[str, str], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f'A function of the tool "{tool}": call it with the listed arguments.',
        "parameters": {"type": "object", "properties": {p: {"type": kind, "description": f"the {p}"}
                                                         for p, kind in properties.items()},
                       "required": required, "optional": []}}}


FINISH_SCHEMA = _schema("Finish", "", {"return_type": "string", "final_answer": "string"}, ["return_type"])

# The functions agents are shown for the first two sample queries (ids 100 and 101 of
# G1_instruction), spelt out by hand from the naming rules: <api>_for_<tool>, standardized
# parameter names (id -> is_id, from -> is_from, camelCase lower-cased), optional parameters
# listed only when there are required ones.
PIPELINE_FUNCTIONS = {
    0: [_schema("songkick_concert_for_theclique", "theclique", {"id_conc": "string"}, ["id_conc"]),
        _schema("songkick_artist_for_theclique", "theclique", {"artist_id": "string"}, ["artist_id"]),
        _schema("get_a_specific_team_for_free_nba", "free_nba", {"is_id": "string"}, ["is_id"]),
        _schema("get_all_games_for_free_nba", "free_nba", {}, [])],
    1: [_schema("list_invoices_for_ledger_box_2", "ledger_box_2",
                {"accountid": "string", "pagesize": "number", "is_return": "string"}, ["accountid"]),
        _schema("convert_for_get_9_rates", "get_9_rates",
                {"is_from": "string", "to": "string", "amount": "number"}, ["is_from", "to", "amount"]),
        _schema("random_joke_for_joke_box", "joke_box", {}, []),
        _schema("search_hotels_v2_for_trip_planner", "trip_planner",
                {"city": "string", "checkin": "string", "is_class": "string"}, ["city", "checkin"])],
}

# (calls per assistant turn: [(function, arguments)], the tool results by call) for each sample answer
PIPELINE_CALLS = {
    0: [[("get_a_specific_team_for_free_nba", {"is_id": "14"})],
        [("songkick_concert_for_theclique", {"id_conc": "3-quartet-live"}),
         ("songkick_artist_for_theclique", {"artist_id": "9-quartet"})]],
    1: [[("convert_for_get_9_rates", {"is_from": "EUR", "to": "JPY", "amount": 20})],
        [("search_hotels_v2_for_trip_planner", {"city": "Lyon", "checkin": "2025-05-01"})],
        [("random_joke_for_joke_box", {})]],
}


def _assistant(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant message as openai>=1 dumps it (the fields the pipeline keeps)."""
    return {"content": None, "refusal": None, "role": "assistant", "annotations": None, "audio": None,
            "tool_calls": calls}


def pipeline_answer(query: dict[str, Any], functions: list[dict[str, Any]], turns: list, *,
                    final: str = "", give_up: bool = False) -> dict[str, Any]:
    """A CoT@1 raw answer as StableToolBench's pipeline writes it with openai>=1: assistant
    ``tool_calls`` (several per message possible), results as ``role: tool`` with
    ``tool_call_id``, ``function_call: null`` left on messages, functions as ``{type, function}``."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful agent with tools. Call Finish when you are done."},
        {"role": "user", "content": f"\n{query['query']}\nBegin!\n"}]
    chain: list[dict[str, Any]] = []
    n = 0
    for turn in turns:
        calls = []
        for name, args in turn:
            n += 1
            calls.append({"id": f"call_sample_{query['query_id']}_{n}", "type": "function",
                          "function": {"name": name, "arguments": json.dumps(args)}})
        messages.append(_assistant(calls))
        for call in calls:
            result = json.dumps({"error": "", "response": f"sample answer {n} of {call['function']['name']}"})
            messages.append({"role": "tool", "name": call["function"]["name"], "content": result,
                             "tool_call_id": call["id"]})
            chain += [{"node_type": "Action", "description": call["function"]["name"]},
                      {"node_type": "Action Input", "description": call["function"]["arguments"],
                       "observation": result}]
    finish_args = {"return_type": "give_up_and_restart"} if give_up else \
        {"return_type": "give_answer", "final_answer": final or f"Here is what I found for query {query['query_id']}."}
    final_answer = json.dumps(finish_args)
    finish = {"id": f"call_sample_{query['query_id']}_finish", "type": "function",
              "function": {"name": "Finish", "arguments": final_answer}}
    # The pipeline drops function_call from its history before each request: only the last
    # message keeps the ``function_call: null`` of openai>=1's message dump.
    messages.append({**_assistant([finish]), "function_call": None})
    chain += [{"node_type": "Action", "description": "Finish"},
              {"node_type": "Action Input", "description": final_answer,
               "observation": "{\"response\":\"successfully giving the final answer.\"}"}]
    return {
        "win": not give_up, "try_count": 1, "trys": [{"chain": chain, "win": not give_up}], "compare_candidates": [],
        "forward_args": {"single_chain_max_step": 12, "pass_at": 1, "answer": 1},
        "answer_generation": {
            "valid_data": True, "final_answer": final_answer, "function": [*functions, FINISH_SCHEMA],
            "query_count": len(turns) + 1, "total_tokens": 1000 + 10 * n,
            "train_messages": [messages[:2], messages], "chain": [], "query": query["query"]},
    }


def write_pipeline_answers(root: Path) -> Path:
    folder = root / "pipeline_answers_tool_calls" / "G1_instruction"
    queries = json.loads((root / QUERIES / "G1_instruction.json").read_text(encoding="utf-8"))
    for index, functions in PIPELINE_FUNCTIONS.items():
        query = queries[index]
        write_json(folder / f"{query['query_id']}_CoT@1.json", pipeline_answer(query, functions, PIPELINE_CALLS[index]))
    return folder


# -- the evaluator's prompt template (evaluator_template/template.txt) ------------------------------

# One <function> block per judge function: <name>, then <description> holding the prompt, a
# str.format text with that function's fields. Wording written for these tests.
SAMPLE_TEMPLATE = """<function>
<name>check_answer_status</name>
<description>
Sample rubric for tests. Read the request and the reply that ends the attempt.
Request: {query}
Reply: {answer}
Say Solved when the reply settles the request, Unsolved when it does not, Unsure otherwise.
</description>
</function>
<function>
<name>parse_answer_status</name>
<description>
Sample rubric for tests. Here is every step the assistant took, not just the last one.
Request: {query}
Steps: {answer}
Decide from the steps whether the request ended up settled: Solved, Unsolved or Unsure.
</description>
</function>
<function>
<name>check_task_solvable</name>
<description>
Sample rubric for tests. Could the tools listed in this task settle it?
Task: {task}
Say Solvable, Unsolvable or Unsure.
</description>
</function>
<function>
<name>select_better_answer</name>
<description>
Sample rubric for tests. Two attempts at one request; pick the index of the stronger one.
Request: {query}
Attempt 0: {answer_0}
Attempt 1: {answer_1}
</description>
</function>
"""


def write_evaluator_template(root: Path) -> Path:
    path = root / "evaluator_template" / "template.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SAMPLE_TEMPLATE, encoding="utf-8")
    return path


# -- converted answers as the published reference answers hold them -------------------------------


def reference_entry(query: str, calls: list[tuple[str, str]], final_answer: str, *, cut: int = 100) -> dict[str, Any]:
    """A converted answer whose node messages are text, as in the reference answers: a tool
    node's message is the Python text of its ``{name, arguments, response}`` dict, and every
    message is cut to ``cut`` characters."""
    finish = json.dumps({"return_type": "give_answer", "final_answer": final_answer})
    steps = [*calls, ("Finish", finish)]
    tail: list[dict[str, Any]] = []
    for name, arguments in reversed(steps):
        message = str({"name": name, "arguments": arguments, "response": f"the answer of {name}"})[:cut]
        tail = [{"role": "tool", "message": message, "next": tail}]
    tree = [{"role": "system", "message": "", "next": [{"role": "user", "message": query[:cut], "next": tail}]}]
    return {"query": query,
            "available_tools": [{"name": n, "description": "", "parameters": {}}
                                for n in dict.fromkeys(n for n, _ in steps)],
            "answer": {"method": "chatgpt_CoT", "total_steps": len(steps) + 2, "final_answer": finish,
                       "answer_details": tree}}
