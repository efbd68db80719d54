"""The HTML report page as text (no browser): self-contained, its data embedded once and
inert, escaped where Python writes text, small enough for a thousand queries."""

from __future__ import annotations

import html
import json
import re

import pytest

from stbeval.call_sources import source_colors
from stbeval.html_json import embed_json
from stbeval.html_report import render
from stbeval.html_script import SCRIPT
from stbeval.svg_charts import svg_bars, svg_lines
from tests.eval.report_samples import CLOSER, HOSTILE, make_document

DATA_BLOCK = re.compile(r'<script type="application/json" id="stb-data">(.*?)</script>', re.S)


def data_of(page: str) -> object:
    blocks = DATA_BLOCK.findall(page)
    assert len(blocks) == 1
    return json.loads(blocks[0])


def without_data(page: str) -> str:
    return DATA_BLOCK.sub("", page)


def test_no_network_reference_anywhere_outside_the_data():
    page = render(make_document(30, baseline=True, hostile=True))
    outside = without_data(page)
    for needle in ("http://", "https://", "//cdn", "@import", "<link", "url(", " src=", " href=", "fetch(",
                   "XMLHttpRequest", "WebSocket", "sendBeacon", "@font-face"):
        assert needle not in outside, needle
    # a strict policy forbids loading anything even if something tried
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in policy and "unsafe-eval" not in policy


def test_a_document_without_urls_gives_a_page_without_any():
    document = make_document(10)
    for query in document["runs"][0]["queries"]:
        for step in query["trajectory"]:
            step["key"] = None
    page = render(document)
    assert "http://" not in page and "https://" not in page


@pytest.mark.parametrize("baseline", [False, True])
def test_embedded_json_round_trips(baseline):
    document = make_document(25, baseline=baseline, hostile=True)
    document["title"] = "odd \u2028 and \u2029 & <b>bold</b> \U0001f600"
    assert data_of(render(document)) == document


def test_markup_in_answers_stays_inside_the_data_block_escaped():
    page = render(make_document(10, hostile=True))
    assert HOSTILE not in page and CLOSER not in page
    assert page.count("</script><script>") == 1  # the page's own: the colours' block, then the script
    assert page.index("</script><script>") == page.index(f"</script><script>{SCRIPT}")
    # the page's own tags only: the data block, the colours, the script
    assert page.count("<script") == 3 and page.count("</script>") == 3
    block = DATA_BLOCK.search(page).group(1)
    assert "<" not in block and ">" not in block and "&" not in block
    assert "\\u003cscript\\u003ewindow.pwned=1\\u003c/script\\u003e" in block


def test_embed_json_escapes_what_could_end_the_block():
    text = embed_json({"a": "</script><!-- & \u2028\u2029", "lone": "\ud800", "nan": float("nan")})
    assert re.fullmatch(r"[^<>&\u2028\u2029\ud800-\udfff]*", text)
    assert json.loads(text) == {"a": "</script><!-- & \u2028\u2029", "lone": "\ud800", "nan": None}


def test_python_side_text_is_escaped():
    document = make_document(3, baseline=True)
    document["title"] = "<img src=x onerror=alert(1)>"
    run = document["runs"][0]
    run["name"] = "<b>run</b>"
    run["metrics"][0]["label"] = "<i>SoPR</i>"
    run["groups"][0]["name"] = "<svg onload=alert(2)>"
    run["stability"]["series"][0]["name"] = "<script>alert(3)</script>"
    run["sources"]["<u>odd</u>"] = 3
    outside = without_data(render(document))
    for raw in ("<img src=x", "<b>run</b>", "<i>SoPR</i>", "<svg onload", "<script>alert(3)", "<u>odd</u>"):
        assert raw not in outside
    assert html.escape("<img src=x onerror=alert(1)>") in outside


def test_thousand_queries_three_rounds_under_five_megabytes():
    page = render(make_document(1000, 3, steps=6, answer_chars=300))
    assert len(page.encode("utf-8")) < 5_000_000
    assert len(data_of(page)["runs"][0]["queries"]) == 1000


def test_summary_shows_metrics_baseline_and_charts():
    page = without_data(render(make_document(20, baseline=True)))
    assert page.count('class="card"') == 3  # SoPR, pass^3, pass@3
    assert page.count('<div class="card-base">') == 3 and page.count("pts</span>") == 3
    assert "pass@k / pass^k" in page and "Stability under faults" in page and "Calls by source" in page
    assert 'value="changed"' in page  # the status filter offers it with a baseline
    assert 'value="simulated"' in page  # a source filter option per source present


def test_old_or_partial_documents_render():
    for document in ({}, {"runs": []}, {"runs": [{}]}, {"runs": [{"queries": [{}], "metrics": [{"label": "x"}]}],
                                                        "baseline": {"metrics": None}},
                     {"runs": [{"pass_k": {"k": [1, 2]}, "stability": {"series": [{"points": [[0, None]]}]},
                                "sources": None, "groups": [{"name": "g"}]}]}):
        page = render(document)
        assert page.startswith("<!DOCTYPE html>") and data_of(page) == document
    assert "No metrics" in render({"runs": [{}]})
    assert "–" in render({"runs": [{"metrics": [{"label": "SoPR", "value": None}]}]})
    infinite = {"runs": [{"metrics": [{"value": float("inf")}]}]}
    assert data_of(render(infinite)) == {"runs": [{"metrics": [{"value": None}]}]}


def test_svg_helpers():
    chart = svg_lines([{"name": "a", "points": [[0, 1], [10, 3]]}, {"name": "b", "points": []}],
                      title="t <x>", x_label="rate", y_label="SoPR")
    assert chart.startswith("<svg") and chart.count("<circle") == 2 and "t &lt;x&gt;" in chart
    assert svg_lines([{"points": [["x", 1]]}], title="none") == ""
    bars = svg_bars(["g1", "g2"], [{"name": "run", "values": [40.0, None]}], title="by group", max_value=100)
    assert bars.count("<rect") == 1 and "40.0" in bars
    assert svg_bars([], [], title="empty") == ""
    assert source_colors(["zeta", "cache", "alpha"]) == {"cache": "#0d9488", "alpha": "#475569", "zeta": "#0891b2"}
