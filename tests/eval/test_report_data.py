"""The data of the HTML report, from a run scored from traffic: each query's trajectory
with where every answer came from (the proxy's source and store key), masked secrets,
and what changed against a baseline run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stbeval.report_data import build_document
from stbeval.report_queries import masked
from stbproxy.cli import main
from tests.fakes.fake_openai import FakeOpenAI, ToolCall
from tests.forensics.test_forensics_proxy import SamplingModel, run_agent
from tests.forensics_demo.world import World
from tests.servers import ProxyProcess

QUERIES = {"1": "What is the weather in Paris?", "2": "What is the weather in Oslo?"}


def judge(request: dict):
    solved = " C in " in request["messages"][0]["content"]
    return ToolCall(request["tool_choice"]["function"]["name"],
                    {"reason": "scripted <b>reason</b>", "answer_status": "Solved" if solved else "Unsolved"})


def evaluate(store: Path, session: str, folder: Path, tmp_path: Path) -> Path:
    query_file = tmp_path / "G1_query.json"
    query_file.write_text(json.dumps([{"query_id": int(q), "query": text} for q, text in QUERIES.items()]))
    ids = tmp_path / "ids"
    ids.mkdir(exist_ok=True)
    (ids / "G1_instruction.json").write_text(json.dumps({q: 0 for q in QUERIES}))
    with FakeOpenAI(judge) as judge_server:
        result = CliRunner().invoke(main, [
            "eval", "pass-rate", "--answers", session, "--store", str(store), "--queries", str(query_file),
            "--ids", str(ids), "--out", str(folder), "--rounds", "2", "--no-progress", "--no-chart",
            "--base-url", judge_server.base_url, "--api-key", "judge-key"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of the agent on both queries: the second after the weather in Paris changed."""
    tmp = tmp_path_factory.mktemp("report")
    store = tmp / "stb" / "store"
    with World() as world, FakeOpenAI(SamplingModel(p=1.0)) as llm:
        with ProxyProcess(store, "--mode", "record") as proxy:
            for query in QUERIES.values():
                run_agent(proxy, world, llm, session="before", query=query)
            world.temps["Paris"] = 30.0
            for query in QUERIES.values():
                run_agent(proxy, world, llm, session="after", query=query)
    return (evaluate(store, "before", tmp / "before", tmp), evaluate(store, "after", tmp / "after", tmp), tmp)


def test_each_query_keeps_its_trajectory_with_the_source_and_key_of_every_answer(runs):
    before, _after, _tmp = runs
    lines = [json.loads(line) for line in (before / "details" / "queries.jsonl").read_text().splitlines()]
    assert sorted(q["id"] for q in lines) == ["1", "2"]
    paris = next(q for q in lines if q["id"] == "1")
    assert paris["status"] == ["solved", "solved"] and paris["reasons"] == ["scripted <b>reason</b>"] * 2
    tools = [s for s in paris["trajectory"] if s["role"] == "tool"]
    weather, finish = tools
    assert weather["tool"]["name"] == "get_weather" and json.loads(weather["tool"]["arguments"]) == {"city": "Paris"}
    assert weather["source"] == "upstream" and weather["key"].startswith("http/127.0.0.1:")
    assert "/GET/weather/" in weather["key"] and json.loads(weather["answer"])["temp"] == 21.0
    assert finish["tool"]["name"] == "Finish" and finish["source"] is None
    assert paris["sources"] == {"upstream": 1}
    assert paris["final_answer"] and "21.0 C in Paris" in paris["final_answer"]


def test_the_final_answer_and_the_finish_step_are_read_as_text(runs):
    before, _after, _tmp = runs
    paris = next(q for q in build_document([before])["runs"][0]["queries"] if q["id"] == "1")
    given = json.loads(paris["final_answer"])  # as ToolBench keeps it: the Finish call's arguments
    assert paris["final"] == {"return_type": "give_answer", "text": given["final_answer"]}
    assert "21.0 C in Paris" in paris["final"]["text"] and "{" not in paris["final"]["text"]
    (finish,) = [s for s in paris["trajectory"] if (s.get("tool") or {}).get("name") == "Finish"]
    assert finish["finish"] == paris["final"] and finish["answer"] == ""
    assert all("finish" not in s for s in paris["trajectory"] if s is not finish)


