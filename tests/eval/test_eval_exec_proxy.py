"""eval exec through real proxies (issue 44): the labels recorded once with the keys, then
every run scored from the store with no key and no network, the same every time; the
same run scored live twice differs, because the stand-in API keeps state; the keys reach
the stand-ins and nothing else. Every score below was worked out by hand from the rules
(docs/eval.md, "Execution-scored REST tasks").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stbeval.cli import eval_group
from tests.exec_standins import OpenWeather, TheCatApi
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

OW_KEY, CAT_KEY = "ow-SECRET-4f1c07", "cat-SECRET-9b2e55"
KEYS_ENV = {"OPENWEATHER_API_KEY": OW_KEY, "THECATAPI_API_KEY": CAT_KEY}
NO_KEYS_ENV = {"OPENWEATHER_API_KEY": "", "THECATAPI_API_KEY": ""}


def items(ow: str, cat: str) -> list[dict]:
    weather = f"{ow}/data/2.5/weather"

    def w(query: str, flags: str = "") -> str:
        return f"curl {flags}'{weather}?{query}&appid={{API_KEY}}'"

    def item(ident, generation, labels, task="openweather", query=""):
        return {"id": ident, "task": task, "query": query or f"query of {ident}", "generation": generation,
                "labels": labels}

    fav = f"{cat}/v1/favourites"
    return [
        item("ow-exact", "Here you go:\n" + w("q=London"), [w("q=London")]),
        item("ow-reordered", f"curl -s -X GET '{weather}?appid={{API_KEY}}&units=standard&q=London'",
             [w("q=London")]),
        item("ow-metric", w("q=London&units=metric"), [w("q=London")]),
        item("ow-two-labels", f"curl -G '{weather}' -d 'q=London' -d 'appid={{API_KEY}}'",
             [w("q=Paris"), w("q=London")]),
        item("ow-unknown-city", w("q=Atlantis"), [w("q=London")]),
        item("ow-shell", w("q=London") + "; cat /etc/passwd", [w("q=London")]),
        item("ow-subst", f'curl "{weather}?q=$(hostname)&appid={{API_KEY}}"', [w("q=London")]),
        item("ow-file", f"curl -o weather.json '{weather}?q=London&appid={{API_KEY}}'", [w("q=London")]),
        item("ow-nocurl", "I cannot call APIs.", [w("q=London")]),
        item("ow-host", "curl 'http://api.example.org/data/2.5/weather?q=London'", [w("q=London")]),
        item("ow-forecast", f"curl '{ow}/data/2.5/forecast?q=London&cnt=2&appid={{API_KEY}}'",
             [f"curl '{ow}/data/2.5/forecast?q=London&cnt=3&appid={{API_KEY}}'"]),
        item("ow-geo", f"curl '{ow}/geo/1.0/direct?q=London&limit=2&appid={{API_KEY}}'",
             [f"curl '{ow}/geo/1.0/direct?q=London&limit=3&appid={{API_KEY}}'"]),
        item("ow-air", f"curl '{ow}/data/2.5/air_pollution?lat=51.51&lon=-0.13&appid={{API_KEY}}'",
             [f"curl '{ow}/data/2.5/air_pollution?lat=51.51&lon=-0.13&appid={{API_KEY}}'"]),
        item("ow-xml", w("q=London&mode=xml"), [w("q=London")]),
        item("cat-fav-add", f"""curl -s -X POST {fav} -H "x-api-key: made-up" -H "Content-Type: application/json" """
                            """-d '{"image_id":"img-9"}'""",
             [f"""curl -X POST '{fav}' -H 'Content-Type: application/json' -d '{{"image_id": "img-9"}}'"""],
             task="thecatapi"),
        item("cat-fav-delete", f"curl -X DELETE '{fav}/100'", [f"curl -X DELETE '{fav}/100'"], task="thecatapi"),
        item("cat-search", f"curl '{cat}/v1/images/search?breed_ids=beng&limit=2'",
             [f"curl '{cat}/v1/images/search?limit=3&breed_ids=beng'"], task="thecatapi"),
        item("cat-vote-bad", f"""curl -X POST {cat}/v1/votes -H 'Content-Type: application/json' """
                             """-d '{"image_id": "img-a", "value": "up"}'""",
             [(f"""curl -X POST {cat}/v1/votes -H 'Content-Type: application/json' """
               """-d '{"image_id": "img-a", "value": 1}'""")], task="thecatapi"),
        item("gen-encoded", f'curl "{cat}/v1/images/search?limit=2&breed_ids=be%6Eg"',
             [f"curl '{cat}/v1/images/search?breed_ids=beng&limit=2'"], task="generic"),
    ]


NOT_EXECUTABLE = {"ow-shell": "shell syntax: ';'", "ow-subst": "the expansion $(", "ow-file": "-o reads or writes",
                  "ow-nocurl": "no line of the generation begins with curl",
                  "ow-host": "the host api.example.org is not allowed for the task openweather"}
# id: (status, precision, recall, F1, best label), worked out by hand.
LIVE = {
    "ow-exact": ("success", 1, 1, 1, 1), "ow-reordered": ("success", 1, 1, 1, 1),
    # units=metric changes "main" only: 5 of the 6 top-level items are equal.
    "ow-metric": ("differs", 5 / 6, 5 / 6, 5 / 6, 1),
    "ow-two-labels": ("success", 1, 1, 1, 2),
    "ow-unknown-city": ("crashed", 0, 0, 0, 1),
    **{ident: ("not_executable", 0, 0, 0, 1) for ident in NOT_EXECUTABLE},
    # cnt 2 against 3: cod, message and city equal, cnt and list differ: 3 of 5.
    "ow-forecast": ("differs", 3 / 5, 3 / 5, 3 / 5, 1),
    # a list of 2 against 3, by index: P 2/2, R 2/3, F1 2 * 1 * 2/3 / (5/3) = 0.8.
    "ow-geo": ("differs", 1, 2 / 3, 0.8, 1),
    "ow-air": ("success", 1, 1, 1, 1),
    "ow-xml": ("crashed", 0, 0, 0, 1),
    "cat-fav-add": ("success", 1, 1, 1, 1),  # the new favourites' ids differ and are not compared
    "cat-fav-delete": ("crashed", 0, 0, 0, 1),  # live, the label deleted favourite 100 first
    "cat-search": ("differs", 1, 2 / 3, 0.8, 1),
    "cat-vote-bad": ("crashed", 0, 0, 0, 1),
    "gen-encoded": ("success", 1, 1, 1, 1),
}
MISSED = ("ow-metric", "ow-unknown-city", "ow-forecast", "ow-geo", "ow-xml", "cat-vote-bad")
# From the store, a prediction that is a label's request gets its recorded answer; any other is a miss.
# cat-search's request (limit=2) is gen-encoded's label: recorded, so it is scored as live.
STORE = {**LIVE, **{ident: ("missed", 0, 0, 0, 1) for ident in MISSED},
         "cat-fav-delete": ("success", 1, 1, 1, 1)}
# Per task: (items, scored, success %, crash %, precision %, recall %, F1 %), by hand from the tables above.
LIVE_TASKS = {
    "openweather": (14, 14, 100 * 4 / 14, 100 * 7 / 14, 100 * (4 + 5 / 6 + 3 / 5 + 1) / 14,
                    100 * (4 + 5 / 6 + 3 / 5 + 2 / 3) / 14, 100 * (4 + 5 / 6 + 3 / 5 + 0.8) / 14),
    "thecatapi": (4, 4, 25.0, 50.0, 50.0, 100 * (1 + 2 / 3) / 4, 45.0),
    "generic": (1, 1, 100.0, 0.0, 100.0, 100.0, 100.0),
}
STORE_TASKS = {
    "openweather": (14, 14, 100 * 4 / 14, 100 * 10 / 14, 100 * 4 / 14, 100 * 4 / 14, 100 * 4 / 14),
    "thecatapi": (4, 4, 50.0, 25.0, 75.0, 100 * (2 + 2 / 3) / 4, 70.0),
    "generic": (1, 1, 100.0, 0.0, 100.0, 100.0, 100.0),
}


def run_exec(proxy: str, items_file: Path, hosts: list[str], env: dict[str, str], *args: str):
    options = [a for host in hosts for a in ("--allow-host", host)]
    result = CliRunner().invoke(eval_group, ["exec", "--items", str(items_file), "--proxy", proxy, "--no-progress",
                                             *options, *args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def scores(out: Path) -> dict[str, tuple]:
    rows = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    return {r["id"]: (r["status"], r["precision"], r["recall"], r["f1"], r["best_label"]) for r in rows}


def check(out: Path, expected: dict[str, tuple], tasks: dict[str, tuple]) -> None:
    got = scores(out)
    assert got.keys() == expected.keys()
    for ident, row in expected.items():
        assert got[ident][0] == row[0] and got[ident][4] == row[4], (ident, got[ident])
        assert got[ident][1:4] == pytest.approx(row[1:4]), (ident, got[ident])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == "exec"
    for tally in summary["tasks"]:
        numbers = (tally["items"], tally["scored"], tally["success_rate"], tally["crash_rate"], tally["precision"],
                   tally["recall"], tally["f1"])
        assert numbers == pytest.approx(tasks[tally["task"]]), tally["task"]
    reasons = {r["id"]: r["reason"] for r in map(json.loads, (out / "items.jsonl").read_text().splitlines())}
    for ident, words in NOT_EXECUTABLE.items():
        assert words in reasons[ident]


def write_items(folder: Path, ow: OpenWeather, cat: TheCatApi) -> Path:
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items(ow.base_url, cat.base_url)))
    return path


def texts_under(folder: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


def export(store: Path, out: Path, *args: str) -> str:
    subprocess.run([sys.executable, "-m", "stbproxy", "export", "--store", str(store), "-o", str(out), *args],
                   check=True, capture_output=True, timeout=60)
    return out.read_text()


def test_labels_recorded_once_then_scored_from_the_store_the_same_every_time(tmp_path):
    store = tmp_path / "store"
    with OpenWeather(OW_KEY) as ow, TheCatApi(CAT_KEY) as cat:
        items_file = write_items(tmp_path, ow, cat)
        hosts = [ow.host, cat.host]
        with ProxyProcess(store, "--mode", "record") as proxy:
            recorded = run_exec(f"http://labels:@127.0.0.1:{proxy.port}", items_file, hosts, KEYS_ENV,
                                "--labels-only")
        labels = sum(len(i["labels"]) for i in items(ow.base_url, cat.base_url))
        assert "| openweather | 15     | 15       |" in recorded.output  # every label answered
        assert "| thecatapi   | 4      | 4        |" in recorded.output
        # The keys reached the stand-ins; OpenWeather's defaults were added except where they must not be.
        assert all(query.get("appid") == OW_KEY for _, _, query, _ in ow.seen)
        assert len(ow.seen) == 15 and len(cat.seen) == 5 and labels == 20
        for _, path, query, _ in ow.seen:
            assert ({"lang", "units", "mode"} <= set(query)) == (path == "/data/2.5/weather" or "forecast" in path)
        assert [h.get("x-api-key") for method, _, _, h in cat.seen if method != "GET"] == [CAT_KEY] * 3
    # The stand-ins are gone (no network), and no key is set.
    runs = []
    with ProxyProcess(store, "--mode", "replay") as proxy:
        for n in (1, 2):
            out = tmp_path / f"scored-{n}"
            result = run_exec(proxy.url, items_file, hosts, NO_KEYS_ENV, "--out", str(out))
            runs.append((out, result.output))
    for out, _ in runs:
        check(out, STORE, STORE_TASKS)
    first, second = runs[0][0], runs[1][0]
    for name in ("summary.json", "items.csv", "items.jsonl"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert runs[0][1].replace("scored-1", "scored-2") == runs[1][1]
    rows = {r["id"]: r for r in map(json.loads, (first / "items.jsonl").read_text().splitlines())}
    assert rows["ow-metric"]["reason"].startswith("replay miss: no stored answer for this request; the closest")
    assert "query:units (stored 'standard', got 'metric')" in rows["ow-metric"]["reason"]
    assert rows["cat-fav-delete"]["prediction"]["source"] == "cache"
    summary = json.loads((first / "summary.json").read_text())
    assert summary["sources"] == {"labels": {"cache": 20}, "predictions": {"cache": 8, "miss": 6}}
    # The text: the table, then one line per item that did not succeed.
    assert "| openweather | 14    | 14     | 28.6    | 71.4  | 28.6      |" in runs[0][1]
    assert "  openweather ow-shell: not_executable: shell syntax: ';' outside quotes" in runs[0][1]
    # The report reads the run folder: its own section, the items' commands and what differs.
    page = tmp_path / "report.html"
    report = CliRunner().invoke(eval_group, ["report", str(first), "--html", str(page)], catch_exceptions=False)
    assert report.exit_code == 0, report.output
    assert "Execution scores of items (%)" in report.output and "(19 items)" in report.output
    html = page.read_text()
    assert 'id="exec-items"' in html and "ow-two-labels" in html and "replay miss" in html
    assert "curl -o weather.json" in html and '<div hidden><section class="queries"' in html
    assert "<td>ow-metric</td>" not in html and "Differing items" in html
    from stbeval.report_data import build_document

    assert build_document([first])["runs"][0]["sources"] == {"cache": 28, "miss": 6}  # labels and predictions


def test_scored_live_twice_differs_while_the_store_does_not_and_the_keys_stay_secret(tmp_path, tls_upstream,
                                                                                       test_ca):
    store = tmp_path / "store"
    session = "exec-live"
    with OpenWeather(OW_KEY) as ow, TheCatApi(CAT_KEY) as cat:
        items_file = write_items(tmp_path, ow, cat)
        hosts = [ow.host, cat.host]
        outputs = []
        with ProxyProcess(store, "--mode", "record", "--upstream-ca", str(test_ca.ca_file)) as proxy:
            proxy_url = f"http://{session}:@127.0.0.1:{proxy.port}"
            for n in (1, 2):
                result = run_exec(proxy_url, items_file, hosts, KEYS_ENV, "--out", str(tmp_path / f"live-{n}"))
                outputs.append(result.output)
            # https through the proxy: trusted with --ca (the proxy's CA), refused in one line without it.
            https_items = tmp_path / "https.json"
            https_items.write_text(json.dumps([{
                "id": "tls", "generation": f"curl '{tls_upstream.url('/api/thing?b=2&a=1')}'",
                "labels": [f"curl '{tls_upstream.url('/api/thing?a=1&b=2')}'"]}]))
            trusted = run_exec(proxy_url, https_items, ["127.0.0.1"], {"SSL_CERT_FILE": ""}, "--out",
                               str(tmp_path / "tls"), "--ca", str(proxy.ca_file))
            assert "| generic | 1     | 1      | 100.0   |" in trusted.output
            untrusted = CliRunner().invoke(eval_group, ["exec", "--items", str(https_items), "--proxy", proxy_url,
                                                        "--allow-host", "127.0.0.1", "--out", str(tmp_path / "x")],
                                           env={"SSL_CERT_FILE": "", "REQUESTS_CA_BUNDLE": "", "CURL_CA_BUNDLE": ""})
            assert untrusted.exit_code == 1
            assert "the proxy's certificate is not trusted" in untrusted.output and "--ca" in untrusted.output
        proxy_log = "".join(proxy.output)
    check(tmp_path / "live-1", LIVE, LIVE_TASKS)
    first, second = scores(tmp_path / "live-1"), scores(tmp_path / "live-2")
    # The stand-in kept state: favourite 100 is gone, so in the second run its label fails too.
    changed = {ident for ident in first if first[ident] != second[ident]}
    assert changed == {"cat-fav-delete"}
    assert second["cat-fav-delete"][0] == "unscored"
    assert (tmp_path / "live-1" / "items.csv").read_bytes() != (tmp_path / "live-2" / "items.csv").read_bytes()
    # No key in any form: not in the run folders, the output, the proxy's log, the store's files,
    # its export or the session's.
    cassette = export(store, tmp_path / "all.yaml", "--all", "127.0.0.1*")
    session_cassette = export(store, tmp_path / "session.yaml", "--session", session)
    assert "/data/2.5/weather" in cassette and "/v1/favourites" in session_cassette
    everything = "".join([texts_under(tmp_path / "live-1"), texts_under(tmp_path / "live-2"), *outputs, proxy_log,
                          cassette, session_cassette, texts_under(store)])
    for key in (OW_KEY, CAT_KEY):
        assert key not in everything
        assert key.encode().hex() not in everything
    assert "OPENWEATHER_API_KEY (set)" in outputs[0]


def test_the_worked_example_of_docs_eval_md_prints_what_the_page_shows(tmp_path):
    """The page's blocks of the exec section run as the docs test runs them; the output shown
    after them is what the scoring command prints (the figures worked out by hand there)."""
    from tests.docblocks import REPO, PageRun, blocks

    section = [b for b in blocks(REPO / "docs" / "eval.md") if b.section.startswith("`exec`")]
    commands = [b for b in section if b.is_command and b.not_run is None]
    shown = next(b for b in section if b.lang == "").code
    assert len(commands) == 3 and shown.startswith("Execution scores of weather-items (%)")
    run = PageRun(tmp_path)
    try:
        outputs = [run.run(block) for block in commands]
    finally:
        run.close()
    for result in outputs:
        assert result.returncode == 0, result.stdout
    assert shown in outputs[-1].stdout
    assert (tmp_path / "runs" / "weather-exec.html").is_file()
