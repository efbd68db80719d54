"""The HTML report page in a real browser (Debian's Chromium driven by Playwright), opened
from disk with every network request blocked and recorded: it loads without errors or
requests, lists every query a page at a time, opens trajectories, filters, sorts, shows
markup from answers as text, highlights what changed since a baseline, and draws."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stbeval.html_report import render
from tests.eval.report_samples import CLOSER, HOSTILE, NEEDLE, changed_ids, make_document

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
PAGE_SIZE = 100

pytestmark = [
    pytest.mark.skipif(sync_playwright is None, reason="needs Playwright for Python (pip install playwright)"),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package (apt-get install chromium)"),
    pytest.mark.timeout(90),
]


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Report:
    page: object
    url: str
    document: dict
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    @property
    def queries(self) -> list[dict]:
        runs = self.document.get("runs") or [{}]
        return runs[0].get("queries") or []

    def rows(self):
        return self.page.locator('[data-testid="query-row"]')

    def row(self, query_id: str):
        return self.page.locator(f'[data-testid="query-row"][data-id="{query_id}"]')

    def expect_count(self, shown: int) -> None:
        expect(self.page.get_by_test_id("count")).to_have_text(f"{shown} of {len(self.queries)} queries")

    def assert_clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.requests == [], f"network requests attempted: {self.requests}"


@pytest.fixture
def open_report(browser, tmp_path):
    contexts = []

    def opener(document: dict, name: str = "report.html") -> Report:
        path = tmp_path / name
        path.write_text(render(document), encoding="utf-8")
        url = path.as_uri()
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        report = Report(page, url, document)

        def route(request_route):
            if request_route.request.url == url:
                request_route.continue_()
            else:
                report.requests.append(request_route.request.url)
                request_route.abort()

        context.route("**/*", route)
        page.on("request", lambda request: request.url == url or report.requests.append(request.url))
        page.on("console", lambda message: message.type == "error" and report.errors.append(message.text))
        page.on("pageerror", lambda error: report.errors.append(str(error)))
        page.goto(url)
        page.wait_for_function("document.body.dataset.ready === '1' && typeof window.stbReportReady === 'number'")
        return report

    yield opener
    for context in contexts:
        context.close()


def searched(queries: list[dict], text: str) -> list[dict]:
    words = text.lower().split()
    return [q for q in queries if all(w in (q["id"] + "\n" + q["query"]).lower() for w in words)]


def test_every_query_listed_a_page_at_a_time_offline(open_report):
    report = open_report(make_document(250, steps=3))
    report.expect_count(250)
    page = report.page
    seen = []
    for expected in (100, 100, 50):
        expect(report.rows()).to_have_count(expected)
        seen += report.rows().evaluate_all("rows => rows.map(r => r.dataset.id)")
        if expected == 100:
            page.get_by_test_id("next-page").click()
    assert seen == [str(i) for i in range(1, 251)]
    expect(page.get_by_test_id("next-page")).to_be_disabled()
    page.get_by_test_id("prev-page").click()
    expect(report.rows()).to_have_count(100)
    report.assert_clean()


def test_a_row_opens_its_trajectory(open_report):
    report = open_report(make_document(30, answer_chars=900))
    query = report.queries[4]
    report.row(query["id"]).click()
    trajectory = report.page.get_by_test_id("trajectory")
    expect(trajectory).to_have_count(1)
    expect(trajectory.get_by_test_id("step")).to_have_count(len(query["trajectory"]))
    text = trajectory.inner_text()
    assert query["trajectory"][1]["tool"]["name"] in text and query["trajectory"][1]["key"] in text
    assert "final answer" in text.lower() and "round 1" in text
    # a long answer shows its first 400 characters, and all of it on demand
    answer = trajectory.get_by_test_id("step").nth(1).locator("pre.code").last
    short = len(answer.inner_text())
    assert short <= 402
    trajectory.get_by_test_id("step").nth(1).get_by_role("button", name="show all").click()
    assert len(answer.inner_text()) > short
    # another row replaces it; the same row again closes it
    report.row(report.queries[6]["id"]).click()
    expect(report.page.get_by_test_id("step")).to_have_count(len(report.queries[6]["trajectory"]))
    report.row(report.queries[6]["id"]).click()
    expect(report.page.get_by_test_id("trajectory")).to_have_count(0)
    report.assert_clean()


def test_text_and_status_filters_narrow_the_rows(open_report):
    report = open_report(make_document(250, steps=3))
    queries, page = report.queries, report.page
    needles = searched(queries, NEEDLE)
    assert len(needles) == 250 // 17
    page.get_by_test_id("search").fill(NEEDLE)
    report.expect_count(len(needles))
    expect(report.rows()).to_have_count(len(needles))
    page.get_by_test_id("search").fill("")
    expected = {
        "solved-any": [q for q in queries if "solved" in q["status"]],
        "solved-all": [q for q in queries if all(s == "solved" for s in q["status"])],
        "unsolved-all": [q for q in queries if all(s == "unsolved" for s in q["status"])],
        "unsure": [q for q in queries if "unsure" in q["status"]],
    }
    for option, matching in expected.items():
        assert 0 < len(matching) < 250
        page.get_by_test_id("filter-status").select_option(option)
        report.expect_count(len(matching))
        expect(report.rows()).to_have_count(min(PAGE_SIZE, len(matching)))
    page.get_by_test_id("search").fill(NEEDLE)
    both = [q for q in searched(queries, NEEDLE) if "unsure" in q["status"]]
    report.expect_count(len(both))
    assert sorted(report.rows().evaluate_all("rows => rows.map(r => r.dataset.id)")) == sorted(q["id"] for q in both)
    report.assert_clean()


def test_source_filter_touched_simulated(open_report):
    report = open_report(make_document(250, steps=3))
    simulated = [q for q in report.queries if q["sources"].get("simulated", 0) > 0]
    assert 0 < len(simulated) < 250
    report.page.get_by_test_id("filter-source").select_option("simulated")
    report.expect_count(len(simulated))
    ids = report.rows().evaluate_all("rows => rows.map(r => r.dataset.id)")
    assert ids == [q["id"] for q in simulated][:PAGE_SIZE]
    report.assert_clean()


def test_sorting_is_natural_and_by_steps(open_report):
    report = open_report(make_document(120, steps=4))
    page, steps = report.page, sorted(q["steps"] for q in report.queries)

    def first_rows():
        return report.rows().evaluate_all("rows => rows.slice(0, 3).map(r => r.dataset.id)")

    assert first_rows() == ["1", "2", "3"]
    page.get_by_test_id("sort").select_option("id-desc")
    assert first_rows() == ["120", "119", "118"]
    page.get_by_test_id("sort").select_option("steps-desc")
    assert report.rows().first.locator("td.num").inner_text() == str(steps[-1])
    page.get_by_test_id("sort").select_option("steps-asc")
    assert report.rows().first.locator("td.num").inner_text() == str(steps[0])
    report.assert_clean()


def test_markup_in_answers_shows_as_text(open_report):
    report = open_report(make_document(10, hostile=True))
    report.row("3").click()
    text = report.page.get_by_test_id("trajectory").inner_text()
    assert HOSTILE in text and CLOSER in text
    assert HOSTILE in report.row("3").inner_text()
    assert report.page.evaluate("window.pwned") is None
    assert report.page.evaluate("document.scripts.length") == 3
    report.assert_clean()


def test_baseline_highlights_exactly_the_changed_rows(open_report):
    report = open_report(make_document(60, baseline=True))
    page = report.page
    changed = report.rows().evaluate_all("rows => rows.filter(r => r.classList.contains('changed') && "
                                         "r.dataset.changed).map(r => r.dataset.id)")
    assert set(changed) == changed_ids(60)
    assert page.locator(".card-base").count() == 3  # both runs side by side in the summary
    page.get_by_test_id("filter-status").select_option("changed")
    report.expect_count(len(changed_ids(60)))
    query = next(q for q in report.queries if q["baseline"]["changed_steps"])
    report.row(query["id"]).click()
    marked = page.get_by_test_id("step").evaluate_all(
        "steps => steps.map((s, i) => s.classList.contains('changed') ? i : -1).filter(i => i >= 0)")
    assert marked == query["baseline"]["changed_steps"]
    report.assert_clean()


def test_a_finish_step_shows_the_answer_it_gives_as_text(open_report):
    document = make_document(4, steps=2)
    queries = document["runs"][0]["queries"]
    for query, return_type, text in ((queries[0], "give_answer", "Lisbon will be sunny, 23 C."),
                                     (queries[1], "give_up_and_restart", "")):
        arguments = json.dumps({"return_type": return_type, "final_answer": text})
        query["trajectory"].append({"role": "tool", "text": "", "tool": {"name": "Finish", "arguments": arguments},
                                    "answer": "", "source": None, "key": None,
                                    "finish": {"return_type": return_type, "text": text}})
        query["final_answer"], query["final"] = arguments, {"return_type": return_type, "text": text}
    report = open_report(document)
    report.row(queries[0]["id"]).click()
    trajectory = report.page.get_by_test_id("trajectory")
    finish = trajectory.get_by_test_id("finish")
    assert finish.inner_text().lower() == "final answer\nlisbon will be sunny, 23 c."
    assert "(empty)" not in trajectory.inner_text() and "return_type" not in trajectory.inner_text()
    assert trajectory.get_by_test_id("final-answer").inner_text().lower().startswith(
        "final answer\nlisbon will be sunny, 23 c.")
    report.row(queries[1]["id"]).click()
    trajectory = report.page.get_by_test_id("trajectory")
    assert "the agent gave up and restarted" in trajectory.get_by_test_id("finish").inner_text()
    assert "gave up (give_up_and_restart)" in trajectory.get_by_test_id("final-answer").inner_text().lower()
    report.assert_clean()


def test_partial_documents_open_without_errors(open_report):
    old = {"runs": [{"queries": [{"id": "a"}, {"id": "b", "status": None, "trajectory": [None, {"role": "tool"}],
                                                "sources": None, "baseline": {}}]}], "baseline": None}
    report = open_report(old, "old.html")
    report.expect_count(2)
    report.row("b").click()
    expect(report.page.get_by_test_id("step")).to_have_count(2)
    report.assert_clean()
    empty = open_report({}, "empty.html")
    empty.expect_count(0)
    empty.assert_clean()


def test_two_thousand_queries_stay_responsive(open_report):
    report = open_report(make_document(2000, steps=3, answer_chars=150, pass_k=False, stability=False))
    report.expect_count(2000)
    expect(report.rows()).to_have_count(PAGE_SIZE)
    assert report.page.evaluate("window.stbReportReady") < 5000
    took = report.page.evaluate("""() => {
        const box = document.querySelector('[data-testid="search"]');
        const start = performance.now();
        box.value = 'lisbon';
        box.dispatchEvent(new Event('input'));
        return performance.now() - start;
    }""")
    report.expect_count(len(searched(report.queries, "lisbon")))
    assert took < 500
    report.assert_clean()


def test_screenshot_is_not_blank(open_report):
    from PIL import Image

    report = open_report(make_document(40, baseline=True))
    report.row("4").click()
    image = Image.open(io.BytesIO(report.page.screenshot())).convert("RGB")
    assert image.width == 1280
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 200
    assert max(count for count, _ in colors) < 0.9 * image.width * image.height
    report.assert_clean()