def test_the_document_has_the_summary_and_what_changed_against_a_baseline(runs):
    before, after, _tmp = runs
    document = build_document([after], baseline=before)
    run = document["runs"][0]
    assert document["format"] == "stbeval-report/1" and run["kind"] == "pass_rate"
    assert run["metrics"][0]["label"] == "SoPR" and run["metrics"][0]["value"] == 100.0
    assert run["sources"] == {"upstream": 2}
    by_id = {q["id"]: q for q in run["queries"]}
    # Paris's weather answer changed (30 now, 21 before); Oslo's did not.
    paris_weather = next(i for i, s in enumerate(by_id["1"]["trajectory"]) if s["role"] == "tool")
    assert by_id["1"]["baseline"]["changed"] == ["answers"]
    assert by_id["1"]["baseline"]["changed_steps"] == [paris_weather]
    assert by_id["2"]["baseline"]["changed"] == []
    assert document["baseline"]["metrics"][0]["value"] == 100.0 and document["baseline"]["queries"] == []


def test_a_run_folder_without_query_lines_says_how_to_get_them(runs, tmp_path):
    before, _after, _tmp = runs
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.json").write_text((before / "summary.json").read_text())
    with pytest.raises(Exception, match="no details/queries.jsonl; evaluate the run again"):
        build_document([old])


@pytest.mark.parametrize("text, shown", [
    ('{"toolbench_key": "tk-123", "city": "Paris"}', '{"toolbench_key": "[redacted]", "city": "Paris"}'),
    ("{'api_key': 'ak-9', 'q': 1}", "{'api_key': '[redacted]', 'q': 1}"),
    ("GET /x?apikey=zz9&city=Oslo", "GET /x?apikey=[redacted]&city=Oslo"),
    ('{"args": "{\\"access_token\\": \\"t0k\\"}"}', '{"args": "{\\"access_token\\": \\"[redacted]\\"}"}'),
    ('{"city": "Paris"}', '{"city": "Paris"}'),
])
def test_secrets_are_masked_in_every_text_kept(text, shown):
    assert masked(text) == shown


def test_eval_report_writes_a_page_that_opens_offline_in_a_browser(runs):
    """The whole way: run folders scored from traffic, `eval report --html`, the page in
    Debian's Chromium with every request blocked."""
    from tests.eval.test_html_report_browser import CHROMIUM, CHROMIUM_ARGS, sync_playwright

    if sync_playwright is None or not CHROMIUM.exists():
        pytest.skip("needs Playwright for Python and Debian's chromium package (apt-get install chromium)")
    before, after, tmp = runs
    page_file = tmp / "after.html"
    result = CliRunner().invoke(main, ["eval", "report", str(after), "--html", str(page_file),
                                       "--baseline", str(before)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"report written to {page_file} (2 queries)" in result.stderr
    document = build_document([after], baseline=before)
    paris = next(q for q in document["runs"][0]["queries"] if q["id"] == "1")
    errors, requests_seen = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            url = page_file.as_uri()
            page.route("**/*", lambda route: route.continue_() if route.request.url == url
                       else (requests_seen.append(route.request.url), route.abort()))
            page.on("console", lambda message: message.type == "error" and errors.append(message.text))
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(url)
            page.wait_for_function("document.body.dataset.ready === '1'")
            rows = page.locator('[data-testid="query-row"]')
            assert rows.count() == 2
            page.locator('[data-testid="query-row"][data-id="1"]').click()
            trajectory = page.get_by_test_id("trajectory")
            assert trajectory.get_by_test_id("step").count() == len(paris["trajectory"])
            text = trajectory.inner_text()
            weather = next(s for s in paris["trajectory"] if s["role"] == "tool")
            assert "get_weather" in text and "upstream" in text and weather["key"] in text
            assert "30.0" in text and "scripted <b>reason</b>" in text  # the judge's reason, as text
            # the Finish step and the final answer show the answer as text: no "(empty)", no JSON
            answer = paris["final"]["text"]
            finish = trajectory.get_by_test_id("finish")
            assert finish.count() == 1 and answer in finish.inner_text()
            final = trajectory.get_by_test_id("final-answer").inner_text()
            assert answer in final and "return_type" not in final and "return_type" not in finish.inner_text()
            assert "(empty)" not in text
        finally:
            browser.close()
    assert errors == [] and requests_seen == []


def test_stability_curves_are_drawn_in_the_page_and_options_need_html(runs):
    before, _after, tmp = runs
    curves = {"title": "Stability", "x_label": "tools down (%)", "y_label": "calls with a valid answer (%)",
              "series": [{"name": "with simulator (schema)", "points": [[0, 100], [50, 100]]},
                         {"name": "without simulator", "points": [[0, 100], [50, 48.5]]}]}
    data = tmp / "stability.json"
    data.write_text(json.dumps(curves))
    page = tmp / "with-stability.html"
    result = CliRunner().invoke(main, ["eval", "report", str(before), "--html", str(page), "--stability", str(data)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert "<svg" in text and "without simulator" in text and "tools down (%)" in text
    refused = CliRunner().invoke(main, ["eval", "report", str(before), "--baseline", str(before)])
    assert refused.exit_code == 2 and "give --html OUT.html too" in refused.output
