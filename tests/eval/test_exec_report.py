"""eval exec's run and what it writes: the run with a scripted sender, the run folder, the
report's text and HTML section (issue 44)."""

from __future__ import annotations

import json

from stbeval import exec_report, report
from stbeval.exec_http import Reply
from stbeval.exec_run import Item, Keys, run
from stbeval.html_report import render
from stbeval.report_data import build_document


class ScriptedSender:
    """Answers by URL, as a proxy would, and remembers what it was sent."""

    def __init__(self, answers: dict[str, Reply]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, str]] = []

    def send(self, request, _allowed):
        self.sent.append((request.method, request.url))
        return self.answers[request.url]


def ok(document, **headers) -> Reply:
    return Reply(200, {"x-stb-source": "cache", **{k.replace("_", "-"): v for k, v in headers.items()}},
                 json.dumps(document).encode())


HOSTS = ["h"]
MARKUP = "<script>alert(1)</script>"


def test_labels_run_first_then_the_prediction_one_at_a_time_and_simulated_answers_are_named():
    sender = ScriptedSender({"http://h/a": ok({"x": 1}), "http://h/b": ok({"x": 1}, x_stb_origin="simulated")})
    warnings = []
    items = [Item("1", "generic", "q", "curl http://h/b", ("curl http://h/a",)),
             Item("2", "generic", "q", "curl http://h/a", ("curl http://h/b",))]
    result = run(items, sender, Keys({}), HOSTS, warn=warnings.append)
    assert sender.sent == [("GET", "http://h/a"), ("GET", "http://h/b"), ("GET", "http://h/b"), ("GET", "http://h/a")]
    assert [r.status for r in result.results] == ["success", "success"]
    assert warnings == [
        "item 1: the prediction's answer was made up by the proxy's simulator (X-Stb-Origin: simulated)",
        "item 2: label 1's answer was made up by the proxy's simulator (X-Stb-Origin: simulated)"]


def test_a_labels_only_run_sends_no_prediction():
    sender = ScriptedSender({"http://h/a": ok({"x": 1}), "http://h/b": Reply(error="no answer within 1 s")})
    items = [Item("1", "generic", "", "curl http://h/never", ("curl http://h/a", "curl http://h/b"))]
    warnings = []
    result = run(items, sender, Keys({}), HOSTS, labels_only=True, warn=warnings.append)
    assert sender.sent == [("GET", "http://h/a"), ("GET", "http://h/b")]
    assert warnings == ["item 1: label 2 has no answer: crashed, no answer within 1 s"]
    assert "| generic | 2      | 1        | 1       | 0       | 0      |" in exec_report.labels_text(result)


def written(tmp_path):
    sender = ScriptedSender({"http://h/a": ok({"x": 1, "y": MARKUP}), "http://h/b": ok({"x": 1, "y": "z"})})
    items = [Item(MARKUP, "generic", f"query {MARKUP}", f"curl 'http://h/b?{MARKUP}'", ("curl http://h/a",)),
             Item("2", "generic", "", "curl http://h/b", ("curl http://h/a",))]
    sender.answers[f"http://h/b?{MARKUP}"] = sender.answers["http://h/b"]
    result = run(items, sender, Keys({}), HOSTS)
    out = tmp_path / "run"
    summary = exec_report.summary_of(result, "my run", "items.json")
    exec_report.write(out, result, summary)
    return out


def test_the_run_folder_and_the_reports_text(tmp_path):
    out = written(tmp_path)
    rows = (out / "items.csv").read_text().splitlines()
    assert rows[0] == "id,task,status,precision,recall,f1,best_label,source,reason,command"
    assert rows[2] == "2,generic,differs,0.5000,0.5000,0.5000,1,cache,1 equal items; differ: y,curl http://h/b"
    text = report.render([report.load_summary(out)])
    assert text.startswith("Execution scores of my run (%)\n\n| Task    | Items | Scored | Success | Crash |")
    assert "| generic | 2     | 2      | 0.0     | 0.0   | 50.0      | 50.0   | 50.0 | 2       |" in text


def test_the_html_section_shows_every_item_as_text(tmp_path):
    out = written(tmp_path)
    document = build_document([out])
    assert document["runs"][0]["metrics"][0]["label"] == "success" and document["runs"][0]["sources"] == {"cache": 4}
    page = render(document)
    section = page.split('<section class="exec" id="exec-items"', 1)[1].split("</section>", 1)[0]
    assert MARKUP not in section and "&lt;script&gt;alert(1)&lt;/script&gt;" in section
    assert section.count('<details class="exec-item"') == 2 and "Differing items" in section
    assert '<div hidden><section class="queries"' in page  # an exec run lists items, not queries
