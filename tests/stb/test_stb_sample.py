"""examples/stb-sample/: the small StableToolBench-layout sample the README's tour runs on
in a fresh clone (tests/house/test_docs_commands.py runs the tour's blocks on it). Here: it stays
small, it imports without a problem, its cache, tool docs, queries and answers agree, and
the tour's /virtual call and every call of its answers are answered from its cache."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stbcore.toolbench_names import api_key_name, function_name
from stbproxy.stb.catalog import Catalog
from stbproxy.stb_cache.importer import ImportSummary, api_of, cache_files, read_cache_file

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "stb-sample"
TOOLS = SAMPLE / "data" / "toolenv" / "tools"
CACHE = SAMPLE / "server" / "tool_response_cache"
QUERIES = SAMPLE / "solvable_queries" / "test_instruction" / "G1_instruction.json"
IDS = SAMPLE / "solvable_queries" / "test_query_ids" / "G1_instruction.json"
ANSWERS = SAMPLE / "data" / "answer" / "virtual_chatgpt_cot" / "G1_instruction"


def read(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def catalog() -> Catalog:
    found = Catalog()
    for report in (found.load_tools_dir(TOOLS), found.load_query_file(QUERIES)):
        assert report.skipped == [] and report.loaded == 7
    return found


def test_the_sample_is_small_and_all_json():
    files = [p for p in SAMPLE.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 100_000  # tens of KB, in a clone of the repository
    for path in files:
        if path.suffix != ".md":
            read(path)


def test_every_cache_file_is_a_documented_api_and_every_entry_reads():
    docs, summary = catalog(), ImportSummary()
    for path in cache_files(CACHE):
        doc = docs.get(api_of(path))
        assert doc is not None and doc.url, f"{path.relative_to(SAMPLE)}: no tool doc with a URL for it"
        names = {api_key_name(p.name) for p in (*doc.required_parameters, *doc.optional_parameters)}
        for key in read(path):
            assert set(ast.literal_eval(key)) <= names, f"{path.relative_to(SAMPLE)} [{key}]: {names}"
        list(read_cache_file(path, CACHE, catalog=docs, summary=summary))
    # one answer is a failure on purpose, as the published cache holds them
    assert (len(cache_files(CACHE)), summary.entries, summary.unparseable, summary.failures) == (7, 13, 0, 1)


def test_the_queries_ids_and_answers_agree():
    queries = read(QUERIES)
    ids = [str(q["query_id"]) for q in queries]
    assert list(read(IDS)) == ids
    assert sorted(p.name for p in ANSWERS.iterdir()) == sorted(f"{i}_CoT@1.json" for i in ids)
    docs = catalog()
    for query in queries:
        for api in query["api_list"]:
            assert any(d.tool == api["tool_name"] and d.api == api["api_name"] and d.url for d in docs), api


def answer_calls() -> list[tuple[dict, dict, str]]:
    """Each tool call of the sample's answers: (the API of the query it names, its arguments,
    the result the answer holds)."""
    functions = {function_name(api["api_name"], api["tool_name"]): api
                 for query in read(QUERIES) for api in query["api_list"]}
    calls = []
    for path in sorted(ANSWERS.iterdir()):
        messages = read(path)["answer_generation"]["train_messages"][-1]
        results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
        for message in messages:
            for call in message.get("tool_calls") or []:
                name = call["function"]["name"]
                if name != "Finish":
                    calls.append((functions[name], json.loads(call["function"]["arguments"]), results[call["id"]]))
    return calls


def test_every_call_of_the_answers_is_a_cache_entry():
    calls = answer_calls()
    assert len(calls) == 7
    for api, arguments, result in calls:
        (path,) = [p for p in cache_files(CACHE) if p.stem == api_key_name(api["api_name"])
                   and p.parent.parent.name == api["category_name"]]
        assert json.loads(result) == read(path)[str(arguments)]


def tour_call() -> dict:
    """The body of the README tour's /virtual call."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("stbproxy import stb-cache"):]
    return json.loads(re.search(r"-d '(\{.*?\})'", block, re.S).group(1))


@pytest.mark.integration
def test_the_tours_virtual_call_and_the_answers_calls_hit_the_imported_cache(tmp_path):
    """As the tour does it: import the sample into a store, serve it, and ask /virtual."""
    import httpx

    from stbproxy.serve_process import ServeProcess

    store = tmp_path / "store"
    for command in (["tools", str(TOOLS), str(QUERIES)], ["stb-cache", str(CACHE)]):
        subprocess.run([sys.executable, "-m", "stbproxy", "import", *command, "--store", str(store)],
                       check=True, capture_output=True, timeout=120)
    asked = [tour_call()] + [{"category": api["category_name"], "tool_name": api["tool_name"],
                              "api_name": api["api_name"], "tool_input": json.dumps(arguments), "strip": "",
                              "toolbench_key": ""} for api, arguments, _ in answer_calls()]
    with ServeProcess(store, env={"STBPROXY_RAPIDAPI_KEY": ""}) as proxy:
        for body in asked:
            answer = httpx.post(f"{proxy.url}/s/cot-run-1/virtual", json=body, timeout=30)
            assert answer.status_code == 200, answer.text
            assert (answer.headers["X-Stb-Source"], answer.headers["X-Stb-Origin"]) == ("cache", "imported"), body
    assert tour_call()["tool_name"] == "Tide Tables"
